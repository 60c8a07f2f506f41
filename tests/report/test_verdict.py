"""The decision rule of reproduce and bakeoff verdicts against hand computations: the t-test's p, Holm's
adjustment, the TOST equivalence test, the sign test for diverged seeds, and the words a verdict uses."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from nfeval.report import verdict
from nfeval.report.verdict import AGREES, DISAGREES, INCONCLUSIVE, adjust, decide, equivalence, holm


def test_p_is_the_two_sided_one_sample_t_test():
    diffs = [0.12, 0.08, 0.15, 0.05, 0.10]
    assert decide(diffs)["p"] == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue, rel=1e-9)
    # with a per-measurement SE: t = mean / sqrt(s²/n + e²), n − 1 degrees of freedom
    mean, s = sum(diffs) / 5, stats.tstd(diffs)
    t = mean / math.sqrt(s**2 / 5 + 0.03**2)
    assert decide(diffs, measurement_se=0.03)["p"] == pytest.approx(2 * stats.t.sf(t, 4), rel=1e-9)


def test_holm_by_hand():
    # sorted p: 0.01, 0.02, 0.03, 0.04 times 4, 3, 2, 1 = 0.04, 0.06, 0.06 (running max), 0.06
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.003]) == [0.003] and holm([]) == []


def test_verdicts_come_from_the_holm_adjusted_p_of_each_family():
    claims = [
        {"id": "a", "family": "primary", "p": 0.02, "mean": 0.1, "verdict": AGREES},
        {"id": "b", "family": "primary", "p": 0.03, "mean": -0.1, "verdict": DISAGREES},
        {"id": "c", "p": 0.001, "mean": 0.2, "verdict": AGREES},  # secondary by default
        {"id": "d", "p": 0.04, "mean": 0.2, "verdict": AGREES},
        {"id": "e", "p": None, "mean": None, "verdict": INCONCLUSIVE},  # not tested: out of the family
    ]
    out = {c["id"]: c for c in adjust(claims)}
    # primary: 0.02 × 2 = 0.04 < 0.05 agrees; 0.03 × 1, raised to the running max 0.04: disagrees
    assert (out["a"]["p_holm"], out["a"]["verdict"]) == (pytest.approx(0.04), AGREES)
    assert (out["b"]["p_holm"], out["b"]["verdict"]) == (pytest.approx(0.04), DISAGREES)
    # secondary (2 tested): 0.001 × 2 agrees; 0.04 × 1 = 0.04 stays agrees; with a third p it would not
    assert out["c"]["p_holm"] == pytest.approx(0.002) and out["d"]["verdict"] == AGREES
    assert out["e"]["p_holm"] is None and out["c"]["family_size"] == 2
    three = adjust([*claims[2:4], {"id": "f", "p": 0.5, "mean": 0.1, "verdict": INCONCLUSIVE}])
    assert three[1]["p_holm"] == pytest.approx(0.08) and three[1]["verdict"] == INCONCLUSIVE


def test_adjusting_twice_changes_nothing():
    claims = adjust(
        [{"id": "a", "p": 0.01, "mean": 1.0, "verdict": AGREES}, {"id": "b", "p": 0.2, "mean": 1.0}]
    )
    assert adjust(claims) == claims


def test_tost_by_hand():
    # mean 0.001, SE 0.004, 4 d.o.f., margin 0.02: max(sf((0.001+0.02)/0.004), cdf((0.001-0.02)/0.004))
    p = equivalence(0.001, 0.004, 5, 0.02)
    assert p == pytest.approx(max(stats.t.sf(0.021 / 0.004, 4), stats.t.cdf(-0.019 / 0.004, 4)), rel=1e-12)
    diffs = [0.002, -0.001, 0.003, 0.0, -0.002]  # tight around 0
    d = decide(diffs, margin=0.02)
    assert d["p"] > 0.05 and d["p_equivalence"] < 0.05 and d["verdict"] == "equivalent within ±0.02"
    wide = decide([0.05, -0.06, 0.04, -0.03, 0.02], margin=0.02)  # no effect found, none excluded
    assert wide["verdict"] == INCONCLUSIVE and wide["p_equivalence"] > 0.05
    assert decide(diffs)["p_equivalence"] is None  # no margin: no claim of absence


def test_diverged_seeds_are_judged_by_the_sign_test():
    d = decide([math.inf] * 5)
    assert d["p"] == pytest.approx(2 * 0.5**5) and d["verdict"] == INCONCLUSIVE  # 0.0625
    assert decide([math.inf] * 6)["verdict"] == AGREES
    assert decide([-math.inf] * 6)["verdict"] == DISAGREES
    mixed = decide([math.inf, 0.3, 0.2, 0.1, -0.1, 0.4])  # 5 of 6 positive: binomial p = 0.21875
    assert mixed["p"] == pytest.approx(stats.binomtest(5, 6).pvalue) and mixed["verdict"] == INCONCLUSIVE
    assert mixed["mean"] is None and "sign test" in mixed["why"]


def test_untuned_claims_say_so_after_adjustment():
    claims = adjust(verdict.mark_untuned([{"id": "a", "p": 0.001, "mean": 1.0, "verdict": AGREES}]))
    assert claims[0]["verdict"] == AGREES + verdict.UNTUNED


def test_an_inconclusive_verdict_names_no_direction():
    # the same mean, once decided and once not: only the decided one may say which way it went
    assert decide([0.3, -0.1, 0.2])["verdict"] == INCONCLUSIVE
    for word in ("better", "worse", "beats", "lower", "higher"):
        assert word not in INCONCLUSIVE and word not in verdict.RULE.split("inconclusive")[1]
