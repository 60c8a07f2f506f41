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


# --- output locations are checked before any work (issue 22 item 7) ------------------------------------

# Each command with its output flag; the inputs do not exist, so an error about the output proves it was
# checked first.
OUTPUT_COMMANDS = {
    "train": (["train", "--max-steps", "1", "--train-data", "missing.txt"], "--out", "dir"),
    "glue": (["glue", "--ckpt", "missing"], "--out", "dir"),
    "tune": (
        ["tune", "--preset", "prenorm-tiny", "--lrs", "1e-3", "--budget", "steps=1", "--train-data", "x"],
        "--out",
        "dir",
    ),
    "export-hf": (["export-hf", "missing"], "--out", "dir"),
    "demo": (["demo"], "--out", "dir"),
    "reproduce": (["reproduce"], "--out", "dir"),
    "zeroshot": (["zeroshot", "--ckpt", "missing"], "--output", "file.json"),
    "generate": (["generate", "--ckpt", "missing", "--prompt", "x"], "--output", "file.jsonl"),
    "compare": (["compare", "missing"], "--output", "file.json"),
    "compare-scores": (["compare-scores", "a.json", "b.json"], "--output", "file.json"),
    "leaderboard": (["leaderboard", "missing.json"], "--output", "file.md"),
    "analyze": (["analyze", "grads", "--ckpt", "missing"], "--output", "file.png"),
}


def _output_case(tmp_path, monkeypatch, case: str, kind: str) -> tuple[str, str]:
    """Returns (the output path to pass, what the error must say) for one bad-output case."""
    import errno
    import os
    import types

    from nfeval.base import outputs

    a_file, a_dir = tmp_path / "a_file", tmp_path / "a_dir"
    a_file.write_text("x")
    a_dir.mkdir()
    name = "out" if kind == "dir" else kind
    if case == "wrong_kind":
        return (str(a_file), "is a file, expected a folder") if kind == "dir" else (str(a_dir), "is a folder")
    if case == "under_a_file":
        return str(a_file / "sub" / name), f"{a_file} is a file, so nothing can be created under it"
    if case == "read_only":

        def read_only(*_a, **_k):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

        monkeypatch.setattr(outputs.tempfile, "mkstemp", read_only)
        return str(a_dir / name), f"cannot write in {a_dir} (Read-only file system)"
    monkeypatch.setattr(outputs.os, "statvfs", lambda _path: types.SimpleNamespace(f_bavail=0))
    return str(a_dir / name), f"the filesystem of {a_dir} is full"


@pytest.mark.parametrize("case", ["wrong_kind", "under_a_file", "read_only", "full"])
@pytest.mark.parametrize("command", list(OUTPUT_COMMANDS))
def test_bad_output_locations_fail_first_in_one_line(tmp_path, monkeypatch, capsys, command, case):
    from nfeval.cli import main

    monkeypatch.chdir(tmp_path)
    argv, flag, kind = OUTPUT_COMMANDS[command]
    path, message = _output_case(tmp_path, monkeypatch, case, kind)
    assert main([*argv, flag, path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag} {path}: " in err and message in err, err


def test_the_executable_sets_the_libraries_switches_before_they_read_them():
    """tqdm, datasets and the Hub read their bar switches once, at import (``quiet_library_bars``)."""
    import subprocess
    import sys

    libraries = ("tqdm", "datasets", "transformers", "huggingface_hub", "lm_eval")
    code = f"import sys, nfeval.cli; print([m for m in {libraries!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_zeroshot_log_holds_no_carriage_returns(tiny_clm_ckpt, tmp_path):
    """lm-eval's, datasets' and transformers' own bars are off when stderr is a file (issue 22 item 10)."""
    import os
    import subprocess
    import sys

    from test_zeroshot_tasks import DOCS, write_jsonl

    write_jsonl(tmp_path / "data" / "piqa" / "validation.jsonl", DOCS["piqa"])
    argv = [sys.executable, "-m", "nfeval", "zeroshot", "--ckpt", tiny_clm_ckpt, "--tasks", "piqa"]
    argv += ["--data-dir", str(tmp_path / "data"), "--device", "cpu", "--no-cache"]
    argv += ["--output", str(tmp_path / "zs.json")]
    env = {k: v for k, v in os.environ.items() if k not in progress.LIBRARY_BARS_OFF}
    env["OMP_NUM_THREADS"] = "1"
    logs = {}
    for name, extra in (("default", []), ("quiet", ["--no-progress"])):
        with open(tmp_path / f"{name}.txt", "w") as log:
            done = subprocess.run([*argv, *extra], stdout=log, stderr=log, env=env, timeout=300)
        logs[name] = (tmp_path / f"{name}.txt").read_bytes().decode()  # read_text would turn \r into \n
        assert done.returncode == 0, logs[name][-2000:]
    # no carriage returns; and a bar that ends within progress.LOG_INTERVAL_S prints no line at all
    assert "\r" not in logs["default"] and "Scoring loglikelihood requests" not in logs["default"], logs
    assert "piqa_local" in logs["default"]
    assert "it/s" not in logs["quiet"] and "piqa" in logs["quiet"], logs["quiet"]  # the table, no bars


def test_progress_in_a_log_is_at_most_one_line_per_interval_for_all_bars(monkeypatch):
    log = io.StringIO()  # not a terminal
    monkeypatch.setattr(progress.sys, "stderr", log)
    monkeypatch.setattr(progress._Lines, "last", None)
    clock = iter([0.0, 10.0, 29.9, 30.0, 45.0, 61.0])
    monkeypatch.setattr(progress, "_clock", lambda: next(clock))
    first, second = progress._Lines(log), progress._Lines(log)  # two bars' files share the interval
    for i in range(6):
        (first if i % 2 else second).write(f"\rbar {i}")
    assert log.getvalue().splitlines() == ["bar 0", "bar 3", "bar 5"]
    monkeypatch.setattr(progress, "_clock", lambda: 1000.0)
    log.seek(0)
    log.truncate()
    bar = progress.progress_bar(total=3, desc="short")  # ends within the interval: no line at all
    for _ in range(3):
        bar.update(1)
    bar.close()
    assert log.getvalue() == ""
