"""The one decision rule behind every verdict of ``nfeval reproduce`` and ``nfeval bakeoff``.

A claim is measured as per-seed differences oriented so that a positive value is the claim's direction
(for example log PPL(Pre-LN) − log PPL(NormFormer) at equal compute). With n seeds, mean m and sample
standard deviation s, the standard error is SE = sqrt((s/√n)² + e²), where e is an independent error
of each measurement when one is known (a zero-shot accuracy's item standard error, a GLUE dev score's
binomial one) and 0 otherwise. The raw p is the two-sided one-sample t-test of m against 0 with
n − 1 degrees of freedom (the normal distribution for one seed with a known e).

Many claims are tested in one report, so a verdict is taken from the **Holm-adjusted** p of its
family (``holm``; Holm 1979 controls the family-wise error rate at α): the primary claims, declared
before any run, form one family, every other claim another. With p the adjusted p:

- **agrees** when p < α and m > 0,
- **disagrees** when p < α and m < 0,
- **equivalent within ±margin** when neither, and the two one-sided tests (``equivalence``, TOST)
  reject an effect of the margin's size in either direction at α: the only way a report says that an
  effect is absent, against a margin it states;
- **inconclusive at this scale** otherwise, and whenever p cannot be computed (one seed and no
  per-measurement error): an inconclusive row says nothing about the direction of the effect.

A diverged run makes its difference +inf or −inf; a claim with a diverged seed is tested by the exact
two-sided sign test over the seeds' signs (its mean and SE are undefined).

Each claim also states its **minimum detectable effect**: the smallest true mean difference that the
(unadjusted) paired t-test at α two-sided detects with probability 0.8 at these seeds,
MDE = (t_{1−α/2, n−1} + t_{0.8, n−1}) · SE. A small MDE with an inconclusive verdict is still not
evidence of absence; only the equivalence test is. ``seeds_needed`` is the smallest number of seeds (up
to ``MAX_SEEDS``) whose MDE, at the observed standard deviation and per-measurement error, is at most
the observed |mean| (None: more than ``MAX_SEEDS``, or no spread).

Runs trained at one LR for every architecture (``--no-tune``) compare untuned baselines: every verdict
then ends in " (untuned)".

A claim read at tuned LRs may also carry ``lr_sensitivity`` (``pipelines.lr_band``): the same test
re-run with each side at the neighbours of its best LR (×√2, ÷√2) where every tune seed trained. When
those unadjusted verdicts differ, the claim's verdict is **LR-sensitive**: which way it goes depends on
an LR choice next to the best.

An equal-time claim whose runs' realised step-time ratios missed the plan as a whole carries
``off_plan`` (``pipelines.realised_time``): its verdict, when the runs gave one (a p), ends in
" (equal time off plan)".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

# The version of the rules the pipelines read every verdict under (the band, the judging set, realised
# time, the gate): a stored section read under other rules is recomputed from its run records.
RULES = 2
ALPHA = 0.05  # two-sided
POWER = 0.8  # of the minimum detectable effect
MAX_SEEDS = 1000
AGREES, DISAGREES, INCONCLUSIVE = "agrees", "disagrees", "inconclusive at this scale"
EQUIVALENT = "equivalent within ±{margin:g}"
PRIMARY, SECONDARY = "primary", "secondary"
RULE = (
    "per-seed differences in the claim's direction; p = two-sided one-sample t-test of their mean "
    "(SE = sqrt((std/√n)² + per-measurement SE²), n − 1 degrees of freedom; a diverged seed: the exact "
    "sign test), Holm-adjusted within its family (the primary claims declared before the runs; every "
    f"other claim); agrees if adjusted p < {ALPHA} and mean > 0, disagrees if adjusted p < {ALPHA} and "
    "mean < 0; equivalent within ±margin if the two one-sided tests (TOST) against the stated margin "
    f"give p < {ALPHA}; otherwise inconclusive, which says nothing about the direction. MDE (α "
    f"{ALPHA} two-sided, power {POWER}) = (t_{{0.975,n−1}} + t_{{0.8,n−1}})·SE: the smallest true mean "
    "these seeds detect 4 times in 5 before adjustment"
)


UNTUNED = " (untuned)"
OFF_PLAN = " (equal time off plan)"
LR_SENSITIVE = "LR-sensitive"


def mark_untuned(claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Returns ``claims`` marked as comparisons of untuned runs (their verdicts end in " (untuned)")."""
    return [{**c, "untuned": True} for c in claims]


def _t(n: int):
    """Returns the distribution of the test statistic for n seeds (Student's t, or normal for n = 1)."""
    from scipy import stats

    return stats.t(n - 1) if n > 1 else stats.norm()


def critical_value(n: int) -> float:
    """Returns the two-sided α critical value for n seeds: Student's t (n − 1 d.o.f.), normal for n = 1."""
    return float(_t(n).ppf(1 - ALPHA / 2))


def min_detectable_effect(n: int, se: float) -> float:
    """Returns the MDE of the module docstring: (t_{1−α/2,n−1} + t_{POWER,n−1}) · se for n seeds."""
    return (critical_value(n) + float(_t(n).ppf(POWER))) * se


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


def sign_test(diffs: list[float]) -> float:
    """Returns the exact two-sided sign-test p of the nonzero ``diffs`` (1.0 when there are none)."""
    from scipy import stats

    signs = [d > 0 for d in diffs if d != 0]
    return float(stats.binomtest(sum(signs), len(signs)).pvalue) if signs else 1.0


def equivalence(mean: float, se: float, n: int, margin: float) -> float:
    """Returns the TOST p (the larger of the two one-sided p) that |true mean| < ``margin``."""
    dist = _t(n)
    return max(float(dist.sf((mean + margin) / se)), float(dist.cdf((mean - margin) / se)))


def decide(diffs: list[float], measurement_se: float = 0.0, margin: float | None = None) -> dict[str, Any]:
    """Returns {verdict, p, mean, std, se, mde, seeds_needed, n, why, margin, p_equivalence} for per-seed
    differences (positive = the claim's direction); ``verdict`` is the unadjusted one (``adjust`` takes it
    from the family's Holm-adjusted p); ``p_equivalence`` is the TOST p against ``margin`` (None: no
    margin, or no SE)."""
    n = len(diffs)
    none = {"mean": None, "std": None, "se": None, "mde": None, "seeds_needed": None, "p": None}
    base = {"n": n, "margin": margin, "p_equivalence": None}
    if n == 0:
        return {"verdict": INCONCLUSIVE, **base, **none, "why": "no data"}
    infinite = sum(math.isinf(d) for d in diffs)
    if infinite:
        p = sign_test(diffs)
        agree = sum(d > 0 for d in diffs) > n / 2
        why = f"diverged in {infinite} of {n} seed(s); exact sign test over the seeds"
        direction = 1.0 if agree else -1.0
        return {**base, **none, "p": p, "direction": direction, "verdict": _verdict(p, direction), "why": why}
    mean = statistics.fmean(diffs)
    std = statistics.stdev(diffs) if n > 1 else None
    if std is None and not measurement_se:
        return {"verdict": INCONCLUSIVE, **base, **none, "mean": mean, "why": "one seed"}
    se = math.sqrt(((std or 0.0) / math.sqrt(n)) ** 2 + measurement_se**2)
    p = 2 * float(_t(n).sf(abs(mean) / se)) if se > 0 else (0.0 if mean else 1.0)
    mde = min_detectable_effect(n, se)
    p_eq = equivalence(mean, se, n, margin) if margin and se > 0 else None
    return {
        "verdict": _verdict(p, mean, p_eq, margin),
        **base,
        "p_equivalence": p_eq,
        "mean": mean,
        "std": std,
        "se": se,
        "p": p,
        "mde": mde,
        "seeds_needed": seeds_needed(mean, std, measurement_se),
        "why": f"mean {mean:+.3g}, SE {se:.3g}, t-test p {p:.3g}; MDE {mde:.3g}",
    }


def _verdict(p: float | None, mean: float, p_eq: float | None = None, margin: float | None = None) -> str:
    if p is not None and p < ALPHA and mean:
        return AGREES if mean > 0 else DISAGREES
    if p_eq is not None and p_eq < ALPHA:
        return EQUIVALENT.format(margin=margin)
    return INCONCLUSIVE


def holm(pvalues: list[float]) -> list[float]:
    """Returns Holm's step-down adjusted p-values of ``pvalues`` (same order): the k-th smallest p is
    multiplied by (m − k + 1), made non-decreasing in that order, and capped at 1."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def adjust(claims: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Returns ``claims`` with ``p_holm`` (Holm-adjusted within each ``family``: PRIMARY or SECONDARY, the
    default) and the verdict taken from it; a claim without a p keeps its verdict, ``p_holm`` None.
    The family sizes are each claim's ``family_size``."""
    claims = [dict(c, family=c.get("family") or SECONDARY) for c in claims]
    for family in (PRIMARY, SECONDARY):
        tested = [c for c in claims if c["family"] == family and c.get("p") is not None]
        for c, p in zip(tested, holm([c["p"] for c in tested])):
            c["p_holm"] = p
            c["family_size"] = len(tested)
            direction = c["mean"] if c.get("mean") is not None else c.get("direction", 0.0)
            c["verdict"] = _verdict(p, direction, c.get("p_equivalence"), c.get("margin"))
    for c in claims:
        c.setdefault("p_holm", None)
        if c.get("p") is not None and (c.get("lr_sensitivity") or {}).get("sensitive"):
            c["verdict"] = LR_SENSITIVE
        # a verdict read from the runs only: one that could read none (not trained) has no plan to miss
        if c.get("off_plan") and c.get("p") is not None and not c["verdict"].endswith(OFF_PLAN):
            c["verdict"] += OFF_PLAN
        if c.get("untuned") and not c["verdict"].endswith(UNTUNED):
            c["verdict"] += UNTUNED
    return claims


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
