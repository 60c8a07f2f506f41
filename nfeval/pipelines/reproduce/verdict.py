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

Runs trained at one LR for every architecture (``--no-tune``) compare untuned baselines: every verdict
then ends in " (untuned)".
"""

from __future__ import annotations

import math
import statistics
from typing import Any

LEVEL = 0.95  # two-sided
AGREES, DISAGREES, INCONCLUSIVE = "agrees", "disagrees", "inconclusive at this scale"
RULE = (
    "per-seed differences in the paper's direction; agrees if mean > c·SE, disagrees if mean < −c·SE, "
    "else inconclusive; SE = sqrt((std/√n)² + per-measurement SE²), c = Student's t 95% two-sided "
    "quantile with n − 1 degrees of freedom (12.7 for 2 seeds, 4.3 for 3), or 1.96 for one seed with a "
    "per-measurement SE; one seed without one is inconclusive"
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


def decide(diffs: list[float], measurement_se: float = 0.0) -> dict[str, Any]:
    """Returns {verdict, mean, std, se, n, why} for per-seed differences (positive = paper's direction)."""
    n = len(diffs)
    if n == 0:
        return {"verdict": INCONCLUSIVE, "n": 0, "mean": None, "std": None, "se": None, "why": "no data"}
    infinite = [d for d in diffs if math.isinf(d)]
    if infinite:
        if len(infinite) == n and len({math.copysign(1, d) for d in infinite}) == 1:
            verdict = AGREES if infinite[0] > 0 else DISAGREES
            why = f"diverged in all {n} seed(s)"
        else:
            verdict, why = INCONCLUSIVE, f"diverged in {len(infinite)} of {n} seeds"
        return {"verdict": verdict, "n": n, "mean": None, "std": None, "se": None, "why": why}
    mean = statistics.fmean(diffs)
    std = statistics.stdev(diffs) if n > 1 else None
    if std is None and not measurement_se:
        return {"verdict": INCONCLUSIVE, "n": n, "mean": mean, "std": None, "se": None, "why": "one seed"}
    se = math.sqrt(((std or 0.0) / math.sqrt(n)) ** 2 + measurement_se**2)
    c = critical_value(n)
    if mean > c * se:
        verdict = AGREES
    elif mean < -c * se:
        verdict = DISAGREES
    else:
        verdict = INCONCLUSIVE
    why = f"mean {mean:+.3g} vs c·SE = {c:.3g}·{se:.3g} = {c * se:.3g}"
    return {"verdict": verdict, "n": n, "mean": mean, "std": std, "se": se, "why": why}


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
