"""One writer per run, reproduce and bakeoff folder (``sweep_lock.folder_lock``): a second process is
refused at once, naming the folder and the holder; the holder's own nested writers are not; a rerun
deletes what a killed writer left; a resume that changes the architecture of a finished run is refused."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from conftest import held_elsewhere, tiny_train_args

from nfeval import cli
from nfeval.base.sweep_lock import folder_lock, point_lock


def run_cli(*argv: str) -> tuple[int, str]:
    """Returns (exit status, stderr) of ``nfeval ARGV`` run in this process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(list(argv))
    return code, err.getvalue()


def test_a_second_train_into_a_run_being_written_is_refused_at_once(tmp_path, small_corpus):
    run = tmp_path / "run"
    with held_elsewhere(run) as pid:
        code, err = run_cli("train", "--out", str(run), *tiny_train_args(small_corpus, max_steps=2))
        assert code == 2 and err.count("\n") == 1, err
        assert f"{run}: in use by another nfeval process (pid {pid} on " in err
        assert sorted(p.name for p in run.iterdir()) == [".lock"]  # nothing written beside the holder
    code, err = run_cli("train", "--out", str(run), *tiny_train_args(small_corpus, max_steps=2))
    assert code == 0, err  # the holder died: its lock with it
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [(r["kind"], r["step"]) for r in rows]
    assert len(steps) == len(set(steps))


def test_a_refused_or_failed_start_leaves_no_folder(tmp_path, small_corpus):
    run = tmp_path / "run"
    code, err = run_cli("train", "--out", str(run), *tiny_train_args(small_corpus, preset="nosuch-tiny"))
    assert code == 2 and "nosuch" in err and not run.exists()


def test_the_holder_enters_its_own_lock_again_and_others_are_refused(tmp_path):
    folder = tmp_path / "point"
    with point_lock(str(folder)) as held:
        assert held
        with folder_lock(str(folder)):  # a sweep point's training run, in the point's own process
            pass
    with held_elsewhere(folder):
        with pytest.raises(OSError, match="in use by another nfeval process"):
            with folder_lock(str(folder)):
                pytest.fail("entered a folder another process holds")


def test_a_rerun_deletes_the_temp_files_a_killed_start_left(tmp_path, small_corpus):
    run = tmp_path / "run"
    code, err = run_cli("train", "--out", str(run), *tiny_train_args(small_corpus, max_steps=2))
    assert code == 0, err
    # a probe killed at the start of a rerun, and safetensors' own temp name killed in a final save
    for name in (".tmp-probe-k3j2", ".tmpAb12Cd"):
        (run / name).write_bytes(b"half")
    code, err = run_cli("train", "--out", str(run), "--resume", *tiny_train_args(small_corpus, max_steps=2))
    assert code == 0, err  # finished: its summary
    assert not list(run.rglob(".tmp*"))


def test_resuming_a_finished_run_with_another_architecture_is_refused(tmp_path, small_corpus):
    run = tmp_path / "run"
    flags = tiny_train_args(small_corpus, max_steps=2, preset="prenorm-tiny")
    assert run_cli("train", "--out", str(run), *flags)[0] == 0
    code, err = run_cli("train", "--out", str(run), "--resume", *flags, "--set", "norm_position=post")
    assert code == 2 and err.count("\n") == 1, err
    assert "cannot change on resume (model:" in err and "norm_position" in err


@pytest.mark.parametrize("command", ["bakeoff", "reproduce"])
def test_a_second_pipeline_into_one_folder_is_refused_at_once(tmp_path, small_corpus, command):
    out = tmp_path / "out"
    argv = [command, "--out", str(out)]
    argv += ["--size", "smoke", "--archs", "prenorm", "normformer"] if command == "bakeoff" else []
    with held_elsewhere(out) as pid:
        code, err = run_cli(*argv)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{out}: in use by another nfeval process (pid {pid} on " in err


def test_a_second_export_into_one_folder_is_refused_and_an_export_leaves_no_lock(tmp_path, tiny_clm_ckpt):
    from nfeval.engine.interop.hf_export import export_hf

    out = tmp_path / "hf"
    with held_elsewhere(tmp_path / ".hf.tmp-export") as pid:
        with pytest.raises(OSError, match=f"in use by another nfeval process \\(pid {pid} on "):
            export_hf(tiny_clm_ckpt, str(out))
    assert not out.exists()
    summary = export_hf(tiny_clm_ckpt, str(out))
    assert ".lock" not in summary["files"] and not (out / ".lock").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_a_finished_run_in_a_folder_this_process_may_not_write_is_still_read(
    tmp_path, small_corpus, monkeypatch
):
    from nfeval.base import sweep_lock

    run = tmp_path / "run"
    flags = tiny_train_args(small_corpus, max_steps=2)
    assert run_cli("train", "--out", str(run), *flags)[0] == 0
    assert not (run / ".lock").exists()  # the lock file goes with the writer
    monkeypatch.setattr(sweep_lock.os, "access", lambda path, mode: False)  # a read-only folder
    code, err = run_cli("train", "--out", str(run), "--resume", *flags)
    assert code == 0, err
    assert not (run / ".lock").exists()
