"""One run of a pipeline: equal-time step budgets, the paired step-time ratios that fix them, training a
run resumably and reading its record (``pipelines.runner`` trains many: here, several on a GPU, or as
Slurm jobs).

A run lives in a folder ``D`` (an ``nfeval train`` run dir) and is finished when ``D.json`` exists:
that record is written last, after training returned or diverged, so a rerun skips the run without
calling ``train`` and a killed one is resumed from its newest checkpoint. The record holds the run's
recipe (``engine.training.recipe``), so a report can check that the runs it puts side by side share one.

Equal time, fixed before training (the paper's protocol): the baseline gets S steps; every other run's
step-time ratio to it is measured *paired* (``engine.training.step_ratio``) and the run gets S ÷ ratio steps.
The ratios are stored in one JSON file after each measurement, so every seed and rerun reuses them and a
run's budget never changes once fixed.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..base.artifacts import atomic_write_json, hardware, hardware_key
from ..base.errors import ConfigError
from ..base.jsonio import load_json
from ..base.sweep_lock import LOCK
from ..engine.checkpoints import rundir
from ..engine.training import recipe
from ..engine.training.grad_stats import GRAD_STATS
from ..engine.training.step_ratio import equal_time_steps, measure_step_ratio
from ..engine.training.train import train
from ..engine.training.train_config import TrainConfig, resolved_warmup
from ..engine.training.trainer import TrainingDiverged
from . import judging

BASELINE_MODEL = {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "method": "the baseline's model: 1"}


def equal_time_budget(budget: dict[str, float], ratio: dict[str, Any] | None) -> dict[str, float]:
    """Returns a run's TrainConfig budget: the baseline's S steps ÷ its paired step-time ``ratio`` record
    when there is one and the budget is in steps, else ``budget`` as it is."""
    if ratio is None or "max_steps" not in budget:
        return dict(budget)
    return {**budget, "max_steps": equal_time_steps(int(budget["max_steps"]), ratio["ratio"])}


def finished(directory: str) -> dict[str, Any] | None:
    """Returns the record of the finished run in ``directory`` (its ``dir`` where it lies now: the folder
    may have moved), or None."""
    path = rundir.record_path(directory)
    return load_json(path) | {"dir": directory} if os.path.isfile(path) else None


def train_seconds(directory: str) -> float:
    """Returns the training seconds the run in ``directory`` recorded (0 when it recorded none)."""
    path = os.path.join(directory, "config.json")
    return float((load_json(path).get("compute") or {}).get("wall_s") or 0.0) if os.path.isfile(path) else 0.0


def ensure_run(
    cfg: TrainConfig,
    directory: str,
    record: dict[str, Any],
    log: Callable[[str], None],
    train_now: bool = True,
) -> dict:
    """Trains ``cfg`` into ``directory`` unless it is finished, then reads it on the judging set
    (``judging``); returns its record: ``record`` (what the caller names the run by) with dir, lr,
    lr_from, warmup, recipe, status (finished|diverged), diverged_at, val_ppl (the run's own last
    validation), steps and ``judge`` (the whole validation split, per sequence).

    A finished run without a judging block is judged from its weights; one whose weights are gone (a
    committed report folder keeps records and logs only) is trained again from scratch (training is
    deterministic: the same run on the same compute path) and judged. With ``train_now`` False nothing is
    trained or judged: the record is returned as it is (None when the run is not finished)."""
    done = finished(directory)
    if done is not None:
        stale = [
            f"{name} {done.get(name)!r}, now {value!r}"
            for name, value in (("lr", cfg.lr), ("budget", record.get("budget")))
            if name in done and value is not None and done[name] != value
        ]
        if stale:
            raise ConfigError(
                f"{directory}: finished under other settings than this folder gives it now "
                f"({'; '.join(stale)}: a changed tune or step ratio); delete the run folder and its .json to "
                "retrain it"
            )
        if not train_now or done.get("status") != "finished" or judging.judged(done) is not None:
            return done
        if os.path.isfile(os.path.join(directory, rundir.WEIGHTS)):
            return _write_record(
                directory, {**done, judging.JUDGE: judging.judge_run(directory, cfg, cfg.device)}
            )
        log(f"{directory}: finished before judging sets, its weights gone; training it again to judge it")
        os.remove(rundir.record_path(directory))
        with rundir.writing(directory):
            _clear(directory, log, "its weights are not kept")
    if not train_now:
        return None
    log(f"training {cfg.preset} seed {cfg.seed} (lr {cfg.lr:g}) → {directory}")
    out = {**record, "dir": directory, "lr": cfg.lr, "lr_from": cfg.lr_from, "warmup": resolved_warmup(cfg)}
    with rundir.writing(directory):  # train() re-enters it: nobody trains here while it is cleared
        clear_unresumable(directory, log)
        try:
            summary = train(cfg, directory, resume=True)
            out.update(status="finished", diverged_at=None, val_ppl=summary["val_ppl"], steps=summary["step"])
        except TrainingDiverged as e:
            log(f"{directory} diverged: {e}")
            out.update(status="diverged", diverged_at=e.step, val_ppl=None, message=str(e))
    config = os.path.join(directory, "config.json")
    out["recipe"] = recipe.of_config(load_json(config)) if os.path.isfile(config) else None
    out["compute_path"] = compute_path(directory)
    if out["status"] == "finished":
        out[judging.JUDGE] = judging.judge_run(directory, cfg, cfg.device)
    return _write_record(directory, out)


class NotTrained(ConfigError):
    """A run that ``--reread`` would need and the folder does not hold (it trains nothing)."""


def read_or_train(
    cfg: TrainConfig, directory: str, record: dict[str, Any], log: Callable[[str], None], train_now: bool
) -> dict[str, Any]:
    """Returns ``ensure_run``'s record; with ``train_now`` False (``--reread``) the record the folder
    holds, NotTrained naming the run when it holds none."""
    done = ensure_run(cfg, directory, record, log, train_now)
    if done is None:
        raise NotTrained(
            f"{directory}: not finished; --reread trains nothing (rerun without it to train the missing runs)"
        )
    return done


def _write_record(directory: str, record: dict[str, Any]) -> dict[str, Any]:
    """Writes the finished run's record (last: its presence marks the run finished); returns it."""
    atomic_write_json(rundir.record_path(directory), record)
    return record


def clear_unresumable(directory: str, log: Callable[[str], None]) -> None:
    """Deletes what an unfinished run left in ``directory`` when it holds no checkpoint to resume from:
    its logs and config (a committed report folder keeps those of every run, so a commit made mid-run
    carries them without the checkpoints; a run killed before its first checkpoint leaves them too).
    The run then starts from update 0, as it would anyway, under the inputs it is given now. Called
    under the folder's lock."""
    if os.path.isdir(directory) and rundir.newest_valid_checkpoint(directory)[0] is None:
        _clear(directory, log, "no checkpoint to resume from")


def _clear(directory: str, log: Callable[[str], None], why: str) -> None:
    """Deletes everything in run folder ``directory`` but its lock, saying ``why``."""
    left = sorted(name for name in os.listdir(directory) if name != LOCK) if os.path.isdir(directory) else []
    if left:
        log(f"{directory}: {why}; deleting what its run left ({', '.join(left)})")
    for name in left:
        path = os.path.join(directory, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def grad_stats_path(directory: str) -> str | None:
    """Returns the gradient record of the run in ``directory`` (``TrainConfig.grad_stats``'s file), or
    None when the run recorded none. A finished run that recorded one whose file is gone (a committed
    report folder keeps each run's logs, not its gradient records) is a ConfigError saying what to do,
    never a seed silently left out of a gradient figure."""
    path = os.path.join(directory, GRAD_STATS)
    if os.path.isfile(path):
        return path
    config = os.path.join(directory, "config.json")
    if not os.path.isfile(config) or not (load_json(config).get("train") or {}).get("grad_stats"):
        return None
    raise ConfigError(
        f"{directory}: finished, but its gradient record ({GRAD_STATS}) is not in its folder (a committed "
        "report folder keeps each run's logs, not its gradient records); the gradient figures need the run "
        f"folders: rerun where they are, or delete {rundir.record_path(directory)} to retrain this run here"
    )


def compute_path(directory: str) -> str | None:
    """Returns what computed the run in ``directory``, in words: CPU linear kernel (or GPU), torch
    threads, torch's CPU instruction set and the torch, oneDNN and MKL builds; two runs of one config give
    the same final perplexity bit for bit on the same path, and can differ far more than rounding on
    another (benchmarks/RESULTS.md, "Re-run tolerance"). None: the run recorded none."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        return None
    meta = load_json(path)
    hw = (meta.get("compute") or {}).get("hardware") or {}
    prov = meta.get("provenance") or {}
    libs = prov.get("libraries") or {}
    device = hw.get("cuda_device") or f"CPU kernel {hw.get('cpu_linear_kernel', '?')}"
    onednn = (libs.get("onednn") or "").split(" (")[0].removeprefix("Intel(R) ")
    mkl = (libs.get("mkl") or "").split("-")[0].removeprefix("Intel(R) oneAPI ")
    threads = f"{hw.get('torch_threads', '?')} thread(s)"  # parallel reductions round by thread count
    parts = [
        device,
        threads,
        f"{libs.get('cpu_capability', '?')} code",
        f"torch {prov.get('torch_version', '?')}",
    ]
    return "; ".join(parts + [p for p in (onednn, mkl) if p])


def compute_paths(records: Sequence[dict[str, Any]]) -> list[str]:
    """Returns the distinct compute paths (``compute_path``) of run ``records``, "unrecorded" for a run
    that finished before they were recorded."""
    return sorted({r.get("compute_path") or compute_path(r["dir"]) or "unrecorded" for r in records})


def measure_ratios(
    path: str,
    names: Sequence[str],
    baseline_of: Callable[[str], str],
    model_of: Callable[[str], str],
    configs: Callable[[str, str], tuple[TrainConfig, TrainConfig]],
    timing: dict[str, int],
    log: Callable[[str], None],
    measure: bool = True,
) -> dict[str, dict[str, Any]]:
    """Returns {name: its paired step-time ratio record to ``baseline_of(name)``} for ``names``,
    measuring what the JSON file ``path`` does not hold yet (stored after each measurement).

    Runs whose model (``model_of``: a key of everything that shapes a step) is their baseline's have ratio
    1; runs sharing a model share one measurement (``shared_with``). ``configs(name, base)`` gives the
    (baseline, candidate) TrainConfigs to time; ``timing`` holds ``pairs``, ``burst``, ``warmup`` and
    optionally ``sharing`` (``engine.training.step_ratio.measure_step_ratio``).
    Without ``measure`` (``--reread``) nothing is timed: the runs without a stored ratio are left out."""
    stored: dict[str, dict[str, Any]] = load_json(path) if os.path.isfile(path) else {}
    for name in names:
        if name in stored or not measure:
            continue
        base = baseline_of(name)
        model = model_of(name)
        measured = [k for k, r in stored.items() if "pairs" in r and "shared_with" not in r]
        shared = next((k for k in measured if _model_or_none(model_of, k) == model), None)
        if model == model_of(base):
            record = dict(BASELINE_MODEL)
        elif shared is not None:
            record = {**stored[shared], "shared_with": shared}
        else:
            pairs = f"{timing['pairs']} pairs of {timing['burst']}-step bursts"
            if timing.get("sharing"):
                pairs += f", {timing['sharing']} neighbour run(s) training on the device as the runs will"
            log(f"timing {name} against {base}, paired ({pairs})")
            result = measure_step_ratio(*configs(name, base), **timing)
            record = {
                **result.to_dict(),
                "load_average": round(os.getloadavg()[0], 2),
                "hardware": hardware_key(hardware()),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
        stored[name] = {**record, "baseline": base}
        atomic_write_json(path, stored)
    return {name: stored[name] for name in names if name in stored}


def _model_or_none(model_of: Callable[[str], str], name: str) -> str | None:
    try:
        return model_of(name)
    except KeyError:  # a measurement of a run this version no longer plans
        return None
