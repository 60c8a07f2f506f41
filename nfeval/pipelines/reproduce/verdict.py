"""The one decision rule behind every verdict of ``nfeval reproduce``.

A claim is measured as per-seed differences oriented so that a positive value is the paper's direction
(for example log PPL(Pre-LN) − log PPL(NormFormer) at equal compute). With n seeds, mean m and sample
standard deviation s, the standard error is SE = sqrt((s/√n)² + e²), where e is an independent error
of each measurement when one is known (a zero-shot accuracy's item standard error, a GLUE dev score's
binomial one) and 0 otherwise. The critical value c is Student's t two-sided 95% quantile with n − 1
degrees of freedom (12.7 for 2 seeds, 4.3 for 3, 2.8 for 5), or 1.96 for one seed with a known e.
The verdict is

- **agrees** when m > c·SE,
- **disagrees** when m < −c·SE,
- **inconclusive at this scale** otherwise, and whenever SE cannot be estimated (one seed and no
  per-measurement error): one seed has no spread to judge by.

A diverged run makes its difference +inf or −inf: when every seed diverged the same way the sign
decides; when only some did the verdict is inconclusive, and the count is reported.

Each verdict also states its **minimum detectable effect** (power): the smallest true mean difference
that a one-sample (paired) t-test at α = 0.05 two-sided detects with probability 0.8 at these seeds,
MDE = (t_{1−α/2, n−1} + t_{0.8, n−1}) · SE, with SE as above (normal quantiles for one seed with a
known e). An "inconclusive" with an MDE far above the paper's effect says more seeds, or less noise
per seed, are needed; one with an MDE below it says the effect is not there at this scale.
``seeds_needed`` is the smallest number of seeds (up to ``MAX_SEEDS``) whose MDE, at the observed
standard deviation and per-measurement error, is at most the observed |mean|: how many seeds would
decide the claim if the effect is what these seeds saw (None: more than ``MAX_SEEDS``, or no spread).

Runs trained at one LR for every architecture (``--no-tune``) compare untuned baselines: every verdict
then ends in " (untuned)".
"""

from __future__ import annotations

import math
import statistics
from typing import Any

LEVEL = 0.95  # two-sided
POWER = 0.8  # of the minimum detectable effect
MAX_SEEDS = 1000
AGREES, DISAGREES, INCONCLUSIVE = "agrees", "disagrees", "inconclusive at this scale"
RULE = (
    "per-seed differences in the paper's direction; agrees if mean > c·SE, disagrees if mean < −c·SE, "
    "else inconclusive; SE = sqrt((std/√n)² + per-measurement SE²), c = Student's t 95% two-sided "
    "quantile with n − 1 degrees of freedom (12.7 for 2 seeds, 4.3 for 3), or 1.96 for one seed with a "
    "per-measurement SE; one seed without one is inconclusive. MDE (minimum detectable effect, α 0.05 "
    "two-sided, power 0.8) = (t_{0.975,n−1} + t_{0.8,n−1})·SE: the smallest true mean these seeds detect "
    "4 times in 5"
)


UNTUNED = " (untuned)"


def mark_untuned(claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Returns ``claims`` with " (untuned)" after each verdict (the runs' LR was not tuned)."""
    return [{**c, "verdict": c["verdict"] + UNTUNED} for c in claims]


def critical_value(n: int) -> float:
    """Returns c of the rule: Student's t quantile for n seeds (n - 1 d.o.f.), the normal one for n = 1."""
    from scipy import stats

    q = 0.5 + LEVEL / 2
    return float(stats.t.ppf(q, n - 1)) if n > 1 else float(stats.norm.ppf(q))


def min_detectable_effect(n: int, se: float) -> float:
    """Returns the MDE of the module docstring: (t_{1−α/2,n−1} + t_{POWER,n−1}) · se for n seeds."""
    from scipy import stats

    power_q = float(stats.t.ppf(POWER, n - 1)) if n > 1 else float(stats.norm.ppf(POWER))
    return (critical_value(n) + power_q) * se


def seeds_needed(mean: float, std: float | None, measurement_se: float = 0.0) -> int | None:
    """Returns the module docstring's ``seeds_needed`` for an observed mean and per-seed std."""
    if not std or not mean:
        return None
    low, high = 2, MAX_SEEDS  # the MDE falls as n grows: bisect for the first n that reaches |mean|

    def reaches(n: int) -> bool:
        return min_detectable_effect(n, math.sqrt(std**2 / n + measurement_se**2)) <= abs(mean)

    if not reaches(high):
        return None
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid + 1, high)
    return low


def decide(diffs: list[float], measurement_se: float = 0.0) -> dict[str, Any]:
    """Returns {verdict, mean, std, se, mde, n, why} for per-seed differences (positive = paper's
    direction); ``mde`` is the minimum detectable effect (None when SE cannot be estimated)."""
    n = len(diffs)
    none = {"mean": None, "std": None, "se": None, "mde": None, "seeds_needed": None}
    if n == 0:
        return {"verdict": INCONCLUSIVE, "n": 0, **none, "why": "no data"}
    infinite = [d for d in diffs if math.isinf(d)]
    if infinite:
        if len(infinite) == n and len({math.copysign(1, d) for d in infinite}) == 1:
            verdict = AGREES if infinite[0] > 0 else DISAGREES
            why = f"diverged in all {n} seed(s)"
        else:
            verdict, why = INCONCLUSIVE, f"diverged in {len(infinite)} of {n} seeds"
        return {"verdict": verdict, "n": n, **none, "why": why}
    mean = statistics.fmean(diffs)
    std = statistics.stdev(diffs) if n > 1 else None
    if std is None and not measurement_se:
        return {"verdict": INCONCLUSIVE, "n": n, **none, "mean": mean, "why": "one seed"}
    se = math.sqrt(((std or 0.0) / math.sqrt(n)) ** 2 + measurement_se**2)
    c = critical_value(n)
    if mean > c * se:
        verdict = AGREES
    elif mean < -c * se:
        verdict = DISAGREES
    else:
        verdict = INCONCLUSIVE
    mde = min_detectable_effect(n, se)
    why = f"mean {mean:+.3g} vs c·SE = {c:.3g}·{se:.3g} = {c * se:.3g}; MDE {mde:.3g}"
    return {
        "verdict": verdict,
        "n": n,
        "mean": mean,
        "std": std,
        "se": se,
        "mde": mde,
        "seeds_needed": seeds_needed(mean, std, measurement_se),
        "why": why,
    }


def mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    """Returns (mean, sample std) of the finite values (std None with fewer than two)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None, None
    return statistics.fmean(finite), (statistics.stdev(finite) if len(finite) > 1 else None)


def fmt_mean_std(values: list[float | None], digits: int = 2, missing: str = "–") -> str:
    """Returns "mean ± std (n)" of ``values`` (non-finite or None ones counted as ``missing``)."""
    mean, std = mean_std(values)
    if mean is None:
        return missing
    text = f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")
    bad = sum(1 for v in values if v is None or not math.isfinite(v))
    return text + (f" ({bad} of {len(values)} {missing})" if bad else "")
