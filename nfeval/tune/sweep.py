"""``nfeval tune``: pretraining learning-rate sweeps per architecture, so baselines are well tuned.

The paper compares NormFormer against Pre-LN baselines whose learning rates were tuned per architecture
and size; a comparison at whatever LR one typed can be won by a badly tuned baseline. ``nfeval tune
--preset A --preset B --lrs 1e-3,3e-3,... --budget steps=2000 --out DIR`` trains every (preset, lr,
seed) point for the same short budget on the same data, with ``nfeval train``'s data, batch and
optimiser flags (the same for every point), and writes

    DIR/points/<preset>/lr=<lr>/seed=<s>/   a run dir of nfeval train (+ train.log, and point.json last)
    DIR/tune.json                           provenance, grid, budget, per-point results, best LR per
                                            preset (nfeval.tune.results), stability, missing points
    DIR/tune.png                            final validation PPL vs LR, one line per preset

``nfeval train --lr-from DIR/tune.json`` then trains at the tuned LR of its preset and records where
the LR came from. Cost: presets × LRs × seeds runs of the budget (run ``--jobs N`` at a time).

Resume. A point is finished when its ``point.json`` (written last, holding the point's config as
its key) exists; a rerun skips finished points, resumes a killed one from its newest checkpoint
(``--ckpt-interval``) and refuses a point folder written under a different config. The key names the
data and tokenizer files by what they hold (``nfeval.engine.training.input_fingerprints``), not by path, so a
tune folder may be moved or copied (to another path or machine), and its data and tokenizer too, then
resumed or reused there; a data file whose content changed is refused. Keys of an older nfeval (paths)
are accepted in place and rewritten. A diverged point is a finished result (marked, never best).
``--report-only`` writes tune.json from the finished points and lists the missing ones.

Concurrent tunes into one ``--out`` claim each point with the lock GLUE's sweep uses
(``nfeval.base.sweep_lock``): a point is trained once, by whichever tune claims it first; the other
skips it and, at its end, waits for it and reads its result.

Slurm (``--launcher slurm``, ``nfeval.launch``): the unfinished points run as one job array, a job
per point, each requeued after preemption and resumed from its checkpoint; a rerun submits only the
points neither finished nor still queued.

Parallel points (``--jobs N``): N spawned processes (``launch.local.worker_pool``), each with its own GPU
when there are several (``cuda:i`` round-robin) and ``cores / N`` torch threads. The tokenizer and token
caches are built here before the workers start, so they are built once. A ``seconds`` budget is calibrated
per point: step counts then vary with machine load (tune.json records each point's steps).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

from ..base.artifacts import atomic_write_json, provenance
from ..base.errors import ConfigError, DataError, MissingDataError
from ..base.jsonio import load_json
from ..base.progress import progress_bar
from ..base.sweep_lock import claim_and_run
from ..base.sweep_points import point_dir
from ..engine.training import recipe
from ..engine.training.input_fingerprints import INPUT_PATH_FIELDS, input_fingerprints
from ..engine.training.run_inputs import build_inputs, inputs_key
from ..engine.training.train import train
from ..engine.training.train_config import TrainConfig
from ..engine.training.trainer import TrainingDiverged
from ..launch import cluster, local
from ..launch.jobs import LaunchPoint
from ..launch.options import LaunchOptions
from . import results as tune_results
from .points import POINT, POINTS, finished_point, point_config, point_key

LOG = "train.log"


def parse_budget(spec: str) -> tuple[str, float]:
    """Returns (TrainConfig budget field, value) for ``steps=N``, ``tokens=N``, ``flops=X``, ``seconds=X``."""
    unit, sep, value = spec.partition("=")
    field = tune_results.BUDGET_FIELDS.get(unit.strip())
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or field is None or not number > 0 or not math.isfinite(number):
        raise ConfigError(
            f"--budget {spec!r}: expected UNIT=N with UNIT in {list(tune_results.BUDGET_FIELDS)} and N > 0, "
            "e.g. steps=2000"
        )
    return field, int(number) if field in ("max_steps", "max_tokens") else number


def run_point(
    cfg: TrainConfig, directory: str, key: dict[str, Any], wait: bool = True
) -> dict[str, Any] | None:
    """Returns the point's result (``key``: its ``point_key``), trained under the point's lock
    (``nfeval.base.sweep_lock``, as GLUE's points are): read back when another tune finished it
    meanwhile; None when another live tune holds the lock and ``wait`` is False."""
    return claim_and_run(
        directory, lambda: finished_point(directory, cfg, key), lambda: train_point(cfg, directory, key), wait
    )


def train_point(cfg: TrainConfig, directory: str, key: dict[str, Any]) -> dict[str, Any]:
    """Trains one point into ``directory`` (resuming a killed one), writes ``point.json`` (holding
    ``key``) last; returns it.

    train()'s log lines go to ``directory/train.log``. A TrainingDiverged or a non-finite final
    validation loss makes the point ``diverged``, itself a finished result.
    """
    if local.worker_device() is not None:  # a pool worker trains on the device it was bound to
        cfg = dataclasses.replace(cfg, device=local.worker_device())
    os.makedirs(directory, exist_ok=True)
    summary, message = {}, None
    with open(os.path.join(directory, LOG), "a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
        try:
            summary = train(cfg, directory, resume=True)
        except TrainingDiverged as e:
            message = str(e)
    val_loss = summary.get("val_loss")
    finite = val_loss is not None and math.isfinite(val_loss)
    saved = os.path.join(directory, "config.json")
    meta = load_json(saved) if os.path.isfile(saved) else {}
    result = {
        "preset": cfg.preset,
        "lr": cfg.lr,
        "seed": cfg.seed,
        "status": tune_results.DIVERGED if message else tune_results.OK,
        "message": message,
        "val_loss": val_loss if finite else None,
        "val_ppl": summary.get("val_ppl") if finite else None,
        "vocab_size": (meta.get("model") or {}).get("vocab_size"),
        **{k: summary.get(k) for k in ("step", "tokens", "flops", "wall_s")},
        "run_dir": directory,
        "data_fingerprint": (meta.get("provenance") or {}).get("data_fingerprint"),
        "key": key,
        "provenance": provenance(seed=cfg.seed),
    }
    (result,) = tune_results.mark_diverged([result])
    atomic_write_json(os.path.join(directory, POINT), result)
    return result


def build_data_caches(configs: Sequence[TrainConfig]) -> None:
    """Builds each distinct corpus' tokenizer and token shards of ``configs`` here, once, so that
    parallel workers only read them."""
    built = set()
    for cfg in configs:
        if inputs_key(cfg) not in built:
            build_inputs(cfg)
            built.add(inputs_key(cfg))


def point_name(cfg: TrainConfig) -> str:
    """Returns a point's name in progress lines and Slurm records: preset/lr=…/seed=…."""
    return f"{cfg.preset}/lr={tune_results.lr_key(cfg.lr)}/seed={cfg.seed}"


def run_here(
    todo: Sequence[TrainConfig], dirs: Sequence[str], keys: Sequence[dict], jobs: int, progress: bool
) -> list[dict]:
    """Runs the unfinished points (their configs, dirs and keys), ``jobs`` at a time; returns their
    results in completion order. A point another tune is training (its lock held) is set aside and
    waited for at the end (``launch.local.run_deferring``)."""
    bar = progress_bar(total=len(todo), enabled=progress and bool(todo), desc="tune", unit="point")
    results = []

    def done(point: LaunchPoint, result: dict) -> None:
        results.append(result)
        ppl = result["status"] if result["val_ppl"] is None else f"val ppl {result['val_ppl']:.2f}"
        bar.write(f"{result['preset']} lr={tune_results.lr_key(result['lr'])} seed={result['seed']}: {ppl}")
        bar.update(1)

    if jobs > 1 and len(todo) > 1:
        build_data_caches(todo)
    points = [
        LaunchPoint(point_name(c), run_point, (c, d, k), d, kwargs={"wait": False})
        for c, d, k in zip(todo, dirs, keys)
    ]
    device = todo[0].device if todo else "auto"
    local.run_deferring(points, done, jobs=jobs, device=device)
    bar.close()
    return results


def run_todo(
    todo, dirs, keys, jobs: int, progress: bool, launch: LaunchOptions | None, out_dir: str
) -> list[dict]:
    """Returns the results of the unfinished points, run here ``jobs`` at a time (``run_here``) or, with
    ``--launcher slurm``, as one job array of a job per point running ``run_point`` (the jobs that
    finished; none with ``--no-wait``: a rerun collects them)."""
    if launch is None or not launch.on_cluster:
        return run_here(todo, dirs, keys, jobs, progress)
    named = [LaunchPoint(point_name(c), run_point, (c, d, k), d) for c, d, k in zip(todo, dirs, keys)]
    return cluster.run_points(named, out_dir, launch, "tune", progress) or []


def _missing(grid: Sequence[tuple[str, float, int]], points: Sequence[dict]) -> list[dict]:
    """Returns the (preset, lr, seed) points of ``grid`` without a result in ``points``."""
    have = {(r["preset"], tune_results.lr_key(r["lr"]), r["seed"]) for r in points}
    return [
        {"preset": p, "lr": lr, "seed": s} for p, lr, s in grid if (p, tune_results.lr_key(lr), s) not in have
    ]


def _check_inputs(
    base: TrainConfig, presets: Sequence[str], lrs: Sequence[float], seeds: int, jobs: int
) -> None:
    if not presets:
        raise ConfigError("no --preset given: name at least one, e.g. --preset prenorm-tiny")
    if not lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise ConfigError(f"--lrs {list(lrs)}: expected one or more positive learning rates")
    if seeds < 1 or jobs < 1:
        raise ConfigError(f"--seeds {seeds}, --jobs {jobs}: expected positive integers")
    for name in ("train_data", "valid_data", "tokenizer"):
        path = getattr(base, name)
        if path and not os.path.exists(path):
            raise MissingDataError(f"--{name.replace('_', '-')} {path}: no such file or folder")


def _consistency_warnings(points: Sequence[dict]) -> list[str]:
    """Raises DataError when one preset's points saw different data; warns when presets did, or when a
    preset's finished points ran different step counts (a seconds budget is calibrated per point)."""
    by_preset: dict[str, set] = {}
    warnings = []
    for p in points:
        by_preset.setdefault(p["preset"], set()).add(p.get("data_fingerprint"))
    for preset, prints in by_preset.items():
        if len(prints) > 1:
            raise DataError(
                f"the points of {preset} were trained on different data ({sorted(map(str, prints))})"
            )
        steps = [p["step"] for p in points if p["preset"] == preset and p["status"] == tune_results.OK]
        if len(set(steps)) > 1:
            warnings.append(
                f"{preset}: the points ran {min(steps)}–{max(steps)} steps (time budget: machine load)"
            )
    if len({fp for prints in by_preset.values() for fp in prints}) > 1:
        warnings.append(
            "presets were trained on different data or tokenizers: their perplexities are not comparable"
        )
    return warnings


def _point_configs(base: TrainConfig, grid: Sequence[tuple[str, float, int]], budget: tuple[str, float]):
    """Returns the validated config of each (preset, lr, seed) point of ``grid``."""
    configs = [point_config(base, p, lr, s, budget) for p, lr, s in grid]
    for cfg in configs:
        try:
            cfg.validate()
        except ValueError as e:
            raise ConfigError(f"{cfg.preset} lr={cfg.lr:g}: {e}") from None
    return configs


def tune(
    base: TrainConfig,
    presets: Sequence[str],
    lrs: Sequence[float],
    budget: str,
    out_dir: str,
    seeds: int = 1,
    jobs: int = 1,
    progress: bool = True,
    report_only: bool = False,
    launch: LaunchOptions | None = None,
    extra: dict[str, Sequence[float]] | None = None,
) -> dict[str, Any]:
    """Trains every unfinished (preset, lr, seed) point of the grid for ``budget``, then writes and returns
    ``out_dir/tune.json``: provenance, grid, budget, per-point results, missing points, per-preset best LR
    and stability (``tune_results.summarize``), warnings; also draws ``out_dir/tune.png``.

    ``base`` supplies everything but preset, lr, seed and budget; seeds are base.seed … base.seed+seeds-1.
    ``report_only`` runs nothing and summarises the finished points; ``launch``: see ``run_todo``;
    ``extra``: LRs one preset tries beside the grid ({preset: [lr, ...]}: the band's neighbours of its
    best, ``pipelines.lr_band``).
    """
    presets, lrs = list(dict.fromkeys(presets)), sorted(set(float(x) for x in lrs))
    _check_inputs(base, presets, lrs, seeds, jobs)
    field = parse_budget(budget)
    seed_list = [base.seed + i for i in range(seeds)]
    extra = {p: sorted(set(map(float, v)) - set(lrs)) for p, v in (extra or {}).items() if p in presets}
    grid = [(p, lr, s) for p in presets for lr in sorted([*lrs, *extra.get(p, ())]) for s in seed_list]
    configs = _point_configs(base, grid, field)
    dirs = [point_dir(out_dir, POINTS, p, lr, s) for p, lr, s in grid]
    inputs = input_fingerprints(base)  # every point reads the same files: read once
    keys = [point_key(c, inputs) for c in configs]
    finished = [finished_point(d, c, k) for c, d, k in zip(configs, dirs, keys)]
    todo = [i for i, f in enumerate(finished) if f is None]
    print(
        f"nfeval tune: {len(grid)} point(s), {len(grid) - len(todo)} finished, {len(todo)} to run", flush=True
    )
    points = [f for f in finished if f is not None]
    if not report_only:
        points += run_todo(
            *([seq[i] for i in todo] for seq in (configs, dirs, keys)), jobs, progress, launch, out_dir
        )
    spec = {"presets": presets, "lrs": lrs, "seeds": seed_list, **({"extra_lrs": extra} if extra else {})}
    summary = _summary(base, spec, budget, grid, points, keys[0])
    atomic_write_json(os.path.join(out_dir, "tune.json"), summary)
    if summary["points"]:
        tune_results.plot(summary, os.path.join(out_dir, "tune.png"))
    return summary


def _summary(
    base: TrainConfig,
    spec: dict[str, list],
    budget: str,
    grid: Sequence[tuple[str, float, int]],
    points: list[dict],
    key: dict[str, Any],
) -> dict[str, Any]:
    """Returns tune.json's record: provenance, the grid (``spec``: its presets, lrs and seeds), the
    budget, the base config (``key``: a point's key), the recipe, per-preset best LR and stability, the
    ``points`` in grid order (diverged ones marked), the missing points and the warnings."""
    field = parse_budget(budget)
    points = tune_results.mark_diverged(points)
    order = {(p, tune_results.lr_key(lr), s): i for i, (p, lr, s) in enumerate(grid)}
    points.sort(key=lambda r: order[r["preset"], tune_results.lr_key(r["lr"]), r["seed"]])
    summary_presets = tune_results.summarize(
        points, spec["presets"], spec["lrs"], spec["seeds"], spec.get("extra_lrs")
    )
    tuned_recipe, recipe_warnings = _recipe(base, points)
    return {
        "nfeval": {"provenance": provenance(), "command": "tune"},
        "grid": spec,
        "budget": {"spec": budget, "field": field[0], "value": field[1]},
        "base_config": {n: getattr(base, n) for n in INPUT_PATH_FIELDS}
        | {k: v for k, v in key.items() if k not in ("preset", "lr", "seed")},
        "recipe": tuned_recipe,  # engine.training.recipe's record every point trained under (None: they
        # differ)
        "presets": summary_presets,
        "points": [{k: v for k, v in r.items() if k not in ("key", "provenance")} for r in points],
        "missing": _missing(grid, points),
        "warnings": _consistency_warnings(points)
        + tune_results.warnings_for(summary_presets)
        + recipe_warnings,
    }


def _recipe(base: TrainConfig, points: Sequence[dict]) -> tuple[dict[str, Any] | None, list[str]]:
    """Returns (the recipe of the grid's points, []) or, when their run folders record different or
    unknown recipes, (None, the reason)."""
    recipes = {"the grid's base config": recipe.of_train_config(base)}
    for point in points:
        config = os.path.join(point["run_dir"], "config.json")
        if os.path.isfile(config):
            recipes[point["run_dir"]] = recipe.of_config(load_json(config))
    try:
        return recipe.check_same(recipes, "tune"), []
    except ConfigError as e:
        return None, [str(e)]


# ---------------------------------------------------------------------------------------- CLI
