"""Every environment variable nfeval reads is parsed strictly: a documented value, or one line naming the
variable and exit status 2 before any work (``nfeval.base.env``)."""

from __future__ import annotations

import pytest

from nfeval.base import env
from nfeval.base.errors import ConfigError
from nfeval.cli import main
from nfeval.engine.fast import denormals
from nfeval.engine.training import parallel


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("NFEVAL_FLUSH_DENORMALS", "false", "0, 1"),
        ("NFEVAL_FLUSH_DENORMALS", "garbage", "0, 1"),
        ("NFEVAL_TRACEBACK", "yes", "0, 1"),
        ("NFEVAL_CPU_LINEAR", "bogus", "auto, onednn, torch"),
    ],
)
def test_a_switch_with_an_undocumented_value_is_one_line_before_any_work(
    monkeypatch, capsys, tmp_path, name, value, accepted
):
    monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--max-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err == f"nfeval train: error: {name}={value!r}: expected one of {accepted}\n"
    assert not out.exists()


def test_flushing_is_off_only_for_0_and_refused_for_other_words(monkeypatch):
    monkeypatch.setenv(denormals.ENV, "false")
    with pytest.raises(ConfigError, match="NFEVAL_FLUSH_DENORMALS='false'"):
        denormals.flush_in_this_process()
    for value, on in (("0", False), ("1", True), ("", True), (" 1 ", True)):
        monkeypatch.setenv(denormals.ENV, value)
        assert env.enabled(env.FLUSH_DENORMALS) is on


@pytest.mark.parametrize("value", ["one", "-1", "1.0"])
def test_a_launcher_rank_that_is_not_a_count_is_named(monkeypatch, value):
    monkeypatch.setenv("RANK", value)
    with pytest.raises(ConfigError, match=f"RANK={value!r}: expected a non-negative integer"):
        parallel.launched_rank()
    monkeypatch.setenv("RANK", "3")
    assert parallel.launched_rank() == 3


@pytest.mark.parametrize(("command", "library"), [("reproduce", "run_reproduce"), ("bakeoff", "run_bakeoff")])
def test_reproduce_and_bakeoff_set_the_scales_torch_threads_at_the_command(
    monkeypatch, tmp_path, command, library
):
    import torch

    from nfeval.cli import command_module

    seen = []
    module = command_module(command)
    monkeypatch.setattr(
        module, library, lambda cfg: seen.append(torch.get_num_threads()) or {"path": "r", "report": "r"}
    )
    torch.set_num_threads(2)  # the one_thread fixture puts this process's back
    assert main([command, "--out", str(tmp_path / "out")]) == 0
    assert seen == [1]  # tiny's threads, set at the command's entry
