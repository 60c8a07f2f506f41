"""The training engine (nfeval.engine.training.train): budgets, schedule, run dir, resume after kill -9,
NaN stop, errors."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import flushed_denormals, make_corpus, tiny_train_args, tiny_train_config

from nfeval import cli
from nfeval.base.artifacts import provenance
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.model.model import Transformer
from nfeval.engine.training.budget import lr_at
from nfeval.engine.training.train import train
from nfeval.engine.training.train_config import TrainConfig
from nfeval.engine.training.trainer import TrainingDiverged

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    path.write_text(make_corpus(1200), encoding="utf-8")
    return str(path)


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    folder = tmp_path_factory.getbasetemp() / "nfeval-cache"
    monkeypatch.setenv("NFEVAL_CACHE", str(folder))
    return folder


def tiny(corpus: str, **changes) -> TrainConfig:
    return tiny_train_config(corpus, **{"max_steps": 6, **changes})


def metrics(run: Path, kind: str = "train") -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def test_schedule_warms_up_linearly_then_decays_to_zero():
    cfg = TrainConfig(max_steps=100, lr=1e-3, warmup=10)
    lrs = [lr_at(cfg, s, 100) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert lrs[10] == lrs[9] and all(
        a > b for a, b in zip(lrs[10:], lrs[11:])
    )  # as fairseq: peak, then decay
    assert lrs[-1] == pytest.approx(1e-3 / 90)
    assert lr_at(cfg, 100, 100) == 0.0
    assert lr_at(TrainConfig(max_steps=1, warmup=0.1), 0, 1000) == pytest.approx(
        6e-4 / 100
    )  # fraction of the run


def test_run_dir_metrics_and_checkpoint(corpus, tmp_path):
    run = tmp_path / "run"
    summary = train(tiny(corpus, max_steps=20, eval_interval=10, ckpt_interval=10, lr=3e-3), str(run))
    assert summary["step"] == 20 and summary["tokens"] == 20 * 2 * 32
    for name in (
        "config.json",
        "tokenizer.json",
        "metrics.jsonl",
        "model.safetensors",
        "checkpoints/step_00000010/training_state.pt",
    ):
        assert (run / name).is_file(), name
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 21))
    assert set(rows[0]) == {
        "kind",
        "step",
        "tokens",
        "wall_s",
        "flops",
        "lr",
        "loss",
        "grad_norm",
        "tokens_per_s",
        "mfu",
    }
    assert all(b["wall_s"] > a["wall_s"] and b["flops"] > a["flops"] for a, b in zip(rows, rows[1:]))
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.3
    vals = metrics(run, "val")
    assert [v["step"] for v in vals] == [10, 20] and vals[1]["val_ppl"] == pytest.approx(
        math.exp(vals[1]["val_loss"])
    )
    assert summary["val_loss"] == vals[-1]["val_loss"]
    config = json.loads((run / "config.json").read_text())
    compute = config["compute"]
    assert compute["steps"] == 20 and compute["tokens"] == 1280 and compute["wall_s"] == rows[-1]["wall_s"]
    assert compute["flops"] == rows[-1]["flops"] and compute["hardware"]["cpu_count"]
    assert config["train"]["config"]["lr"] == 3e-3 and config["provenance"]["seed"] == 1
    # the libraries that can move a run's numbers, beside the kernel that ran its products
    assert compute["hardware"]["cpu_linear_kernel"] and config["provenance"]["libraries"]["numpy"]
    ckpt = checkpoint.load(str(run))
    assert ckpt.fingerprint == summary["fingerprint"] == config["fingerprint"]
    assert ckpt.config.architecture == "normformer" and ckpt.config.vocab_size == 320
    assert checkpoint.load(str(run / "checkpoints" / "step_00000010")).meta["compute"]["steps"] == 10


def test_provenance_names_the_library_versions():
    import numpy
    import tokenizers

    libraries = provenance()["libraries"]
    assert set(libraries) == {"numpy", "tokenizers", "mkl", "onednn", "cpu_capability"}
    assert libraries["numpy"] == numpy.__version__ and libraries["tokenizers"] == tokenizers.__version__
    assert libraries["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    if torch.backends.mkldnn.is_available():  # torch's build summary names the oneDNN it carries
        assert "DNN" in libraries["onednn"]
    if torch.backends.mkl.is_available():
        assert "Math Kernel Library" in libraries["mkl"]


def test_budgets_give_step_counts(corpus, tmp_path):
    tokens_per_step = 2 * 32
    by_tokens = train(tiny(corpus, max_steps=None, max_tokens=5 * tokens_per_step + 7), str(tmp_path / "t"))
    assert by_tokens["step"] == 5
    flops_per_step = by_tokens["flops"] / 5
    by_flops = train(tiny(corpus, max_steps=None, max_flops=3.5 * flops_per_step), str(tmp_path / "f"))
    assert by_flops["step"] == 3
    both = train(tiny(corpus, max_steps=2, max_tokens=10**9), str(tmp_path / "b"))
    assert both["step"] == 2


def test_time_budget_calibrates_steps(corpus, tmp_path):
    run = tmp_path / "time"
    summary = train(
        tiny(corpus, max_steps=None, max_seconds=0.3, calibration_steps=3, log_interval=0), str(run)
    )
    train_cfg = json.loads((run / "config.json").read_text())["train"]
    cal = train_cfg["budget"]["calibration"]
    assert cal["steps_warmup"] >= 2 and cal["steps_timed"] >= 3 and cal["step_s"] > 0
    assert len(cal["step_times_s"]) == cal["steps_warmup"] + cal["steps_timed"]
    assert sum(cal["step_times_s"][: cal["steps_warmup"]]) >= 0.02 * 0.3  # a share of the budget warms up
    assert sum(cal["step_times_s"][cal["steps_warmup"] :]) >= 0.03 * 0.3
    assert summary["step"] == train_cfg["total_steps"] == int(0.3 // cal["step_s"])
    assert summary["wall_s"] < 3 * 0.3  # the estimate is honest: actual time near the budget


def test_mlm_and_bf16(corpus, tmp_path):
    summary = train(tiny(corpus, objective="mlm", dtype="bf16", max_steps=8, lr=3e-3), str(tmp_path / "mlm"))
    rows = metrics(tmp_path / "mlm")
    assert all(math.isfinite(r["loss"]) for r in rows) and rows[-1]["loss"] < rows[0]["loss"]
    assert checkpoint.load(str(tmp_path / "mlm")).config.objective == "mlm"
    assert math.isfinite(summary["val_loss"])


def test_resume_after_kill_9_is_bitwise(corpus, tmp_path):
    args = [*tiny_train_args(corpus, max_steps=300, ckpt_interval=20), "--set", "dropout=0.1"]
    run = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nfeval", "train", "--out", str(run), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    target = run / "checkpoints" / "step_00000040"
    deadline = time.time() + 120
    while not target.is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.is_dir(), proc.stderr.read().decode()[-2000:]
    assert not (run / "model.safetensors").exists(), "the run finished before it could be killed"
    assert max(r["step"] for r in metrics(run)) >= 40
    resumed = subprocess.run(
        [sys.executable, "-m", "nfeval", "train", "--out", str(run), "--resume", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    reference = tmp_path / "reference"
    ns = cli.build_parser("train").parse_args(["train", "--out", str(reference), *args])
    from nfeval.engine.training.train_flags import config_from_args

    with flushed_denormals():  # the arithmetic of the one-thread nfeval process above
        train(config_from_args(ns), str(reference))
    got, want = metrics(run), metrics(reference)
    assert [r["step"] for r in got] == list(range(1, 301))
    assert [r["loss"] for r in got] == [
        r["loss"] for r in want
    ]  # bitwise: dropout RNG and data position restored
    assert [r["grad_norm"] for r in got] == [r["grad_norm"] for r in want]
    assert checkpoint.load(str(run)).fingerprint == checkpoint.load(str(reference)).fingerprint


def test_nan_loss_stops_and_keeps_last_good_checkpoint(corpus, tmp_path, monkeypatch):
    calls = {"n": 0}
    encode = Transformer.encode

    def poisoned(self, idx, padding_mask=None):
        calls["n"] += 1
        hidden = encode(self, idx, padding_mask)
        return hidden * float("nan") if calls["n"] >= 8 else hidden

    monkeypatch.setattr(Transformer, "encode", poisoned)
    run = tmp_path / "nan"
    with pytest.raises(TrainingDiverged, match=r"non-finite loss within steps 8-8 .*step_00000006"):
        train(tiny(corpus, max_steps=12, ckpt_interval=3), str(run))
    assert sorted(os.listdir(run / "checkpoints")) == ["step_00000003", "step_00000006"]
    assert not (run / "model.safetensors").exists()
    assert max(r["step"] for r in metrics(run)) == 7
    state = checkpoint.load(str(run / "checkpoints" / "step_00000006")).model.state_dict()
    assert all(torch.isfinite(t).all() for t in state.values())


def nfeval_train(*args: str) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["train", *args])
    return code, err.getvalue()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--preset", "normformer-huge", "--max-steps", "5"], "unknown preset 'normformer-huge'"),
        ([], "no budget"),
        (["--max-steps", "0"], "impossible budget: max_steps=0"),
        (["--max-tokens", "10"], r"impossible budget: max_tokens=10.* less than one step"),
        (["--max-steps", "5", "--warmup", "10"], "impossible budget: warmup=10 steps"),
        (["--max-steps", "5", "--seq-len", "9999"], "seq_len=9999 exceeds"),
        (["--max-steps", "5", "--set", "n_heads=3"], r"unknown model config field"),
    ],
)
def test_bad_input_fails_before_work(corpus, tmp_path, extra, message):
    code, err = nfeval_train(
        "--out", str(tmp_path / "r"), "--train-data", corpus, "--vocab-size", "300", "--seq-len", "32", *extra
    )
    assert code == 2
    assert re.search(message, err), err
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_bad_corpus_fails_clearly(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    code, err = nfeval_train("--out", str(tmp_path / "r"), "--train-data", str(bad), "--max-steps", "3")
    assert code == 2 and "latin1.txt: not UTF-8 text: invalid byte 0xe9 at line 1" in err
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    code, err = nfeval_train("--out", str(tmp_path / "r"), "--train-data", str(empty), "--max-steps", "3")
    assert code == 2 and "empty.txt: empty" in err


def test_config_file_then_flags(corpus, tmp_path):
    from nfeval.engine.training.train_flags import config_from_args

    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"lr": 1e-3, "max_steps": 7, "model": {"dropout": 0.2}}), encoding="utf-8")
    ns = cli.build_parser("train").parse_args(
        ["train", "--out", "x", "--config", str(path), "--max-steps", "9", "--set", "attn_dropout=0.1"]
    )
    cfg = config_from_args(ns)
    assert (cfg.lr, cfg.max_steps, cfg.model) == (1e-3, 9, {"dropout": 0.2, "attn_dropout": 0.1})
    path.write_text(json.dumps({"learning_rate": 1}), encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"cfg\.json: unknown training config field\(s\) \['learning_rate'\]"
    ):
        config_from_args(cli.build_parser("train").parse_args(["train", "--out", "x", "--config", str(path)]))


def test_existing_run_needs_resume(corpus, tmp_path):
    run = tmp_path / "r"
    train(tiny(corpus, max_steps=2), str(run))
    with pytest.raises(ValueError, match="already holds a run; pass --resume"):
        train(tiny(corpus, max_steps=2), str(run))
    assert train(tiny(corpus, max_steps=2), str(run), resume=True)["step"] == 2  # finished: nothing to do


def test_time_budget_calibration_leaves_no_trace(corpus, tmp_path):
    """Calibration steps are undone: the run then trains exactly like a step-budget run of equal length."""
    timed = train(
        tiny(
            corpus,
            max_steps=None,
            max_seconds=0.2,
            calibration_steps=2,
            log_interval=1,
            lr=3e-3,
            model={"dropout": 0.1},
        ),
        str(tmp_path / "a"),
    )
    train(
        tiny(corpus, max_steps=timed["step"], log_interval=1, lr=3e-3, model={"dropout": 0.1}),
        str(tmp_path / "b"),
    )
    assert [r["loss"] for r in metrics(tmp_path / "a")] == [r["loss"] for r in metrics(tmp_path / "b")]


def test_grad_stats_window_is_recorded_before_clipping(corpus, tmp_path):
    """--grad-stats logs each update of the window (gradients of the mean token loss, unclipped)."""
    out = tmp_path / "run"
    train(tiny(corpus, grad_stats="2:3", clip_grad=1e-6), str(out))
    rows = [json.loads(line) for line in (out / "grad_stats.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [2, 3]
    fc2 = rows[0]["values"]["fc2"]
    assert len(fc2) == 2 and all(v > 1e-6 for v in fc2)  # a 1e-6 clip would have scaled them below that
    summary = json.loads((out / "config.json").read_text())["train"]["grad_stats"]
    assert summary["window"] == [2, 3] and summary["updates"] == 2
    assert summary["mean"]["fc2"] == pytest.approx(
        [(a + b) / 2 for a, b in zip(fc2, rows[1]["values"]["fc2"])]
    )
