"""A training run as ``nfeval compare`` reads it from its run dir: the validation and training points of
``metrics.jsonl`` (a resumed run's later line for a step wins; compute must be cumulative), the median
step time, and from ``config.json`` the architecture, hardware, LR, scheduled steps, recipe and paired
step-time ratio. Errors name the file and the line."""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Any

from ..base.artifacts import hardware_key
from ..base.errors import DataError, MissingDataError
from ..base.jsonio import file_sha256, load_json
from ..engine.checkpoints import rundir
from ..engine.model.config import ModelConfig
from ..engine.training import recipe
from ..tune.results import describe_lr
from . import time_clock

AXES = ("flops", "wall_s")
REQUIRED = {
    "train": ("step", "tokens", "wall_s", "flops"),
    "val": ("step", "tokens", "wall_s", "flops", "val_ppl"),
}


@dataclass
class Run:
    """One training run as read from its run dir."""

    name: str
    path: str
    val: list[dict[str, Any]]  # validation points in step order (step, tokens, wall_s, flops, val_ppl)
    progress: list[dict[str, Any]]  # every logged point in step order, for steps/tokens at a budget
    step_time_s: float | None  # median training seconds per step (see step_time)
    architecture: str | None
    hardware: str | None
    tokenizer_sha256: str | None
    warnings: list[str]
    lr: dict[str, Any] | None = None  # peak LR and where it came from (tune_results.describe_lr)
    total_steps: int | None = None  # the steps its LR schedule spans (None: its last logged step)
    recipe: dict[str, Any] | None = None  # engine.training.recipe's record (None: the run cannot tell it)
    timing: dict[str, Any] | None = None  # its paired step-time ratio, from its record (time_clock)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def split_metrics(path: str) -> tuple[list[dict], list[dict], list[str]]:
    """Returns (validation points, training points, warnings) of a ``metrics.jsonl``, each list in step order.

    A resumed run logs again the steps after its last checkpoint: the later line for a step wins. An
    unparsable *last* line (a run killed mid-write) is dropped with a warning; any other bad line is an error.
    """
    records, warnings = rundir.metric_records(path)
    points: dict[str, dict[int, dict]] = {"train": {}, "val": {}}
    for lineno, record in records:
        if not isinstance(record, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        kind = record.get("kind")
        if kind not in REQUIRED:
            continue  # other line kinds belong to other tools
        for key in REQUIRED[kind]:
            value = record.get(key)
            if key == "val_ppl" and _number(value) and math.isnan(value):
                value = record[key] = math.inf  # a diverged run: never reaches anything
            if not _number(value) or value < 0 or (key != "val_ppl" and not math.isfinite(value)):
                raise DataError(
                    f"{path}:{lineno}: field {key!r} of a {kind!r} line is {value!r}; expected a "
                    "non-negative number"
                )
        points[kind][int(record["step"])] = {**record, "line": lineno}
    val, train = ([by_step[s] for s in sorted(by_step)] for by_step in (points["val"], points["train"]))
    for series in (val, train):  # interpolation needs cumulative, strictly increasing compute
        for axis in AXES:
            for prev, cur in zip(series, series[1:]):
                if cur[axis] <= prev[axis]:
                    raise DataError(
                        f"{path}:{cur['line']}: {axis!r} is {cur[axis]} at step {cur['step']}, not above "
                        f"{prev[axis]} at "
                        f"step {prev['step']}; expected cumulative values"
                    )
    return val, train, warnings


def _tokenizer_sha256(run_dir: str) -> str | None:
    path = os.path.join(run_dir, rundir.TOKENIZER)
    if not os.path.isfile(path):
        return None
    return file_sha256(path)


def step_time(train: list[dict]) -> float | None:
    """Returns the median seconds per step over logging intervals after the first (start-up, compilation)."""
    points = [(p["step"], p["wall_s"]) for p in train]
    rates = [(w1 - w0) / (s1 - s0) for (s0, w0), (s1, w1) in zip(points, points[1:]) if s1 > s0]
    if rates:
        return statistics.median(rates)
    return points[-1][1] / points[-1][0] if points and points[-1][0] > 0 else None


def load_run(run_dir: str, name: str | None = None) -> Run:
    """Returns the run stored in ``run_dir`` (``metrics.jsonl`` + ``config.json``); errors name file and
    line."""
    if not os.path.isdir(run_dir):
        raise MissingDataError(f"{run_dir}: no such run directory")
    metrics = os.path.join(run_dir, rundir.METRICS)
    val, train, warnings = split_metrics(metrics)
    if not val:
        raise DataError(f"{metrics}: no 'val' lines; expected validation points to compare")
    if not any(math.isfinite(p["val_ppl"]) for p in val):
        warnings.append(f"{metrics}: every validation perplexity is infinite or NaN (diverged run)")
    config_path = os.path.join(run_dir, rundir.CONFIG)
    config = load_json(config_path)
    model = config.get("model")
    architecture = (
        ModelConfig.from_dict(model, source=f"{config_path} field 'model'").architecture
        if isinstance(model, dict)
        else None
    )
    hw = (config.get("compute") or {}).get("hardware") or (config.get("provenance") or {}).get("hardware")
    if not isinstance(hw, dict):
        warnings.append(
            f"{config_path}: no 'compute.hardware' or 'provenance.hardware'; wall-clock comparison unverified"
        )
    progress = {p["step"]: p for p in val} | {p["step"]: p for p in train}
    return Run(
        name=name or os.path.basename(os.path.normpath(run_dir)),
        path=run_dir,
        val=val,
        progress=[progress[s] for s in sorted(progress)],
        step_time_s=step_time(train),
        architecture=architecture,
        hardware=hardware_key(hw) if isinstance(hw, dict) else None,
        tokenizer_sha256=_tokenizer_sha256(run_dir),
        warnings=warnings,
        lr=describe_lr((config.get("train") or {}).get("config") or {}),
        total_steps=_total_steps(config),
        recipe=recipe.of_config(config),
        timing=time_clock.read_timing(run_dir),
    )


def _total_steps(config: dict[str, Any]) -> int | None:
    total = (config.get("train") or {}).get("total_steps")
    return int(total) if _number(total) and total > 0 else None
