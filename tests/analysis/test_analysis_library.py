"""The analyses as library calls (``analysis.runs``): the options a pipeline builds give what the command
gives, and the pipelines' helper leaves a finished analysis (its PNG) alone."""

from __future__ import annotations

import json

import pytest
from conftest import make_text

from nfeval.analysis import runs
from nfeval.analysis.stability import StabilitySettings
from nfeval.base.errors import ConfigError
from nfeval.cli import main
from nfeval.pipelines.analyses import analyze


def without_provenance(path) -> dict:
    result = json.loads(path.read_text())
    result.pop("provenance")
    return result


def test_the_library_writes_what_the_command_writes_and_a_finished_one_is_not_redone(tmp_path, monkeypatch):
    data = tmp_path / "corpus.txt"
    data.write_text("\n\n".join(make_text(300)))
    argv = ["analyze", "stability", "--data", str(data), "--preset", "prenorm-tiny", "--seeds", "1"]
    argv += ["--updates", "2", "--batch-size", "2", "--seq-len", "16", "--set", "qk_norm=true"]
    assert main([*argv, "--output", str(tmp_path / "command.png")]) == 0
    settings = StabilitySettings(updates=2, batch_size=2, seq_len=16)
    options = runs.StabilityOptions(
        presets=["prenorm-tiny"], seeds=1, model={"qk_norm": True}, settings=settings, data=str(data)
    )
    result = analyze(options, str(tmp_path / "library.png"), print)
    assert (tmp_path / "library.png").is_file() and settings.seq_len == 16  # the caller's left as it was
    assert without_provenance(tmp_path / "library.json") == without_provenance(tmp_path / "command.json")

    def forbidden(*args, **kwargs):
        raise AssertionError("a finished analysis ran again")

    monkeypatch.setattr(runs, "analyze", forbidden)
    assert analyze(options, str(tmp_path / "library.png"), print) == json.loads(json.dumps(result))


def test_bad_library_options_name_the_field():
    with pytest.raises(ConfigError, match=r"--set: qk_norm='yes': expected true or false"):
        runs.stability(runs.StabilityOptions(presets=["prenorm-tiny"], model={"qk_norm": "yes"}))
    with pytest.raises(ConfigError, match="give RUN dirs"):
        runs.grads(runs.GradsOptions())
