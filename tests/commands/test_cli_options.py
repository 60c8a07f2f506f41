"""One rule for the commands' shared options: dtype spellings, output flags, progress in logs."""

import io

import pytest

from nfeval.base import progress
from nfeval.cli import build_parser


def parse(argv: list[str]):
    return build_parser(argv[0]).parse_args(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--out", "run"],
        ["zeroshot", "--ckpt", "run"],
        ["generate", "--ckpt", "run", "--prompt", "x"],
        ["glue", "--ckpt", "run"],
    ],
)
@pytest.mark.parametrize(("given", "short"), [("bf16", "bf16"), ("bfloat16", "bf16"), ("float32", "fp32")])
def test_every_command_takes_both_dtype_spellings(argv, given, short):
    assert parse([*argv, "--dtype", given]).dtype == short


def test_a_dtype_a_command_does_not_support_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        parse(["train", "--out", "run", "--dtype", "fp16"])
    assert e.value.code == 2 and "fp32/float32, bf16/bfloat16" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["leaderboard", "r.json"],
        ["compare", "run"],
        ["compare-scores", "a.json", "b.json"],
        ["analyze", "grads"],
    ],
)
def test_file_outputs_are_output_and_the_old_out_still_works(argv, capsys):
    assert parse([*argv, "--output", "x.json"]).output == "x.json"
    assert parse([*argv, "--out", "x.json"]).output == "x.json"  # the old spelling, hidden
    with pytest.raises(SystemExit):
        parse([*argv, "--help"])
    usage = capsys.readouterr().out
    assert "--output" in usage and "--out " not in usage


def test_progress_in_a_log_prints_plain_lines_not_carriage_returns(monkeypatch):
    log = io.StringIO()  # not a terminal
    monkeypatch.setattr(progress.sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)
    bar = progress.progress_bar(total=3, desc="work", leave=False)
    for _ in range(3):
        bar.update(1)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert "work" in text and "3/3" in text and all(line.strip() for line in text.splitlines())


def test_disabled_progress_prints_nothing(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", log)
    for _ in progress.progress_bar(range(3), enabled=False):
        pass
    assert log.getvalue() == ""
