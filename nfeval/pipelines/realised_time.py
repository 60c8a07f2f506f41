"""Equal time as the runs realised it: each seed's measured time against the ratio that planned it.

The equal-time budget is fixed before training from the paired step-time ratio r [lo, hi]
(``runs.measure_ratios``, interleaved rounds): the candidate trains S ÷ r steps. After training, seed s's
*realised step-time ratio* is (candidate's training seconds ÷ its steps) ÷ (the baseline's ÷ its steps),
read from each run's ``config.json`` (``compute.wall_s``, ``compute.steps``); its *realised wall-time
ratio* is the candidate's seconds ÷ the baseline's (1.0: equal time held exactly).

The check is a check on the plan, never a reason to drop a seed: steps are fixed before training and
training is deterministic, so a run's perplexity does not depend on how long it took, and every seed's
pair is a valid pair of the claim. What the realised times can say is whether the *plan* held at the
claim's level: the claim is flagged **off plan** when the t-interval of the seeds' mean realised ratio
misses the planned [lo, hi] (the machine changed between the ratio's measurement and the runs), and its
verdict then says so. Each seed's ratio is also shown against [lo, hi] widened by ±Z·√(cv_base² +
cv_cand²), the runs' own timing noise (every seed of one architecture trains the same steps, so the
spread of its seconds per step across seeds is timing noise alone; robust: the scaled median absolute
deviation; none with fewer than ``MIN_NOISE_SEEDS`` timed seeds), so a reader sees which seeds ran
far from the plan; nothing is left out for it. ``reproduce`` (Figure 2) and ``bakeoff`` (the perplexity
tests) both use ``check``.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from scipy.stats import median_abs_deviation

from ..base.jsonio import load_json
from ..report.significance import t_interval

MIN_NOISE_SEEDS = 3  # fewer timed seeds: no timing-noise estimate, the planned interval as it is
Z = 1.96  # a seed's ratio inside ±Z noise of the planned interval (95% for normal noise)


def run_time(directory: str) -> tuple[float, int] | None:
    """Returns (training seconds, updates) the run in ``directory`` recorded, or None without a record."""
    path = os.path.join(directory, "config.json")
    compute = (load_json(path).get("compute") or {}) if os.path.isfile(path) else {}
    seconds, steps = compute.get("wall_s") or 0.0, compute.get("steps") or 0
    return (float(seconds), int(steps)) if seconds > 0 and steps > 0 else None


def timing_noise(times: list[tuple[float, int]]) -> float | None:
    """Returns the robust coefficient of variation of seconds per step over ``times`` (one architecture's
    runs, one per seed: the scaled MAD ÷ the median), or None for fewer than ``MIN_NOISE_SEEDS`` runs."""
    if len(times) < MIN_NOISE_SEEDS:
        return None
    per_step = np.array([seconds / steps for seconds, steps in times])
    return float(median_abs_deviation(per_step, scale="normal") / np.median(per_step))


def check(planned: dict[str, Any], times: dict[int, tuple[Any, Any]]) -> dict[str, Any]:
    """Returns the realised-ratio check of one candidate: {planned: {ratio, ci_low, ci_high}, noise:
    {baseline_cv, candidate_cv, tolerance}, interval: {low, high}, seeds: [{seed, wall_ratio, step_ratio,
    inside}], outside, mean: t-interval of the seeds' step ratios, off_plan, rule}, from ``planned`` (its
    step ratio record) and ``times``: {seed: (baseline's run_time, candidate's run_time)}. Every seed
    stays in the claim; ``outside`` lists those whose ratio lies outside the noise-widened interval (shown,
    not dropped), ``off_plan`` whether the seeds' mean ratio misses the planned interval (the claim is
    flagged). A seed missing a recorded time is listed with inside None (nothing to check)."""
    timed = {s: pair for s, pair in sorted(times.items()) if None not in pair}
    cvs = [timing_noise([pair[i] for pair in timed.values()]) for i in (0, 1)]
    tolerance = Z * math.hypot(*cvs) if None not in cvs else 0.0
    low, high = planned["ci_low"] * (1 - tolerance), planned["ci_high"] * (1 + tolerance)
    seeds = []
    for seed in sorted(times):
        if seed not in timed:
            seeds.append({"seed": seed, "wall_ratio": None, "step_ratio": None, "inside": None})
            continue
        (base_s, base_n), (cand_s, cand_n) = timed[seed]
        step_ratio = (cand_s / cand_n) / (base_s / base_n)
        seeds.append(
            {
                "seed": seed,
                "wall_ratio": cand_s / base_s,
                "step_ratio": step_ratio,
                "inside": low <= step_ratio <= high,
            }
        )
    ratios = [s["step_ratio"] for s in seeds if s["inside"] is not None]
    mean = t_interval(ratios) if ratios else None
    off_plan = bool(
        mean
        and mean["low"] is not None
        and (mean["high"] < planned["ci_low"] or mean["low"] > planned["ci_high"])
    )
    return {
        "planned": {"ratio": planned["ratio"], "ci_low": planned["ci_low"], "ci_high": planned["ci_high"]},
        "noise": {"baseline_cv": cvs[0], "candidate_cv": cvs[1], "tolerance": tolerance},
        "interval": {"low": low, "high": high},
        "seeds": seeds,
        "outside": [s["seed"] for s in seeds if s["inside"] is False],
        "mean": mean,
        "off_plan": off_plan,
        "rule": RULE,
    }


RULE = (
    "every seed is kept (steps are fixed before training and training is deterministic: a run's "
    "perplexity does not depend on how long it took); the claim is flagged off plan when the t-interval "
    "of the seeds' mean realised step-time ratio misses the planned interval"
)


def seed_text(row: dict[str, Any]) -> str:
    """Returns one seed's cell: "1.043 (step 1.051, outside)": the realised wall-time ratio, the
    realised step-time ratio and whether it lies in the (noise-widened) planned interval; a seed
    outside it is still in the claim."""
    if row["inside"] is None:
        return "no recorded time"
    where = "inside" if row["inside"] else "outside"
    return f"{row['wall_ratio']:.3f} (step {row['step_ratio']:.3f}, {where})"


def _planned_text(result: dict[str, Any]) -> str:
    p = result["planned"]
    return f"the planned step-time ratio {p['ratio']:.3f} [{p['ci_low']:.3f}, {p['ci_high']:.3f}]"


def _noise_text(result: dict[str, Any]) -> str:
    noise, i = result["noise"], result["interval"]
    if not noise["tolerance"]:
        return f"(fewer than {MIN_NOISE_SEEDS} timed seeds: no timing-noise estimate)"
    return (
        f"widened by the runs' own timing noise (seconds per step vary {noise['baseline_cv']:.1%} across the "
        f"baseline's seeds and {noise['candidate_cv']:.1%} across the candidate's, robust; "
        f"±{noise['tolerance']:.1%}) to [{i['low']:.3f}, {i['high']:.3f}]"
    )


def summary_text(result: dict[str, Any]) -> str:
    """Returns the sentence a report states: the seeds' mean realised ratio against the plan (flagged
    off plan when its interval misses it), and which seeds ran outside the noise-widened interval (every
    seed stays in the claim)."""
    planned, mean = _planned_text(result), result.get("mean")
    if not mean:
        return f"no seed recorded its time: {planned} cannot be checked"
    if mean["low"] is None:
        head = f"the one timed seed's realised step-time ratio {mean['mean']:.3f} against {planned}"
    else:
        where = "misses: the claim is flagged off plan" if result["off_plan"] else "overlaps"
        head = (
            f"the {mean['n']} seeds' mean realised step-time ratio {mean['mean']:.3f} [{mean['low']:.3f}, "
            f"{mean['high']:.3f}] against {planned}, which it {where}"
        )
    outside = [s for s in result["seeds"] if s["inside"] is False]
    if not outside:
        return f"{head}; every seed's ratio lies inside the plan {_noise_text(result)}; every seed is kept"
    cells = ", ".join(f"seed {s['seed']} ({s['step_ratio']:.3f})" for s in outside)
    return f"{head}; outside the plan {_noise_text(result)}: {cells}, kept (every seed is kept)"
