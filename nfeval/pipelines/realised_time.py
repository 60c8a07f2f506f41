"""Equal time as the runs realised it: each seed's measured time against the ratio that planned it.

The equal-time budget is fixed before training from the paired step-time ratio r [lo, hi]
(``runs.measure_ratios``, interleaved rounds): the candidate trains S ÷ r steps. After training, seed s's
*realised step-time ratio* is (candidate's training seconds ÷ its steps) ÷ (the baseline's ÷ its steps),
read from each run's ``config.json`` (``compute.wall_s``, ``compute.steps``); its *realised wall-time
ratio* is the candidate's seconds ÷ the baseline's (1.0: equal time held exactly).

[lo, hi] is the interval of the *mean* ratio over many interleaved rounds; one seed's two runs are timed
once each, minutes apart, so a seed's realised ratio also carries the machine's run-to-run timing noise.
That noise is measured from the runs themselves: every seed of one architecture trains the same number
of steps, so the spread of its seconds per step across seeds is timing noise alone (robust: the scaled
median absolute deviation, so one slow run does not widen it). A seed is kept when its realised ratio
lies in [lo, hi] widened by ±Z·√(cv_base² + cv_cand²) (both runs' noise); with fewer than
``MIN_NOISE_SEEDS`` timed seeds there is no noise estimate and [lo, hi] is used as it is. A seed outside
is flagged and left out of the equal-time claim. The claim is not readable when fewer than ``MIN_SEEDS``
seeds remain, or when the kept seeds' mean realised ratio (its t-interval) misses [lo, hi]: then the
runs drifted from the plan as a whole (the machine changed between the ratio and the runs), which no
per-seed exclusion repairs. ``reproduce`` (Figure 2) and ``bakeoff`` (the perplexity tests) both use
``check``.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from scipy.stats import median_abs_deviation

from ..base.jsonio import load_json
from ..report.significance import t_interval

MIN_SEEDS = 2  # fewer seeds kept: the equal-time claim is not readable
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
    inside}], kept, excluded, mean: t-interval of the kept seeds' step ratios, drifted, readable, rule},
    from ``planned`` (its step ratio record) and ``times``: {seed: (baseline's run_time, candidate's
    run_time)}. A seed missing a recorded time is neither kept nor excluded: it is listed with inside
    None (nothing to check)."""
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
    kept = [s["seed"] for s in seeds if s["inside"] is not False]
    kept_ratios = [s["step_ratio"] for s in seeds if s["inside"]]
    mean = t_interval(kept_ratios) if kept_ratios else None
    # the kept seeds as a whole ran off the plan: their mean's interval misses the planned one
    drifted = bool(
        mean
        and mean["low"] is not None
        and (mean["high"] < planned["ci_low"] or mean["low"] > planned["ci_high"])
    )
    return {
        "planned": {"ratio": planned["ratio"], "ci_low": planned["ci_low"], "ci_high": planned["ci_high"]},
        "noise": {"baseline_cv": cvs[0], "candidate_cv": cvs[1], "tolerance": tolerance},
        "interval": {"low": low, "high": high},
        "seeds": seeds,
        "kept": kept,
        "excluded": [s["seed"] for s in seeds if s["inside"] is False],
        "mean": mean,
        "drifted": drifted,
        # exclusions that leave fewer than MIN_SEEDS seeds make the claim unreadable (one seed all along
        # is the verdict rule's own "one seed")
        "readable": (len(kept) >= MIN_SEEDS or len(kept) == len(seeds)) and not drifted,
        "rule": _rule_text(planned, tolerance, low, high),
    }


def _rule_text(planned: dict[str, Any], tolerance: float, low: float, high: float) -> str:
    widened = (
        f"widened by the runs' own timing noise (±{tolerance:.1%}) to [{low:.3f}, {high:.3f}]"
        if tolerance
        else f"(fewer than {MIN_NOISE_SEEDS} timed seeds: no timing-noise estimate)"
    )
    return (
        f"a seed whose realised step-time ratio lies outside the planned [{planned['ci_low']:.3f}, "
        f"{planned['ci_high']:.3f}] {widened} is left out of the equal-time test; fewer than {MIN_SEEDS} "
        "seeds left, or a mean realised ratio whose interval misses the planned one: not readable"
    )


def seed_text(row: dict[str, Any]) -> str:
    """Returns one seed's cell: "1.043 (step 1.051, outside)": the realised wall-time ratio, the
    realised step-time ratio and whether it lies in the (noise-widened) planned interval."""
    if row["inside"] is None:
        return "no recorded time"
    where = "inside" if row["inside"] else "outside: excluded"
    return f"{row['wall_ratio']:.3f} (step {row['step_ratio']:.3f}, {where})"


def _planned_text(result: dict[str, Any]) -> str:
    p = result["planned"]
    planned = f"the planned step-time ratio {p['ratio']:.3f} [{p['ci_low']:.3f}, {p['ci_high']:.3f}]"
    noise = result.get("noise")  # absent from reports made before the noise-widened interval
    if not noise or not noise["tolerance"]:
        return planned
    i = result["interval"]
    return (
        f"{planned} widened by the runs' own timing noise (seconds per step vary {noise['baseline_cv']:.1%} "
        f"across the baseline's seeds and {noise['candidate_cv']:.1%} across the candidate's, robust; "
        f"±{noise['tolerance']:.1%}) to [{i['low']:.3f}, {i['high']:.3f}]"
    )


def _mean_text(result: dict[str, Any]) -> str:
    mean = result.get("mean")
    if not mean:
        return ""
    if mean["low"] is None:
        return f"; realised step-time ratio of the seed kept {mean['mean']:.3f}"
    where = (
        "misses the planned interval: the runs drifted from the plan"
        if result["drifted"]
        else "overlaps the planned interval"
    )
    return (
        f"; mean realised step-time ratio of the {mean['n']} seeds kept {mean['mean']:.3f} "
        f"[{mean['low']:.3f}, {mean['high']:.3f}], which {where}"
    )


def summary_text(result: dict[str, Any]) -> str:
    """Returns the sentence a report states: which seeds were excluded and why, or that none was, and
    whether the kept seeds' mean realised ratio agrees with the plan."""
    planned = _planned_text(result)
    if not result["excluded"]:
        head = f"every seed's realised step-time ratio lies inside {planned}"
    else:
        outside = ", ".join(
            f"seed {s['seed']} ({s['step_ratio']:.3f}, wall-time ratio {s['wall_ratio']:.3f})"
            for s in result["seeds"]
            if s["inside"] is False
        )
        head = f"realised step-time ratio outside {planned}, left out of the equal-time test: {outside}"
    too_few = not result["readable"] and not result.get("drifted")
    tail = f"; fewer than {MIN_SEEDS} seeds left: the equal-time claim is not readable" if too_few else ""
    return head + _mean_text(result) + tail
