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
from typing import Any

from ...base.jsonio import load_json
from ...launch import cluster
from ...launch.jobs import LaunchPoint
from .. import context, runs
from ..report_text import PAPER_OVERHEAD, ratio_text
from .plan import EQUAL_TIME, RUNS
from .run_overrides import run_model
from .run_specs import BASELINES, Context, log, preset_name, run_budget, train_config

FILE = "step_ratios.json"


def model_key(ctx: Context, key: str) -> str:
    """Returns what shapes run ``key``'s step (objective, preset, model overrides), as a JSON key: runs
    with one key are the same model."""
    return json.dumps([RUNS[key].objective, preset_name(ctx, key), run_model(ctx.scale, key)], sort_keys=True)


def timed(keys: list[str]) -> list[str]:
    """Returns the runs of ``keys`` whose budget is equal time (those equal-time ratios are measured for)."""
    return [k for k in keys if RUNS[k].protocol == EQUAL_TIME]


def measure_ratios(ctx: Context, keys: list[str]) -> dict[str, dict[str, Any]]:
    """Returns {run key: its step-time ratio record (ratio, ci_low, ci_high, baseline, ...)} for the
    equal-time runs of ``keys``, measuring what ``<out>/step_ratios.json`` does not hold yet."""
    s = ctx.scale
    return runs.measure_ratios(
        os.path.join(ctx.out, FILE),
        timed(keys),
        baseline_of=lambda key: BASELINES[RUNS[key].objective],
        model_of=lambda key: model_key(ctx, key),
        configs=lambda key, base: (train_config(ctx, base, 1), train_config(ctx, key, 1)),
        timing={"pairs": s.ratio_pairs, "burst": s.ratio_burst, "warmup": s.ratio_warmup}
        | {"sharing": context.sharing(ctx)},
        log=log,
        measure=not ctx.reread,
    )


def measure_ratios_as_job(ctx: Context, keys: list[str]) -> bool:
    """Measures the ratios ``<out>/step_ratios.json`` does not hold yet in one Slurm job
    (``ctx.launch``), so they are timed on the hardware the runs train on, not the submitting machine;
    returns whether every ratio of ``keys`` is stored now."""
    path = os.path.join(ctx.out, FILE)
    wanted = timed(keys)
    if not all(k in (load_json(path) if os.path.isfile(path) else {}) for k in wanted):
        job = LaunchPoint(
            "step-ratios", measure_ratios, (dataclasses.replace(ctx, launch=None), keys), ctx.out
        )
        cluster.run_points([job], ctx.out, ctx.launch, "step-ratios", ctx.progress)
    return all(k in (load_json(path) if os.path.isfile(path) else {}) for k in wanted)


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
