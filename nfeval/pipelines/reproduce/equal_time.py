"""Equal time, fixed before training: each run's paired step-time ratio to its objective's baseline and
the step budget it buys (``plan``'s module docstring gives the protocol).

Runs whose model is the baseline's (the same preset and model overrides, width included: a warm-up or
optimizer change costs no time)
have ratio 1 by definition; runs sharing one model share one measurement. The measurements are stored
in ``<out>/step_ratios.json`` after each one, so a rerun and every seed and section reuse them, and a
run's step budget never changes once measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

from ...base.artifacts import atomic_write_json, hardware, hardware_key
from ...base.jsonio import load_json
from ...engine.step_ratio import CONFIDENCE, measure_step_ratio
from .plan import RUNS
from .run_overrides import run_model
from .runner import BASELINES, Context, log, preset_name, run_budget, train_config

FILE = "step_ratios.json"
PAPER_OVERHEAD = "2–6%"  # Shleifer et al. 2021: NormFormer's extra operations cost 2-6% of step time


def _model_key(ctx: Context, key: str) -> str:
    return json.dumps([RUNS[key].objective, preset_name(ctx, key), run_model(ctx.scale, key)], sort_keys=True)


def _measure(ctx: Context, key: str, base: str) -> dict[str, Any]:
    s = ctx.scale
    log(f"timing {key} against {base}, paired ({s.ratio_pairs} pairs of {s.ratio_burst}-step bursts)")
    result = measure_step_ratio(
        train_config(ctx, base, 1),
        train_config(ctx, key, 1),
        pairs=s.ratio_pairs,
        burst=s.ratio_burst,
        warmup=s.ratio_warmup,
    )
    return {
        **result.to_dict(),
        "load_average": round(os.getloadavg()[0], 2),
        "hardware": hardware_key(hardware()),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def measure_ratios(ctx: Context, keys: list[str]) -> dict[str, dict[str, Any]]:
    """Returns {run key: its step-time ratio record (ratio, ci_low, ci_high, baseline, ...)} for
    ``keys``, measuring what ``<out>/step_ratios.json`` does not hold yet."""
    path = os.path.join(ctx.out, FILE)
    stored: dict[str, dict[str, Any]] = load_json(path) if os.path.isfile(path) else {}
    for key in keys:
        if key in stored:
            continue
        base = BASELINES[RUNS[key].objective]
        model = _model_key(ctx, key)
        measured = [k for k in stored if "pairs" in stored[k] and "shared_with" not in stored[k]]
        shared = next((k for k in measured if _model_key(ctx, k) == model), None)
        if model == _model_key(ctx, base):
            record = {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "method": "the baseline's model: 1"}
        elif shared is not None:
            record = {**stored[shared], "shared_with": shared}
        else:
            record = _measure(ctx, key, base)
        stored[key] = {**record, "baseline": base}
        atomic_write_json(path, stored)
    return {k: stored[k] for k in keys}


def measure_ratios_as_job(ctx: Context, keys: list[str]) -> bool:
    """Measures the ratios ``<out>/step_ratios.json`` does not hold yet in one Slurm job
    (``ctx.launch``), so they are timed on the hardware the runs train on, not the submitting machine;
    returns whether every ratio of ``keys`` is stored now."""
    from ...launch import cluster
    from ...launch.jobs import LaunchPoint

    path = os.path.join(ctx.out, FILE)
    if not all(k in (load_json(path) if os.path.isfile(path) else {}) for k in keys):
        job = LaunchPoint(
            "step-ratios", measure_ratios, (dataclasses.replace(ctx, launch=None), keys), ctx.out
        )
        cluster.run_points([job], ctx.out, ctx.launch, "step-ratios", ctx.progress)
    return all(k in (load_json(path) if os.path.isfile(path) else {}) for k in keys)


def ratio_text(record: dict[str, Any]) -> str:
    """Returns "1.043 [1.021, 1.060] (+4.3%)": the ratio, its 95% confidence interval (its coverage
    named when fewer pairs allowed less) and the overhead."""
    coverage = record.get("confidence", 1.0)
    level = "" if coverage >= CONFIDENCE else f" {coverage:.1%} CI"
    ci = f"[{record['ci_low']:.3f}, {record['ci_high']:.3f}{level}]"
    return f"{record['ratio']:.3f} {ci} ({record['ratio'] - 1:+.1%})"


def equal_time_rows(ctx: Context) -> list[list[str]]:
    """Returns the report's equal-time table: run, baseline, ratio [CI] (overhead), paper, steps."""
    rows = []
    for key, record in ctx.step_ratios.items():
        if key == record["baseline"]:
            continue
        source = f"as {record['shared_with']}" if "shared_with" in record else ""
        if "pairs" in record and not source:
            source = f"{record['pairs']} pairs × {record['burst']} steps, load {record['load_average']}"
        rows.append(
            [
                RUNS[key].label,
                RUNS[record["baseline"]].label,
                ratio_text(record),
                PAPER_OVERHEAD if RUNS[key].arch == "normformer" and not RUNS[key].model else "–",
                str(run_budget(ctx, key).get("max_steps", "time budget")),
                source or record.get("method", ""),
            ]
        )
    return rows
