"""The error contract at the command line: a bad flag or value is one line, ``nfeval CMD: error: …``, exit
status 2, before any work, naming the flag and what was expected."""

from __future__ import annotations

import pytest

from nfeval import cli
from nfeval.base.errors import ConfigError
from nfeval.zeroshot import task_names
from nfeval.zeroshot.config import ZeroShotConfig


def error_of(argv: list[str], capsys) -> str:
    """Returns the stderr of ``nfeval argv``, checked to be one line and exit status 2."""
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's errors leave through parser.exit
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["zeroshot", "--ckpt", "run", "--device", "gpu"],
            "nfeval zeroshot: error: argument --device: expected auto, cpu, cuda or cuda:N, got 'gpu'",
        ),
        (
            ["zeroshot", "--ckpt", "run", "--batch-size", "1O"],
            "nfeval zeroshot: error: argument --batch-size: expected a positive integer or auto, got '1O'",
        ),
        (
            ["glue", "--ckpt", "run", "--jobs", "0"],
            "nfeval glue: error: argument --jobs: expected a positive integer, got '0'",
        ),
        (
            ["generate", "--ckpt", "run", "--prompt", "x", "--batch-size", "many"],
            "nfeval generate: error: argument --batch-size: expected a positive integer, got 'many'",
        ),
        (["nfeval-typo"], "nfeval: error: argument COMMAND: invalid choice: 'nfeval-typo'"),
    ],
)
def test_a_bad_flag_value_is_one_line_naming_the_flag_and_what_was_expected(argv, expected, capsys):
    assert error_of(argv, capsys).startswith(expected)


def test_names_swallowing_the_results_files_is_refused(tmp_path, capsys):
    r1, r2 = tmp_path / "r1.json", tmp_path / "r2.json"
    r1.write_text("{}")
    r2.write_text("{}")
    err = error_of(["leaderboard", "--names", "a", "b", str(r1), str(r2)], capsys)
    assert err.startswith(f"nfeval leaderboard: error: --names: '{r1}' is a results file, not a row name")
    assert "put it after the results files" in err


def test_a_mistyped_task_is_refused_before_the_model_loads_with_a_suggestion(tmp_path, capsys):
    err = error_of(["zeroshot", "--ckpt", str(tmp_path / "no-such-run"), "--tasks", "hellaswg"], capsys)
    assert err.startswith(
        "nfeval zeroshot: error: --tasks: unknown task 'hellaswg'; did you mean 'hellaswag'?"
    )
    with pytest.raises(ConfigError, match="'piqa_local'"):
        ZeroShotConfig(tasks=["piqa_locl"]).checked()


def test_lm_eval_tasks_near_ours_are_not_refused_early():
    task_names.check(["hellaswag", "piqa_local", "corpus_cloze", "pisa", "winogender", "xwinograd"])
    error = task_names.unknown_task("hellaswag_de", ["hellaswag", "hellaswag_ar", "piqa"])
    assert "did you mean 'hellaswag' or 'hellaswag_ar'?" in str(error)
