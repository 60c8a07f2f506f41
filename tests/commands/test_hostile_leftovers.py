"""What round four of hostile input left (issue 55, "Reliability round four"): a full disk between an
analysis' (or a comparison's) JSON and its PNG, two writers of one such pair, a read-only home, a
fairseq file with non-finite weights or a head count that does not divide its width, and a non-finite
``--lrs``. Each case runs the command as a user runs it, as the fault happens: one line naming the file
(or flag) and what was expected, exit status 2, nothing half-written, and the rerun completes."""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, held_elsewhere
from matplotlib.figure import Figure
from test_compare import make_run
from test_hostile_round_four import _fairseq_file, nfeval, refused
from test_leaderboard import FULL, zeroshot_file

from nfeval.base import home


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _gains_checkpoint(tmp_path) -> str:
    from nfeval.engine.checkpoints import checkpoint
    from nfeval.engine.model.config import preset
    from nfeval.engine.model.model import Transformer

    torch.manual_seed(0)
    checkpoint.save(
        str(tmp_path / "nf"), Transformer(preset("normformer-tiny", vocab_size=64, max_seq_len=16))
    )
    return str(tmp_path / "nf")


def _runs(tmp_path) -> list[str]:
    base = make_run(tmp_path, "base", [(10, 100, 40.0), (20, 200, 30.0)])
    return [base, make_run(tmp_path, "cand", [(10, 100, 35.0), (20, 200, 28.0)])]


def _pair_command(tmp_path, command: str) -> tuple[list[str], Path, Path]:
    """Returns (argv, its JSON, its PNG) of an ``analyze gains`` or a ``compare --output --plot``."""
    out = tmp_path / "out"
    if command == "analyze":
        ckpt = _gains_checkpoint(tmp_path)
        return ["analyze", "gains", ckpt, "--output", str(out / "g.png")], out / "g.json", out / "g.png"
    argv = ["compare", *_runs(tmp_path), "--output", str(out / "c.json"), "--plot", str(out / "c.png")]
    return argv, out / "c.json", out / "c.png"


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ---------------------------------------------------------------- a full disk between the JSON and the PNG


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_a_full_disk_while_the_png_is_saved_lands_neither_file(tmp_path, monkeypatch, command):
    """The JSON was renamed into place before the PNG was drawn: a disk that filled while the PNG was
    saved left the JSON of one run beside no PNG, or beside the PNG of the run before. Both are now written
    to temp files first and renamed only when both are written."""
    argv, json_file, png = _pair_command(tmp_path, command)
    with monkeypatch.context() as m:
        m.setattr(Figure, "savefig", _disk_full)
        assert f"{png}: cannot write (No space left on device)" in refused(*argv)
    assert _left(json_file.parent) == []  # no JSON, no temp file, no lock file
    assert nfeval(*argv)[0] == 0  # the disk has room again
    assert _left(json_file.parent) == sorted([json_file.name, png.name])
    before = {p: p.read_bytes() for p in (json_file, png)}
    with monkeypatch.context() as m:  # over an older pair, the older pair stays as it was
        m.setattr(Figure, "savefig", _disk_full)
        refused(*argv)
    assert {p: p.read_bytes() for p in (json_file, png)} == before
    assert _left(json_file.parent) == sorted([json_file.name, png.name])


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_a_png_that_cannot_be_renamed_takes_its_json_back(tmp_path, monkeypatch, command):
    """The JSON lands first and the PNG last (a finished analysis has its PNG: reproduce reads it so);
    a PNG whose rename fails takes the JSON just renamed with it, so the PNG never misses its JSON."""
    argv, json_file, png = _pair_command(tmp_path, command)
    replace = os.replace

    def full_for_png(src, dst):
        if str(dst) == str(png):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", full_for_png)
    assert f"{png}: cannot write (No space left on device)" in refused(*argv)
    assert _left(json_file.parent) == []


# ---------------------------------------------------------------- two writers of one pair


@pytest.mark.parametrize("held", ["json", "png"])
def test_a_second_compare_writing_one_output_is_refused_at_once(tmp_path, held):
    argv, json_file, png = _pair_command(tmp_path, "compare")
    path = json_file if held == "json" else png
    with held_elsewhere(path, "file_lock") as pid:
        error = refused(*argv)
        assert f"{path}: being written by another nfeval process (pid {pid} on " in error
        assert not json_file.exists() and not png.exists()
    assert nfeval(*argv)[0] == 0  # the holder died
    assert _left(json_file.parent) == ["c.json", "c.png"]  # no lock file left


def test_an_analysis_and_a_compare_writing_one_json_are_refused_at_once(tmp_path):
    """``analyze --output g.png`` writes g.json beside it: a ``compare --output g.json`` writing it holds
    the same lock, so the JSON beside a PNG is the analysis' own."""
    argv, json_file, png = _pair_command(tmp_path, "analyze")
    with held_elsewhere(json_file, "file_lock") as pid:
        assert f"{json_file}: being written by another nfeval process (pid {pid} on " in refused(*argv)
        assert not png.exists()


# ---------------------------------------------------------------- a read-only home


def _unwritable_home_env(tmp_path) -> dict[str, str]:
    """The environment of a process whose home cannot be written (a path under a file: even root cannot
    make a folder there), every variable that moves a library's folder out of it unset."""
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "tmp").mkdir()
    moved = ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HOME", "HF_MODULES_CACHE")
    env = {k: v for k, v in os.environ.items() if k not in moved}
    env |= {"HOME": str(tmp_path / "afile" / "home"), "TMPDIR": str(tmp_path / "tmp")}
    return env | {"PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "nfeval.cli", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_leaderboard_with_a_read_only_home_says_nothing_of_matplotlibs_folders(tmp_path):
    """matplotlib warned twice ("mkdir -p failed ...", "Matplotlib created a temporary cache directory
    ...") on every page with figures; it now gets a temp folder of nfeval's, removed at the end."""
    results = zeroshot_file(tmp_path / "a.json", "a" * 64, "nf", 124_000_000, FULL)
    page = tmp_path / "board" / "b.md"
    done = _run(_unwritable_home_env(tmp_path), "leaderboard", results, "--output", str(page))
    assert done.returncode == 0 and done.stderr.strip() == f"wrote {page}", done.stderr[-3000:]
    assert (tmp_path / "board" / "b_zeroshot.png").stat().st_size > 0
    assert os.listdir(tmp_path / "tmp") == []  # the temp folder went with the process


def test_matplotlib_keeps_its_own_folders_when_the_home_is_writable(tmp_path, monkeypatch):
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "MPLCONFIGDIR"):
        monkeypatch.setenv(name, "")  # unset, restored after the test
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # not made yet: matplotlib can make it
    assert home.matplotlib_dirs_elsewhere() is None and not os.environ["MPLCONFIGDIR"]
    assert not (tmp_path / "home").exists()  # nothing made by asking
    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.setenv("HOME", str(tmp_path / "afile" / "home"))
    folder = home.matplotlib_dirs_elsewhere()
    assert folder and os.environ["MPLCONFIGDIR"] == folder and os.path.isdir(folder)
    os.rmdir(folder)


def test_export_hf_with_a_read_only_home_names_hf_home(tmp_path, tiny_clm_ckpt):
    """transformers copies an export's remote code into its module cache (under ~/.cache) to load it back;
    the refusal named ~/.cache alone, not the variable that moves it."""
    out = tmp_path / "hf"
    done = _run(_unwritable_home_env(tmp_path), "export-hf", tiny_clm_ckpt, "--out", str(out))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    modules = tmp_path / "afile" / "home" / ".cache" / "huggingface" / "modules"
    assert f"{modules}: cannot write (Not a directory)" in lines[0] and "set HF_HOME" in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["afile", "tmp"]  # no export, no temp export folder


# ---------------------------------------------------------------- fairseq files nfeval cannot compute


def _nan(name: str):
    def change(ckpt):
        ckpt["model"][name] = ckpt["model"][name].clone()
        ckpt["model"][name].view(-1)[3] = float("nan")
        if name == "decoder.embed_tokens.weight":  # still tied: the head is the same tensor
            ckpt["model"]["decoder.output_projection.weight"] = ckpt["model"][name].clone()

    return change


@pytest.mark.parametrize("name", ["decoder.embed_tokens.weight", "decoder.layers.1.fc2.weight"])
def test_a_fairseq_file_with_non_finite_weights_names_the_tensor(tmp_path, tiny_tokenizer, name):
    """NaN embeddings were refused as 'not tied to the embeddings' (NaN is not equal to itself)."""
    path = _fairseq_file(tmp_path / "nan.pt", tiny_tokenizer, _nan(name))
    error = refused("info", path)
    assert f"{path}: tensor {name!r} holds non-finite weights (NaN or inf); expected finite values" in error
    assert "tied" not in error


def _five_heads(ckpt):
    ckpt["cfg"]["model"]["decoder_attention_heads"] = 5


def _five_heads_in_args(ckpt):
    ckpt["args"] = argparse.Namespace(**{**ckpt.pop("cfg")["model"], "decoder_attention_heads": 5})


WIDTH = "expected a positive number of heads that divides the embedding width 64"


@pytest.mark.parametrize(
    "change, expected",
    [
        (_five_heads, f"cfg['model'].decoder_attention_heads=5; {WIDTH}"),
        (_five_heads_in_args, f"args.decoder_attention_heads=5; {WIDTH}"),
        (
            lambda c: c["cfg"]["model"].update(decoder_attention_heads=0),
            f"cfg['model'].decoder_attention_heads=0; {WIDTH}",
        ),
    ],
)
def test_a_fairseq_head_count_that_does_not_divide_the_width_names_the_file_and_field(
    tmp_path, tiny_tokenizer, change, expected
):
    """It was 'ModelConfig: d_model=64 is not divisible by n_head=5', naming neither the file nor where
    the count came from."""
    path = _fairseq_file(tmp_path / "heads.pt", tiny_tokenizer, change)
    error = refused("info", path)
    assert f"{path}: {expected}" in error and "ModelConfig" not in error


# ---------------------------------------------------------------- --lrs


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "0", "-1e-3"])
@pytest.mark.parametrize(
    "argv",
    [
        ["tune", "--preset", "prenorm-tiny"],
        ["glue", "--ckpt", "x"],
        ["bakeoff", "--size", "smoke"],
        ["reproduce", "--scale", "smoke"],
    ],
)
def test_a_non_finite_or_non_positive_learning_rate_is_an_argparse_error(tmp_path, argv, value):
    error = refused(*argv, f"--lrs=1e-3,{value}", "--out", str(tmp_path / "o"))
    assert f"nfeval {argv[0]}: error: argument --lrs: --lrs '1e-3,{value}': " in error
    assert "expected finite positive learning rates" in error
    assert not (tmp_path / "o").exists()
