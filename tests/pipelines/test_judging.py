"""The judging set: a judged run read once more on the whole validation split, one loss per sequence, and
the per-measurement error a verdict takes from those sequences."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from conftest import tiny_train_config

from nfeval.engine.checkpoints import checkpoint, rundir
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.pipelines import judging, runs
from nfeval.pipelines.perplexity import final_ppl, judged_ppl
from nfeval.report import verdict


def test_sequence_losses_sum_to_the_models_own_loss_and_split_it_by_sequence():
    torch.manual_seed(0)
    model = Transformer(preset("prenorm-tiny", vocab_size=64, max_seq_len=32)).eval()
    inputs = torch.randint(0, 64, (70, 16))  # more than one forward of judging.BATCH sequences
    targets = torch.randint(0, 64, (70, 16))
    sums, counts = judging.sequence_losses(model, inputs, targets, torch.device("cpu"))
    assert sums.shape == (70,) and counts.tolist() == [16] * 70
    with torch.no_grad():
        whole = float(model.loss(inputs, targets))
        seventh = float(model.loss(inputs[6:7], targets[6:7], reduction="sum"))
    assert sums.sum() / counts.sum() == pytest.approx(whole, rel=1e-6)
    assert sums[6] == pytest.approx(seventh, rel=1e-6)


def test_masked_lm_sequence_losses_count_only_the_masked_positions():
    torch.manual_seed(0)
    model = Transformer(preset("prenorm-tiny", vocab_size=64, max_seq_len=32, objective="mlm")).eval()
    inputs = torch.randint(0, 64, (5, 12))
    targets = torch.full((5, 12), -100)
    targets[0, [1, 4]] = 7
    targets[3, 2] = 9
    sums, counts = judging.sequence_losses(model, inputs, targets, torch.device("cpu"))
    assert counts.tolist() == [2, 0, 0, 1, 0] and sums[1] == sums[2] == sums[4] == 0.0
    with torch.no_grad():
        first = float(model.loss(inputs[:1], targets[:1], reduction="sum"))
    assert sums[0] == pytest.approx(first, rel=1e-6)


def _block(means: list[float], tokens: int = 10) -> dict:
    sums = [m * tokens for m in means]
    return {"sequences": len(means), "sequence_loss_sums": sums, "sequence_tokens": tokens}


def test_the_measurement_error_is_the_standard_error_over_sequences_of_the_seeds_mean_difference():
    rng = np.random.default_rng(0)
    a = [rng.normal(4.0, 0.5, 200) for _ in range(3)]
    b = [x - 0.05 + rng.normal(0, 0.1, 200) for x in a]
    pairs = [({"judge": _block(list(x))}, {"judge": _block(list(y))}) for x, y in zip(a, b)]
    d = np.mean([x - y for x, y in zip(a, b)], axis=0)
    assert judging.measurement_se(pairs) == pytest.approx(d.std(ddof=1) / math.sqrt(200), rel=1e-9)
    # a record from before judging sets, or pairs read on other sequences: no error to add
    assert judging.measurement_se([({}, {"judge": _block([1.0, 2.0])})]) is None
    assert (
        judging.measurement_se([pairs[0], ({"judge": _block([1.0] * 3)}, {"judge": _block([1.0] * 3)})])
        is None
    )


def test_a_shared_validation_error_widens_the_verdict():
    """Five seeds agree on a gain of 0.02 to within 0.002, but the validation text itself moves the claim
    by 0.015: with that error the verdict is no longer sure of the sign."""
    diffs = [0.020, 0.021, 0.019, 0.022, 0.018]
    assert verdict.decide(diffs)["verdict"] == verdict.AGREES
    assert verdict.decide(diffs, measurement_se=0.015)["verdict"] == verdict.INCONCLUSIVE


def test_judged_ppl_reads_the_judging_set_before_the_runs_own_validation():
    record = {"status": "finished", "val_ppl": 120.0, "judge": {"ppl": 118.5}}
    assert judged_ppl(record) == 118.5 and judged_ppl({"status": "finished", "val_ppl": 120.0}) == 120.0
    assert final_ppl([record, {"status": "diverged", "val_ppl": None}]) == [118.5, math.inf]


def test_ensure_run_judges_a_run_rejudges_it_from_its_weights_and_retrains_it_when_they_are_gone(
    tmp_path, small_corpus
):
    valid = tmp_path / "valid.txt"
    valid.write_text(open(small_corpus).read()[:6000], encoding="utf-8")
    cfg = tiny_train_config(small_corpus, valid_data=str(valid), seed=3)
    folder = str(tmp_path / "runs" / "a" / "seed3")
    record = runs.ensure_run(cfg, folder, {"budget": {"max_steps": 8}}, print)
    judge = record["judge"]
    # the whole validation split: every block of the trainer's validation stream, in order
    inputs, targets = judging.validation_blocks(cfg, 32, "clm")
    assert judge["sequences"] == len(inputs) > cfg.eval_samples and judge["sequence_tokens"] == 32
    model = checkpoint.materialize(checkpoint.read(folder)).model
    with torch.no_grad():
        by_hand = float(model.loss(inputs, targets))
    assert judge["ppl"] == pytest.approx(math.exp(by_hand), rel=1e-5)
    stored = json.load(open(rundir.record_path(folder)))
    assert stored["judge"]["ppl"] == judge["ppl"]

    del stored["judge"]  # a record from before judging sets: judged from the weights, not retrained
    json.dump(stored, open(rundir.record_path(folder), "w"))
    mtime = os.stat(os.path.join(folder, rundir.WEIGHTS)).st_mtime_ns
    again = runs.ensure_run(cfg, folder, {"budget": {"max_steps": 8}}, print)
    assert again["judge"] == judge and os.stat(os.path.join(folder, rundir.WEIGHTS)).st_mtime_ns == mtime

    stored = json.load(open(rundir.record_path(folder)))
    del stored["judge"]  # and its weights gone (a committed folder): trained again, bit for bit
    json.dump(stored, open(rundir.record_path(folder), "w"))
    os.remove(os.path.join(folder, rundir.WEIGHTS))
    retrained = runs.ensure_run(cfg, folder, {"budget": {"max_steps": 8}}, print)
    assert retrained["judge"] == judge

    assert runs.ensure_run(cfg, str(tmp_path / "runs" / "b" / "seed1"), {}, print, train_now=False) is None


def test_a_masked_lms_sequences_are_weighted_by_their_targets_and_empty_ones_left_out():
    def block(sums, counts):
        return {"sequences": len(sums), "sequence_loss_sums": sums, "sequence_tokens": counts}

    # seed 1 masks (2, 0, 4) targets, seed 2 (1, 3, 0); each sequence's difference pooled over the seeds
    pairs = [
        ({"judge": block([2.0, 0.0, 8.0], [2, 0, 4])}, {"judge": block([1.0, 0.0, 4.0], [2, 0, 4])}),
        ({"judge": block([1.0, 6.0, 0.0], [1, 3, 0])}, {"judge": block([1.0, 3.0, 0.0], [1, 3, 0])}),
    ]
    d, w = np.array([1.0 / 3, 1.0, 1.0]), np.array([3.0, 3.0, 4.0])
    w = w / w.sum()
    mean = (w * d).sum()
    expected = math.sqrt((w**2 * (d - mean) ** 2).sum() * 3 / 2)
    assert judging.measurement_se(pairs) == pytest.approx(expected) and math.isfinite(expected)
