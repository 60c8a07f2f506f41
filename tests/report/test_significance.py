"""Paired statistics against scipy and scikit-learn, and the bootstrap's coverage on known differences."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import f1_score, matthews_corrcoef

from nfeval.report import significance as sig


def test_mcnemar_is_binomtest_on_discordant_pairs():
    rng = np.random.default_rng(3)
    a, b = rng.random(500) < 0.62, rng.random(500) < 0.55
    out = sig.mcnemar(a, b)
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    assert (out["a_only"], out["b_only"]) == (a_only, b_only)
    assert out["p"] == pytest.approx(stats.binomtest(a_only, a_only + b_only, 0.5).pvalue, rel=1e-12)
    assert sig.mcnemar([1, 0, 1], [1, 0, 1])["p"] == 1.0  # no discordant item


def test_bootstrap_matches_scipy_percentile_interval():
    rng = np.random.default_rng(0)
    a, b = (rng.random(300) < 0.6).astype(float), (rng.random(300) < 0.5).astype(float)
    ours = sig.paired_bootstrap(sig.mean_difference, (a, b), n_resamples=2000, seed=7)
    ref = stats.bootstrap(
        (a, b),
        lambda x, y, axis=-1: x.mean(axis) - y.mean(axis),
        paired=True,
        vectorized=True,
        n_resamples=2000,
        method="percentile",
        rng=np.random.default_rng(7),
    )
    assert ours["low"] == pytest.approx(ref.confidence_interval.low, abs=1e-12)
    assert ours["high"] == pytest.approx(ref.confidence_interval.high, abs=1e-12)
    assert ours["difference"] == pytest.approx(a.mean() - b.mean())


def test_bootstrap_covers_a_known_difference_about_95_percent():
    # joint outcome probabilities (both right, A only, B only, both wrong): true difference 0.25 - 0.15
    probs, n_items, covered = [0.45, 0.25, 0.15, 0.15], 400, 0
    for sim in range(200):
        rng = np.random.default_rng(1000 + sim)
        cell = rng.choice(4, size=n_items, p=probs)
        a, b = np.isin(cell, (0, 1)).astype(float), np.isin(cell, (0, 2)).astype(float)
        ci = sig.paired_bootstrap(sig.mean_difference, (a, b), n_resamples=1000, seed=sim)
        covered += ci["low"] <= 0.10 <= ci["high"]
    assert 0.91 <= covered / 200 <= 0.99, covered  # binomial sd at 95%: 1.5 points


def test_row_metrics_match_scikit_learn_and_scipy():
    rng = np.random.default_rng(1)
    labels, preds = rng.integers(0, 2, (4, 60)), rng.integers(0, 2, (4, 60))
    x, y = rng.normal(size=(4, 60)), rng.normal(size=(4, 60))
    x[:, 5] = x[:, 6]  # a tie: Spearman must use average ranks, as scipy
    for i in range(4):
        assert sig.mcc_rows(labels, preds)[i] == pytest.approx(matthews_corrcoef(labels[i], preds[i]))
        assert sig.f1_rows(labels, preds)[i] == pytest.approx(f1_score(labels[i], preds[i]))
        assert sig.pearson_rows(x, y)[i] == pytest.approx(stats.pearsonr(x[i], y[i])[0])
        assert sig.spearman_rows(x, y)[i] == pytest.approx(stats.spearmanr(x[i], y[i])[0])
    assert sig.mcc_rows(np.ones((1, 5)), np.ones((1, 5)))[0] == 0.0  # undefined: 0, as scikit-learn


def test_t_interval_matches_scipy():
    values = [0.61, 0.58, 0.64, 0.6]
    out = sig.t_interval(values)
    low, high = stats.t.interval(0.95, 3, loc=np.mean(values), scale=stats.sem(values))
    assert (out["low"], out["high"]) == (pytest.approx(low), pytest.approx(high))
    assert out["std"] == pytest.approx(np.std(values, ddof=1)) and out["n"] == 4
    assert sig.t_interval([0.5])["low"] is None


def test_unequal_lengths_refused():
    with pytest.raises(ValueError, match="one length"):
        sig.paired_bootstrap(sig.mean_difference, ([1, 0, 1], [1, 0]))
