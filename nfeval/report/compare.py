"""``nfeval compare``: training runs side by side at equal compute.

Reads each run dir's ``metrics.jsonl`` (``kind: val`` and ``kind: train`` lines) and ``config.json``
(``compare_read``) and reports, against a baseline run (the first, unless ``--baseline``):

- validation perplexity of each run at an equal budget of FLOPs and of wall-clock seconds, the budget
  being the smallest final compute among the runs (so nobody is extrapolated);
- the fraction of the baseline's compute each run needed to reach the baseline's best validation
  perplexity (the paper's "NormFormer reaches the baseline's perplexity with 60% of the compute"),
  or "not reached"; time on the one clock of ``time_clock`` (the runs' paired step-time ratios when
  their records hold them, else measured seconds), named in ``time_clock`` of the result;
- steps and tokens seen, and the per-step time overhead (median step time over the baseline's, minus 1;
  the median over logging intervals, leaving out the first, so start-up and compilation do not count).

Between consecutive validation points perplexity is interpolated linearly in perplexity; values are
never extrapolated past a run's first or last validation point.

Runs of different training recipes (``engine.training.recipe``: initialisation, positions, embedding scale,
optimizer, schedule, precision) are refused, naming the field that differs, as are runs whose recipe
cannot be told (trained before nfeval recorded the initialisation); ``mixed_recipes=True``
(``--mixed-recipes``) compares them anyway, and the result and its table say so on their first line.

Mid-schedule readings are labelled, not refused. A run whose final compute is above the equal budget is
read before the end of its own LR schedule (its LR not yet decayed), against a run read at its
decayed end: that reading is not compute-matched, it compares two points of two schedules. Each
``at_equal`` value carries its ``schedule_fraction`` (steps at the budget ÷ the run's scheduled
steps, ``train.total_steps`` of config.json) and ``mid_schedule`` (the fraction is below
1 − MID_SCHEDULE_TOLERANCE); the result lists, per axis, the runs read mid-schedule, and the table
marks their cells "not compute-matched (mid-schedule)". Runs given the same time with complete
schedules (``nfeval reproduce``'s paired step-time ratio) end together and read at their ends.
"""

from __future__ import annotations

import bisect
import math
import os
from typing import Any

from ..base.artifacts import provenance
from ..base.errors import ConfigError, DataError
from ..engine.checkpoints import rundir
from ..engine.training import recipe
from . import time_clock
from .compare_read import AXES, Run, load_run

AXIS_LABELS = {"flops": "FLOPs", "wall_s": "time"}
NOT_REACHED = "not reached"
MID_SCHEDULE = "not compute-matched (mid-schedule)"
# A reading in the last 2% of a run's steps counts as its end: under the linear decay its LR is then
# less than 2% of the peak above its final value.
MID_SCHEDULE_TOLERANCE = 0.02


def interpolate(x: float, xs: list[float], ys: list[float]) -> float | None:
    """Returns y at ``x`` by linear interpolation on increasing ``xs``; None outside [xs[0], xs[-1]]."""
    if not xs or x < xs[0] or x > xs[-1]:
        return None
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    if math.isinf(y0) or math.isinf(y1):
        return math.inf
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def crossing(val: list[dict], target: float) -> dict[str, Any] | None:
    """Returns where validation perplexity first reaches ``target`` (step, tokens, flops, wall_s), or None.

    The point is interpolated linearly in perplexity between the last validation point above the target
    and the first at or below it. ``bound`` is "at_most" when the very first point is already at or below
    the target (the crossing lies somewhere before it), else "interpolated".
    """
    for i, point in enumerate(val):
        if point["val_ppl"] > target:
            continue
        if i == 0:
            return {"bound": "at_most", **{k: point[k] for k in ("step", "tokens", *AXES)}}
        prev = val[i - 1]
        t = (
            1.0
            if math.isinf(prev["val_ppl"])
            else (prev["val_ppl"] - target) / (prev["val_ppl"] - point["val_ppl"])
        )
        return {
            "bound": "interpolated",
            **{k: prev[k] + t * (point[k] - prev[k]) for k in ("step", "tokens", *AXES)},
        }
    return None


def _at_budget(run: Run, axis: str, budget: float) -> dict[str, Any]:
    """Returns the run's validation PPL, steps and tokens at ``budget`` on ``axis``, and where in its
    schedule that reading falls (``schedule_fraction``, ``mid_schedule``: see the module docstring)."""
    xs = [0.0] + [p[axis] for p in run.progress]
    steps = interpolate(budget, xs, [0.0] + [p["step"] for p in run.progress])
    total = run.total_steps or run.progress[-1]["step"]
    fraction = steps / total if steps is not None and total else None
    return {
        "val_ppl": interpolate(budget, [p[axis] for p in run.val], [p["val_ppl"] for p in run.val]),
        "steps": steps,
        "tokens": interpolate(budget, xs, [0.0] + [p["tokens"] for p in run.progress]),
        "schedule_fraction": fraction,
        "mid_schedule": fraction is not None and fraction < 1 - MID_SCHEDULE_TOLERANCE,
    }


def _shared_recipe(runs: list[Run], mixed_ok: bool) -> tuple[dict[str, Any] | None, list[str]]:
    """Returns (the recipe every run shares, []) or, when ``mixed_ok``, (None, what differs); raises
    ConfigError on different or unknown recipes otherwise."""
    recipes = {run.name: run.recipe for run in runs}
    try:
        return recipe.check_same(recipes, "compare"), []
    except ConfigError as e:
        if not mixed_ok:
            raise ConfigError(f"{e}; pass --mixed-recipes to compare them anyway, labelled") from None
        base = runs[0]
        return None, [
            f"{run.name}: "
            + (
                "recipe unknown"
                if run.recipe is None or base.recipe is None
                else "; ".join(recipe.differences(base.recipe, run.recipe))
            )
            for run in runs[1:]
            if run.recipe is None or base.recipe is None or recipe.differences(base.recipe, run.recipe)
        ]


def _check_comparable(runs: list[Run]) -> list[str]:
    warnings = [w for run in runs for w in run.warnings]
    keys = {run.name: run.hardware for run in runs}
    if len(set(keys.values())) > 1:
        detail = "; ".join(f"{name}: {key or 'unknown'}" for name, key in keys.items())
        warnings.append(
            f"runs were measured on different hardware ({detail}): the wall-clock comparison is "
            "meaningless, FLOPs still hold"
        )
    tuned = {run.name: run.lr["tuned"] for run in runs if run.lr and run.lr["lr"] is not None}
    if len(set(tuned.values())) > 1:
        untuned = ", ".join(name for name, t in tuned.items() if not t)
        warnings.append(
            f"{untuned}: untuned learning rate beside tuned runs; the comparison may favour the tuned side"
        )
    shas = {run.name: run.tokenizer_sha256 for run in runs if run.tokenizer_sha256}
    if len(set(shas.values())) > 1:
        warnings.append(
            f"runs use different tokenizers ({', '.join(shas)}): their per-token perplexities are not "
            "comparable"
        )
    sizes = {
        run.name: run.progress[-1]["tokens"] / run.progress[-1]["step"]
        for run in runs
        if run.progress[-1]["step"] > 0
    }
    if len({round(v) for v in sizes.values()}) > 1:
        warnings.append(
            "runs use different tokens per step: the per-step time overhead compares steps of different sizes"
        )
    return warnings


def _load_runs(run_dirs: list[str], baseline: str | None, names: list[str] | None) -> list[Run]:
    """Returns the runs, the baseline first (loaded too when not among ``run_dirs``)."""
    if names is not None and len(names) != len(run_dirs):
        raise ConfigError(f"--names: {len(names)} names for {len(run_dirs)} runs")
    runs = [load_run(d, n) for d, n in zip(run_dirs, names or [None] * len(run_dirs))]
    if not runs:
        raise ConfigError("compare: no run directories given")
    if baseline is not None:
        match = [
            r for r in runs if r.name == baseline or os.path.normpath(r.path) == os.path.normpath(baseline)
        ]
        runs = match[:1] + [r for r in runs if r is not match[0]] if match else [load_run(baseline)] + runs
    if len({r.name for r in runs}) < len(runs):
        raise ConfigError(f"compare: run names {[r.name for r in runs]} are not unique; pass --names")
    return runs


def _row(run: Run, base: Run, best: dict, budget: dict, ratios: dict[str, float] | None) -> dict[str, Any]:
    """Returns one run's row: its totals, values at the equal budget and the cost to the target (time on
    the paired clock when ``ratios`` holds the runs' step-time ratios: ``time_clock``)."""
    reached = crossing(run.val, best["val_ppl"])
    finite_ppl = [p["val_ppl"] for p in run.val if math.isfinite(p["val_ppl"])]
    last = run.progress[-1]
    return {
        "name": run.name,
        "path": os.path.abspath(run.path),
        "architecture": run.architecture,
        "hardware": run.hardware,
        "lr": run.lr,
        "steps": last["step"],
        "total_steps": run.total_steps or last["step"],
        "tokens": last["tokens"],
        "flops": last["flops"],
        "wall_s": last["wall_s"],
        "best_val_ppl": min(finite_ppl, default=None),
        "final_val_ppl": run.val[-1]["val_ppl"],
        "step_time_s": run.step_time_s,
        "step_ratio": ratios[run.name] if ratios else None,
        "step_time_overhead": run.step_time_s / base.step_time_s - 1
        if run.step_time_s and base.step_time_s
        else None,
        "at_equal": {axis: _at_budget(run, axis, budget[axis]) for axis in AXES},
        "val": [{k: p[k] for k in ("step", "tokens", *AXES, "val_ppl")} for p in run.val],
        "to_target": {
            "reached": reached is not None,
            **(reached or {}),
            "fraction": {
                "flops": reached["flops"] / best["flops"] if reached else None,
                "wall_s": time_clock.fraction(reached, best, ratios, run.name, base.name),
            },
        },
    }


def compare(
    run_dirs: list[str],
    baseline: str | None = None,
    names: list[str] | None = None,
    mixed_recipes: bool = False,
) -> dict[str, Any]:
    """Returns the compute-matched comparison of ``run_dirs`` as a JSON-safe dict (see the module docstring).

    ``baseline`` (a run dir or a name) defaults to the first run; it is added when not among ``run_dirs``.
    Runs of different or unknown recipes raise ConfigError unless ``mixed_recipes``.
    """
    runs = _load_runs(run_dirs, baseline, names)
    shared, mixed = _shared_recipe(runs, mixed_recipes)
    base = runs[0]
    finite = [p for p in base.val if math.isfinite(p["val_ppl"])]
    if not finite:
        raise DataError(
            f"{os.path.join(base.path, rundir.METRICS)}: the baseline has no finite validation perplexity"
        )
    best = min(finite, key=lambda p: p["val_ppl"])
    target = best["val_ppl"]
    budget = {axis: min(r.val[-1][axis] for r in runs) for axis in AXES}
    warnings = _check_comparable(runs)
    ratios = time_clock.paired_ratios({run.name: run.timing for run in runs})
    rows = [_row(run, base, best, budget, ratios) for run in runs]
    mid = {axis: [r["name"] for r in rows if r["at_equal"][axis]["mid_schedule"]] for axis in AXES}
    return _json_safe(
        {
            "nfeval": {"provenance": provenance()},
            "baseline": base.name,
            "recipe": shared,  # the one recipe of every run; None with mixed_recipes
            "mixed_recipes": mixed,  # what differs between the runs' recipes ([]: nothing)
            "target_val_ppl": target,
            "baseline_at_target": {k: best[k] for k in ("step", "tokens", *AXES)},
            "budget": budget,
            "time_clock": time_clock.PAIRED if ratios else time_clock.MEASURED,
            "mid_schedule": mid,  # per axis, the runs read before the end of their schedule
            "warnings": warnings,
            "runs": rows,
        }
    )


def _json_safe(obj: Any) -> Any:
    """Returns ``obj`` with infinite/NaN floats (diverged runs) replaced by None, which JSON can carry."""
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    return None if isinstance(obj, float) and not math.isfinite(obj) else obj
