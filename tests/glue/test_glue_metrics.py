"""GLUE metrics equal scikit-learn / scipy and the GLUE definitions, edge cases included."""

import math

import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from nfeval.glue import metrics as gm

LABELS = [1, 1, 0, 0, 1, 0]
PREDS = [1, 0, 0, 1, 1, 0]  # tp=2, tn=2, fp=1, fn=1


def test_classification_metrics_match_hand_values_and_sklearn():
    assert gm.accuracy(LABELS, PREDS) == pytest.approx(4 / 6)
    assert gm.f1(LABELS, PREDS) == pytest.approx(2 / 3)
    assert gm.mcc(LABELS, PREDS) == pytest.approx((2 * 2 - 1 * 1) / 9)
    assert gm.accuracy(LABELS, PREDS) == accuracy_score(LABELS, PREDS)
    assert gm.f1(LABELS, PREDS) == f1_score(LABELS, PREDS)
    assert gm.mcc(LABELS, PREDS) == matthews_corrcoef(LABELS, PREDS)


def test_constant_predictions():
    assert gm.mcc(LABELS, [1] * 6) == 0.0  # sklearn's convention
    assert gm.mcc(LABELS, [0] * 6) == 0.0
    assert gm.f1(LABELS, [0] * 6) == 0.0  # no positive prediction
    assert gm.f1(LABELS, [1] * 6) == pytest.approx(2 * 0.5 / 1.5)  # precision 1/2, recall 1
    assert gm.accuracy(LABELS, [0] * 6) == 0.5


def test_correlations_match_scipy():
    y = [0.0, 1.2, 2.5, 3.1, 4.8, 5.0, 2.2]
    p = [0.3, 1.0, 3.0, 2.9, 4.0, 4.9, 1.0]
    assert gm.pearson(y, p) == pytest.approx(stats.pearsonr(y, p)[0])
    assert gm.spearman(y, p) == pytest.approx(stats.spearmanr(y, p)[0])
    assert gm.pearson([1, 2, 3, 4], [2, 4, 6, 8]) == pytest.approx(1.0)
    assert gm.pearson([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert gm.spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)
    assert gm.pearson([1, 2, 3, 4], [1, 4, 9, 16]) < 0.99


def test_correlation_of_constant_input_is_zero_not_nan():
    for fn in (gm.pearson, gm.spearman):
        assert fn([1.0, 2.0, 3.0], [2.5, 2.5, 2.5]) == 0.0
        assert fn([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
        assert fn([1.0], [1.0]) == 0.0
        assert not math.isnan(fn([1.0, 2.0], [3.0, 3.0]))


def test_compute_per_task_keys_and_splits():
    mnli = gm.compute(
        "mnli",
        {"dev_matched": [0, 1, 2], "dev_mismatched": [2, 2]},
        {"dev_matched": [0, 1, 1], "dev_mismatched": [2, 0]},
    )
    assert mnli == {"accuracy_m": pytest.approx(2 / 3), "accuracy_mm": 0.5}
    mrpc = gm.compute("mrpc", {"dev": LABELS}, {"dev": PREDS})
    assert mrpc == {"accuracy": pytest.approx(4 / 6), "f1": pytest.approx(2 / 3)}
    assert set(gm.compute("stsb", {"dev": [1.0, 2.0]}, {"dev": [1.0, 3.0]})) == {"pearson", "spearman"}
    assert set(gm.compute("cola", {"dev": LABELS}, {"dev": PREDS})) == {"mcc"}
    for task in ("sst2", "qnli", "rte"):
        assert set(gm.compute(task, {"dev": LABELS}, {"dev": PREDS})) == {"accuracy"}
    assert gm.MAIN_METRIC.keys() == gm.SPLIT_METRICS.keys()
    with pytest.raises(ValueError, match="3 predictions for 6 labels"):
        gm.compute("rte", {"dev": LABELS}, {"dev": [1, 0, 1]})


def test_task_score_and_glue_average():
    assert gm.task_score("mrpc", {"accuracy": 0.8, "f1": 0.9}) == pytest.approx(0.85)
    assert gm.task_score("mnli", {"accuracy_m": 0.7, "accuracy_mm": 0.8}) == pytest.approx(0.75)
    assert gm.task_score("cola", {"mcc": 0.4}) == pytest.approx(0.4)
    assert gm.glue_average({"cola": 0.4, "mrpc": 0.85}) == pytest.approx(0.625)
    with pytest.raises(ValueError):
        gm.glue_average({})
