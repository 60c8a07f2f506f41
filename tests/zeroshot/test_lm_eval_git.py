"""lm-eval's git-hash lookup stays quiet outside a repository within nfeval's calls."""

from __future__ import annotations

import shutil
import subprocess

import lm_eval.evaluator
import pytest

from nfeval.zeroshot.lm_eval_git import quiet_git_hash

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="the noise comes from the git program")


@needs_git
def test_no_fatal_git_message_outside_a_repository(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # tmp_path is in no repository
    original = lm_eval.evaluator.get_git_commit_hash
    assert original() is None
    assert "not a git repository" in capfd.readouterr().err  # lm-eval's own lookup is noisy here
    with quiet_git_hash():
        assert lm_eval.evaluator.get_git_commit_hash() is None
    assert capfd.readouterr().err == ""
    assert lm_eval.evaluator.get_git_commit_hash is original  # restored after the block


@needs_git
def test_quiet_lookup_still_finds_the_repository(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    with quiet_git_hash():
        quiet = lm_eval.evaluator.get_git_commit_hash()
    assert quiet and quiet == lm_eval.evaluator.get_git_commit_hash()
