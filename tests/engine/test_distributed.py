"""torchrun on CPU (gloo): 2 processes train like 1 process with the same global batch (DDP and FSDP2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_corpus, tiny_train_args

from nfeval.engine.checkpoints import checkpoint

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    corpus = root / "train.txt"
    corpus.write_text(make_corpus(1200), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "NFEVAL_CACHE": str(root / "cache")}
    return root, str(corpus), env


def launch(env: dict, out: Path, args: list[str], nproc: int) -> list[dict]:
    runner = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    done = subprocess.run(
        [*runner, "-m", "nfeval", "train", "--out", str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [
        r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"
    ]


def common(corpus: str, objective: str) -> list[str]:
    return tiny_train_args(corpus, batch_size=None, max_steps=6, objective=objective, lr="3e-3")


@pytest.mark.parametrize(
    "objective, sharding", [("clm", []), ("mlm", ["--fsdp"])], ids=["ddp-clm", "fsdp2-mlm"]
)
def test_two_processes_match_one(setup, objective, sharding):
    root, corpus, env = setup
    args = common(corpus, objective)
    one = launch(env, root / f"one-{objective}", [*args, "--batch-size", "4", "--grad-accum", "2"], nproc=1)
    two = launch(
        env,
        root / f"two-{objective}",
        [*args, "--batch-size", "2", "--grad-accum", "2", *sharding, "--ckpt-interval", "3"],
        nproc=2,
    )
    assert [r["step"] for r in two] == list(range(1, 7))
    assert two[-1]["tokens"] == one[-1]["tokens"] == 6 * 8 * 32
    for a, b in zip(one, two):
        assert abs(a["loss"] - b["loss"]) < 1e-5, (a["loss"], b["loss"])
        assert abs(a["grad_norm"] - b["grad_norm"]) < 1e-4 * a["grad_norm"]
    assert one[-1]["loss"] < one[0]["loss"]
    # Weights are not compared: Adam turns the key-bias gradient (zero in exact arithmetic) into noise-sized
    # steps.
    val1, val2 = (checkpoint.load(str(root / f"{n}-{objective}")) for n in ("one", "two"))
    assert val2.meta["compute"]["steps"] == 6 and val2.config == val1.config
    vals = [
        json.loads(line)["val_loss"]
        for n in ("one", "two")
        for line in (root / f"{n}-{objective}" / "metrics.jsonl").read_text().splitlines()
        if '"val"' in line
    ]
    assert len(vals) == 2 and abs(vals[0] - vals[1]) < 1e-5
    config = json.loads((root / f"two-{objective}" / "config.json").read_text())
    assert config["train"]["world_size"] == 2 and config["compute"]["device_hours"] == pytest.approx(
        2 * config["compute"]["wall_s"] / 3600
    )
    assert (root / f"two-{objective}" / "checkpoints" / "step_00000003" / "training_state.pt").is_file()


def test_fsdp2_resume_with_dropout_is_bitwise(setup):
    root, corpus, env = setup
    args = [
        *common(corpus, "mlm"),
        "--batch-size",
        "2",
        "--fsdp",
        "--ckpt-interval",
        "3",
        "--set",
        "dropout=0.1",
    ]
    full = launch(env, root / "fsdp-full", args, nproc=2)
    shutil.copytree(root / "fsdp-full", root / "fsdp-resumed")
    (root / "fsdp-resumed" / "model.safetensors").unlink()  # as if killed after the step-3 checkpoint
    resumed = launch(env, root / "fsdp-resumed", [*args, "--resume"], nproc=2)
    assert [r["loss"] for r in resumed] == [r["loss"] for r in full]
    assert [r["step"] for r in resumed] == list(range(1, 7))


def read(out: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def test_misaligned_intervals_sharded_validation_and_ddp_resume(setup):
    """Log every 3 steps, validate every 2, checkpoint every 4: the 2-process losses (interval means and
    sharded validation) equal the 1-process ones; a DDP resume from step 4 is bitwise."""
    root, corpus, env = setup
    args = [
        *common(corpus, "clm"),
        "--log-interval",
        "3",
        "--eval-interval",
        "2",
        "--ckpt-interval",
        "4",
        "--eval-samples",
        "7",
        "--max-steps",
        "8",
        "--set",
        "dropout=0.0",
    ]
    one = root / "mis-one"
    launch(env, one, [*args, "--batch-size", "4"], nproc=1)
    two = root / "mis-two"
    launch(env, two, [*args, "--batch-size", "2"], nproc=2)
    for kind, key in (("train", "loss"), ("val", "val_loss")):
        a, b = read(one, kind), read(two, kind)
        assert (
            [r["step"] for r in a]
            == [r["step"] for r in b]
            == ([3, 6, 8] if kind == "train" else [2, 4, 6, 8])
        )
        for x, y in zip(a, b):
            assert abs(x[key] - y[key]) < 1e-5, (kind, x[key], y[key])
    resumed = root / "mis-resumed"
    shutil.copytree(two, resumed)
    for name in ("complete.json", "model.safetensors"):  # as if killed during the final save
        (resumed / name).unlink()
    launch(env, resumed, [*args, "--batch-size", "2", "--resume"], nproc=2)
    for kind in ("train", "val"):
        assert read(resumed, kind) == [
            {
                **r,
                "wall_s": s["wall_s"],
                **({"tokens_per_s": s["tokens_per_s"], "mfu": s["mfu"]} if kind == "train" else {}),
            }
            for r, s in zip(read(two, kind), read(resumed, kind))
        ]
    assert checkpoint.load(str(resumed)).fingerprint == checkpoint.load(str(two)).fingerprint


def test_time_budget_stops_every_rank_at_the_same_step(setup):
    root, corpus, env = setup
    args = [a for a in common(corpus, "clm") if a not in ("--max-steps", "6")]
    out = root / "timed"
    launch(env, out, [*args, "--batch-size", "2", "--max-seconds", "3", "--calibration-steps", "3"], nproc=2)
    config = json.loads((out / "config.json").read_text())
    calibration = config["train"]["budget"]["calibration"]
    total = config["train"]["total_steps"]
    assert calibration["steps_timed"] >= 3 and total == int(3 // calibration["step_s"])
    assert read(out, "train")[-1]["step"] == total == config["compute"]["steps"]


@pytest.mark.parametrize("sharding", [[], ["--fsdp"]], ids=["ddp", "fsdp2"])
def test_ngpt_weights_stay_on_the_hypersphere_across_ranks(setup, sharding):
    """nGPT renormalises its weights after each update on every rank (out_proj's and fc2's columns span
    FSDP2's row shards): 2 processes train like 1 and save unit-norm weights."""
    root, corpus, env = setup
    args = tiny_train_args(corpus, batch_size=None, max_steps=6, lr="3e-3", preset="ngpt-tiny")
    name = "-".join(["ngpt", *sharding])
    one = launch(env, root / f"{name}-one", [*args, "--batch-size", "4", "--grad-accum", "2"], nproc=1)
    two = launch(env, root / f"{name}-two", [*args, "--batch-size", "2", "--grad-accum", "2", *sharding], 2)
    for a, b in zip(one, two):
        assert abs(a["loss"] - b["loss"]) < 1e-5, (a["loss"], b["loss"])
    model = checkpoint.load(str(root / f"{name}-two")).model
    for block in model.blocks:
        for w, dim in ((block.attn.qkv.weight, 1), (block.attn.out_proj.weight, 0), (block.fc2.weight, 0)):
            torch.testing.assert_close(w.norm(dim=dim), torch.ones(w.shape[1 - dim]))
