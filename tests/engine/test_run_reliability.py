"""Runs that survive kill -9 anywhere, never look finished when they are not, and resume honestly."""

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

from nfeval import cli
from nfeval.engine.checkpoints import checkpoint, rundir

REPO = Path(__file__).resolve().parents[2]
# ``nfeval`` SIGKILLed at a named point of its writes (no cleanup runs, as under kill -9): ``-c KILLED POINT
# ARGS`` runs the executable with the function that makes the next write replaced by a kill
KILLED = """
import os, signal, sys
from nfeval import cli
from nfeval.engine.checkpoints import rundir, torch_files

def kill(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

point = sys.argv.pop(1)
if point == "final-save":  # the final weights written, the completion marker not
    rundir.mark_complete = kill
else:  # checkpoint-mid: the checkpoint's weights in its temp folder, its training state not
    save = torch_files.save
    torch_files.save = lambda obj, path: (kill if path.endswith(rundir.STATE) else save)(obj, path)
sys.exit(cli.console())
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    path.write_text(make_corpus(1200))
    return str(path)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    cache = tmp_path_factory.mktemp("cache")
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "NFEVAL_CACHE": str(cache)}


def args(corpus: str, *extra: str) -> list[str]:
    return [*tiny_train_args(corpus, ckpt_interval=3), "--set", "dropout=0.1", *extra]


def nfeval_train(env: dict, out: Path, argv: list[str], crash_at: str | None = None):
    nfeval = ["-c", KILLED, crash_at] if crash_at else ["-m", "nfeval"]
    return subprocess.run(
        [sys.executable, *nfeval, "train", "--out", str(out), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def summary_of(stdout: str) -> dict:
    """Returns the run summary: the JSON object ``nfeval train`` prints last."""
    return json.loads(stdout[stdout.rindex("{\n") :])


def losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in rundir.read_metrics(str(run), "train")]


@pytest.fixture(scope="module")
def reference(corpus, env, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ref") / "run"
    done = nfeval_train(env, run, args(corpus))
    assert done.returncode == 0, done.stderr[-2000:]
    return run


@pytest.mark.parametrize("point", ["final-save", "checkpoint-mid"])
def test_kill_9_then_resume_equals_uninterrupted(corpus, env, reference, tmp_path, point):
    run = tmp_path / "run"
    killed = nfeval_train(env, run, args(corpus), crash_at=point)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert rundir.completion(str(run)) is None  # never "finished" without the marker
    assert train_summary_refuses_fresh(corpus, run)
    if point == "checkpoint-mid":
        assert os.listdir(run / "checkpoints") == [".tmp-step_00000003"]
        with pytest.raises(FileNotFoundError):  # readers never look inside a temp folder
            checkpoint.resolve(str(run))
    resumed = nfeval_train(env, run, [*args(corpus), "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = summary_of(resumed.stdout)
    want = json.loads((reference / "complete.json").read_text())
    assert summary["step"] == 8 and summary["fingerprint"] == want["fingerprint"]
    for key in ("tokens", "flops", "total_steps"):
        assert summary[key] == want[key]
    assert losses(run) == losses(reference)
    assert checkpoint.load(str(run)).fingerprint == want["fingerprint"]
    assert not [p for p in run.rglob(".tmp-*")], "stray temp files"
    again = nfeval_train(env, run, [*args(corpus), "--resume"])  # finished: the same summary, no work
    assert (
        summary_of(again.stdout)["step"] == 8
        and summary_of(again.stdout)["fingerprint"] == want["fingerprint"]
    )


def train_summary_refuses_fresh(corpus: str, run: Path) -> bool:
    code = cli.main(["train", "--out", str(run), *args(corpus)])
    return code == 2


def test_resume_falls_back_past_a_truncated_checkpoint(corpus, env, reference, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "complete.json").unlink()  # as if killed during the final save
    newest = run / "checkpoints" / "step_00000006" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:-100])
    resumed = nfeval_train(env, run, [*args(corpus), "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "step_00000006: skipped, model.safetensors is truncated" in resumed.stderr
    assert "resuming from " + str(run / "checkpoints" / "step_00000003") in resumed.stderr
    assert losses(run) == losses(reference)
    assert (
        summary_of(resumed.stdout)["fingerprint"]
        == json.loads((reference / "complete.json").read_text())["fingerprint"]
    )


def test_resume_refuses_changed_budget_unless_overridden(corpus, env, reference, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "complete.json").unlink()
    code = cli.main(
        ["train", "--out", str(run), "--resume", *args(corpus), "--max-steps", "10", "--lr", "1e-3"]
    )
    err = capsys.readouterr().err
    assert (
        code == 2
        and "max_steps: 8 -> 10" in err
        and "lr: 0.0006 -> 0.001" in err
        and "--override-resume" in err
    )
    code = cli.main(["train", "--out", str(run), "--resume", "--batch-size", "4", "--override-resume"])
    assert code == 2 and "batch_size: 2 -> 4" in capsys.readouterr().err  # never overridable
    # Resuming with no flags at all takes the saved config.
    assert cli.main(["train", "--out", str(run), "--resume", "--no-progress"]) == 0
    assert json.loads((run / "complete.json").read_text())["step"] == 8
    (run / "complete.json").unlink()
    code = cli.main(
        ["train", "--out", str(run), "--resume", "--no-progress", "--max-steps", "10", "--override-resume"]
    )
    out = capsys.readouterr()
    assert code == 0 and "--override-resume: taking {'max_steps': 10}" in out.err
    assert summary_of(out.out)["step"] == 10
    assert json.loads((run / "config.json").read_text())["train"]["config"]["max_steps"] == 10


def test_training_state_loads_without_pickle(reference):
    state = torch.load(reference / "checkpoints" / "step_00000003" / rundir.STATE, weights_only=True)
    assert state["step"] == 3 and len(state["rng"]) == 1


def test_leftover_run_says_how_to_start_over(corpus, reference, capsys):
    assert cli.main(["train", "--out", str(reference), *args(corpus)]) == 2
    err = capsys.readouterr().err
    assert "pass --resume" in err and f"rm -r {reference}" in err and "another --out" in err


def test_metrics_reader_tolerates_a_cut_last_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n{"kind": "tr')
    assert rundir.read_metrics(str(tmp_path)) == [{"kind": "train", "step": 1}]
    (tmp_path / "metrics.jsonl").write_text('{"kind": "tr\n{"kind": "train", "step": 1}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: invalid JSON"):
        rundir.read_metrics(str(tmp_path))


def test_runs_written_before_complete_json_count_by_their_fingerprint(reference, tmp_path):
    """An nfeval 0.1 run (no complete.json, no train.parallel) is finished when config.json's
    fingerprint is the stored weights' and its compute reached the planned steps; the kill-during-final-save
    state of that version (the start-of-run config.json: no fingerprint, step 0) is not."""
    run = tmp_path / "legacy"
    shutil.copytree(reference, run)
    (run / "complete.json").unlink()
    meta = json.loads((run / "config.json").read_text())
    del meta["train"]["parallel"]
    (run / "config.json").write_text(json.dumps(meta))
    want = json.loads((reference / "complete.json").read_text())
    record = rundir.completion(str(run))
    assert record is not None and record["legacy"]
    assert {k: record[k] for k in ("fingerprint", "step", "tokens", "flops", "total_steps", "val_loss")} == {
        k: want[k] for k in ("fingerprint", "step", "tokens", "flops", "total_steps", "val_loss")
    }
    assert checkpoint.resolve(str(run)) == str(run)
    killed = {**meta, "fingerprint": None, "compute": {**meta["compute"], "steps": 0}}
    (run / "config.json").write_text(json.dumps(killed))
    assert rundir.completion(str(run)) is None
