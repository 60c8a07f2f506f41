"""A learning rate that is no learning rate is refused before training, wherever it comes from: a crafted
tune.json (``--lr-from``), a flag or a ``--config`` file."""

from __future__ import annotations

import json

import pytest

from nfeval.cli import main


def tune_json(tmp_path, entry) -> str:
    path = tmp_path / "tune.json"
    data = {"presets": {"prenorm-tiny": entry}, "budget": {"spec": "steps=2"}}
    path.write_text(json.dumps(data))  # json writes float("inf") as Infinity, as a crafted file holds it
    return str(path)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"best_lr": float("inf"), "per_lr": {}}, "'presets.prenorm-tiny.best_lr' is inf"),
        ({"best_lr": True, "per_lr": {}}, "'presets.prenorm-tiny.best_lr' is True"),
        ({"best_lr": 1e-3, "per_lr": {"0.001": {"lr": 1e-3}}}, "'presets.prenorm-tiny.per_lr' is malformed"),
    ],
)
def test_a_crafted_tuned_lr_is_one_line_before_training(tmp_path, capsys, entry, message):
    out = tmp_path / "run"
    argv = ["train", "--out", str(out), "--preset", "prenorm-tiny", "--max-steps", "2"]
    assert main([*argv, "--lr-from", tune_json(tmp_path, entry)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


@pytest.mark.parametrize("source", ["flag", "config"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_a_non_finite_lr_is_refused(tmp_path, capsys, source, value):
    argv = ["train", "--out", str(tmp_path / "run"), "--max-steps", "2"]
    if source == "flag":
        argv += ["--lr", str(value)]
    else:
        (tmp_path / "c.json").write_text(json.dumps({"lr": value}))
        argv += ["--config", str(tmp_path / "c.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lr=" in err and "expected a finite number" in err, err
