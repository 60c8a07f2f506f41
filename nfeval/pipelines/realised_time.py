"""Equal time as the runs realised it: each seed's measured time against the ratio that planned it.

The equal-time budget is fixed before training from the paired step-time ratio r [lo, hi]
(``runs.measure_ratios``): the candidate trains S ÷ r steps. After training, seed s's *realised
step-time ratio* is (candidate's training seconds ÷ its steps) ÷ (the baseline's ÷ its steps), read from
each run's ``config.json`` (``compute.wall_s``, ``compute.steps``); its *realised wall-time ratio* is the
candidate's seconds ÷ the baseline's (1.0: equal time held exactly). A seed whose realised step-time
ratio lies outside [lo, hi] did not train at the planned equal time (machine load changed between the
runs): it is flagged and left out of the equal-time claim, which is tested on the other seeds, and is
not readable when fewer than 2 remain. ``reproduce`` (Figure 2) and ``bakeoff`` (the perplexity tests)
both use ``check``.
"""

from __future__ import annotations

import os
from typing import Any

from ..base.jsonio import load_json

MIN_SEEDS = 2  # fewer seeds inside the interval: the equal-time claim is not readable


def run_time(directory: str) -> tuple[float, int] | None:
    """Returns (training seconds, updates) the run in ``directory`` recorded, or None without a record."""
    path = os.path.join(directory, "config.json")
    compute = (load_json(path).get("compute") or {}) if os.path.isfile(path) else {}
    seconds, steps = compute.get("wall_s") or 0.0, compute.get("steps") or 0
    return (float(seconds), int(steps)) if seconds > 0 and steps > 0 else None


def check(planned: dict[str, Any], times: dict[int, tuple[Any, Any]]) -> dict[str, Any]:
    """Returns the realised-ratio check of one candidate: {planned: {ratio, ci_low, ci_high}, seeds:
    [{seed, wall_ratio, step_ratio, inside}], kept, excluded, readable, rule}, from ``planned`` (its step
    ratio record) and ``times``: {seed: (baseline's run_time, candidate's run_time)}. A seed missing a
    recorded time is neither kept nor excluded: it is listed with inside None (nothing to check)."""
    lo, hi = planned["ci_low"], planned["ci_high"]
    seeds = []
    for seed, (base, cand) in sorted(times.items()):
        if base is None or cand is None:
            seeds.append({"seed": seed, "wall_ratio": None, "step_ratio": None, "inside": None})
            continue
        step_ratio = (cand[0] / cand[1]) / (base[0] / base[1])
        seeds.append(
            {
                "seed": seed,
                "wall_ratio": cand[0] / base[0],
                "step_ratio": step_ratio,
                "inside": lo <= step_ratio <= hi,
            }
        )
    kept = [s["seed"] for s in seeds if s["inside"] is not False]
    return {
        "planned": {"ratio": planned["ratio"], "ci_low": lo, "ci_high": hi},
        "seeds": seeds,
        "kept": kept,
        "excluded": [s["seed"] for s in seeds if s["inside"] is False],
        # exclusions that leave fewer than MIN_SEEDS seeds make the claim unreadable (one seed all along
        # is the verdict rule's own "one seed")
        "readable": len(kept) >= MIN_SEEDS or len(kept) == len(seeds),
        "rule": f"a seed whose realised step-time ratio lies outside the planned [{lo:.3f}, {hi:.3f}] is "
        f"left out of the equal-time test; fewer than {MIN_SEEDS} seeds left: not readable",
    }


def seed_text(row: dict[str, Any]) -> str:
    """Returns one seed's cell: "1.043 (step 1.051, outside)": the realised wall-time ratio, the
    realised step-time ratio and whether it lies in the planned interval."""
    if row["inside"] is None:
        return "no recorded time"
    where = "inside" if row["inside"] else "outside: excluded"
    return f"{row['wall_ratio']:.3f} (step {row['step_ratio']:.3f}, {where})"


def summary_text(result: dict[str, Any]) -> str:
    """Returns the sentence a report states: which seeds were excluded and why, or that none was."""
    p = result["planned"]
    planned = f"the planned step-time ratio {p['ratio']:.3f} [{p['ci_low']:.3f}, {p['ci_high']:.3f}]"
    if not result["excluded"]:
        return f"every seed's realised step-time ratio lies inside {planned}"
    outside = ", ".join(
        f"seed {s['seed']} ({s['step_ratio']:.3f}, wall-time ratio {s['wall_ratio']:.3f})"
        for s in result["seeds"]
        if s["inside"] is False
    )
    tail = (
        ""
        if result["readable"]
        else f"; fewer than {MIN_SEEDS} seeds left: the equal-time claim is not readable"
    )
    return f"realised step-time ratio outside {planned}, left out of the equal-time test: {outside}{tail}"
