"""The GLUE benchmarks' Trainer is nfeval's recipe: fed the same batches with dropout off it trains as
nfeval's fine-tune does (glue_gap_probe.py), and glue_sweep.py runs its sides on a synthetic SST-2;
glue_denormals.py times a point flushing and not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import glue_denormals  # noqa: E402
import glue_gap_probe  # noqa: E402
import glue_sweep  # noqa: E402
import glue_trainer  # noqa: E402

TINY = [
    "--train",
    "96",
    "--layers",
    "1",
    "--d-model",
    "32",
    "--heads",
    "2",
    "--vocab",
    "300",
    "--epochs",
    "2",
]


@pytest.fixture(scope="module")
def sst2(tmp_path_factory) -> str:
    return glue_sweep.synthetic_sst2(tmp_path_factory.mktemp("glue"), n_train=96, n_dev=64)


def test_the_trainer_on_nfevals_batches_trains_as_nfeval(sst2, tmp_path):
    args = glue_gap_probe.parse_args(["--glue-dir", sst2, "--batch-size", "16", "--lrs", "3e-3", *TINY])
    ckpt, data, recipe, enc = glue_gap_probe.prepare("sst2", args, str(tmp_path))
    assert (recipe.epochs, recipe.batch_size, recipe.dropout) == (2, 16, 0.0)  # the probe's default: off
    hf_loss, hf_w, hf_dev = glue_gap_probe.run_trainer(ckpt, data, args, 3e-3, {})
    nf_loss, nf_w, nf_dev = glue_gap_probe.run_nfeval(ckpt, enc, recipe, 3e-3, {})
    assert len(hf_loss) == len(nf_loss) == 12  # 96 rows / 16, two epochs
    assert max(abs(a - b) for a, b in zip(hf_loss, nf_loss)) < 1e-5
    assert (hf_w[-1] - nf_w[-1]).abs().max() < 1e-5
    assert hf_loss[0] != hf_loss[-1] and hf_dev == nf_dev  # it trained, and both score alike


def test_glue_sweep_times_every_side_on_one_start(sst2, tmp_path):
    argv = ["--glue-dir", sst2, "--tasks", "sst2", "--lrs", "1e-3,3e-3", *TINY]
    args = glue_sweep.parse_args(argv + ["--trainer-order", "group_by_length,random"])
    times, scores = glue_sweep.interleaved(glue_sweep.sides_of("sst2", args, str(tmp_path)), 1)
    assert list(times) == ["nfeval", "HF Trainer", "HF Trainer (random order)"]
    assert all(len(t) == 1 and t[0] > 0 for t in times.values())
    assert all(set(s) == {1e-3, 3e-3} for s in scores.values())
    assert all(0 <= last <= best <= 1 for best, last in scores["nfeval"].values())


def test_glue_sweep_refuses_an_unknown_trainer_order():
    with pytest.raises(SystemExit):
        glue_sweep.parse_args(["--trainer-order", "sorted"])


def test_glue_sweep_names_one_trainer_side_per_order_and_compile_mode(sst2, tmp_path):
    argv = ["--glue-dir", sst2, "--tasks", "sst2", "--trainer-compile", "both", *TINY]
    args = glue_sweep.parse_args(argv + ["--trainer-order", "group_by_length,random"])
    assert args.trainer_compile == [False, True]
    sides = glue_sweep.sides_of("sst2", args, str(tmp_path))
    assert list(sides) == [
        "nfeval",
        "HF Trainer",
        "HF Trainer, torch.compile",
        "HF Trainer (random order)",
        "HF Trainer (random order), torch.compile",
    ]
    assert sides["HF Trainer, torch.compile"].args[-1] is True  # run_trainer(..., compiled)
    assert glue_trainer.training_arguments(1e-3, "random", args, compiled=True).torch_compile
    assert not glue_trainer.training_arguments(1e-3, "random", args).torch_compile
    with pytest.raises(SystemExit):
        glue_sweep.parse_args(["--trainer-compile", "sometimes"])


def test_glue_denormals_times_a_point_both_ways_and_leaves_ieee_arithmetic(sst2):
    argv = ["--glue-dir", sst2, "--task", "sst2", "--lr", "1e-3", "--rounds", "1", *TINY]
    runs = glue_denormals.main(argv)
    assert [len(runs[flush]) for flush in (True, False)] == [1, 1]
    (on, on_scores), (off, off_scores) = runs[True][0], runs[False][0]
    assert on > 0 and off > 0 and set(on_scores) == set(off_scores) == {1e-3}
    # the tiny model meets no denormal, so flushing changes nothing it computes
    assert on_scores == off_scores
