"""``nfeval train --tensorboard``: the event file holds the scalars of metrics.jsonl and grad stats."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json

import pytest
from conftest import make_corpus

from nfeval import cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    path.write_text(make_corpus(600, line_sep=" "))
    return str(path)


def train_args(corpus: str, out: str) -> list[str]:
    return ["train", "--out", out, "--preset", "prenorm-tiny", "--train-data", corpus, "--vocab-size", "300",
            "--seq-len", "32", "--batch-size", "2", "--max-steps", "6", "--log-interval", "2",
            "--eval-interval", "3", "--eval-samples", "4", "--ckpt-interval", "0", "--peak-flops", "1e12",
            "--no-progress"]  # fmt: skip


def test_event_file_holds_the_logged_scalars(corpus, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main([*train_args(corpus, str(run)), "--grad-stats", "2:3", "--tensorboard"]) == 0
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    expected = {
        f"{prefix}/{tag}": [(r["step"], r[field]) for r in rows if field in r]
        for prefix, tag, field in [
            ("train", "loss", "loss"), ("train", "lr", "lr"), ("train", "grad_norm", "grad_norm"),
            ("train", "tokens_per_s", "tokens_per_s"), ("train", "mfu", "mfu"),
            ("valid", "loss", "val_loss"), ("valid", "ppl", "val_ppl"),
        ]
    }  # fmt: skip
    assert [s for s, _ in expected["train/loss"]] == [2, 4, 6] and [s for s, _ in expected["valid/ppl"]] == [
        3,
        6,
    ]
    for tag, want in expected.items():
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in want], tag
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6), tag
    grads = [json.loads(line) for line in (run / "grad_stats.jsonl").read_text().splitlines()]
    got = [(e.step, e.value) for e in events.Scalars("grad_stats/fc2/layer_1")]
    assert got == [(g["update"], pytest.approx(g["values"]["fc2"][1], rel=1e-6)) for g in grads]
    assert [g["update"] for g in grads] == [2, 3]


def test_missing_tensorboard_fails_before_work(corpus, tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else find_spec(name, *a)
    )
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main([*train_args(corpus, str(tmp_path / "r")), "--tensorboard", str(tmp_path / "tb")])
    assert code == 2
    assert "tensorboard package is not installed (pip install 'nfeval[tensorboard]')" in err.getvalue()
    assert not (tmp_path / "r" / "metrics.jsonl").exists() and not (tmp_path / "tb").exists()
