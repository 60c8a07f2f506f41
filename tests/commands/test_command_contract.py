"""One contract for what every command does (issue 51 §2): a device this machine lacks, a mistyped
command, an unreachable Hub, a bad ``--limit`` are one line and exit status 2 before any work; Ctrl-C and
SIGTERM stop a command, its pool workers included, with one line and the shell's status (130, 143); a
results file records the device that ran."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from conftest import ROOT, make_corpus
from test_error_contract import error_of

from nfeval import cli, embedded
from nfeval.base import hub
from nfeval.commands import demo as demo_command
from nfeval.commands import glue as glue_command
from nfeval.commands import zeroshot as zeroshot_command
from nfeval.pipelines import stages

PROBE = hub.reachable  # the real one: conftest's hub_answers replaces it in every test


def device_argv(command: str, where: Path) -> list[str]:
    """Returns a command line of ``command`` that takes ``--device``, its outputs under ``where``."""
    out, ckpt = str(where / "out"), str(where / "run")
    return {
        "train": ["train", "--out", out, "--preset", "prenorm-tiny"],
        "tune": ["tune", "--preset", "prenorm-tiny", "--lrs", "1e-3", "--budget", "steps=2", "--out", out],
        "zeroshot": ["zeroshot", "--ckpt", ckpt, "--output", str(where / "zs.json")],
        "generate": ["generate", "--ckpt", ckpt, "--prompt", "x", "--output", str(where / "gen.jsonl")],
        "glue": ["glue", "--ckpt", ckpt, "--out", out],
        "demo": ["demo", "--out", out],
        "reproduce": ["reproduce", "--out", out],
        "bakeoff": ["bakeoff", "--out", out],
        "analyze": ["analyze", "stability", "--preset", "prenorm-tiny", "--output", str(where / "st.png")],
    }[command]


DEVICE_COMMANDS = ("train", "tune", "zeroshot", "generate", "glue", "demo", "reproduce", "bakeoff", "analyze")


@pytest.mark.parametrize("command", DEVICE_COMMANDS)
def test_a_cuda_device_without_cuda_is_one_line_before_anything_is_written(
    command, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    err = error_of([*device_argv(command, tmp_path), "--device", "cuda"], capsys)
    assert err.startswith(f"nfeval {command}: error: --device cuda: CUDA is not available on this machine")
    assert "use --device cpu" in err
    assert list(tmp_path.iterdir()) == []  # no folder, no lock, no results


def test_a_cuda_device_for_slurm_jobs_is_theirs_to_check(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a login node
    ran = []
    monkeypatch.setattr(glue_command, "run", lambda args: ran.append(args.device))
    assert cli.main([*device_argv("glue", tmp_path), "--device", "cuda", "--launcher", "slurm"]) == 0
    assert ran == ["cuda"]


def test_a_cuda_index_past_the_visible_gpus_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    err = error_of([*device_argv("glue", tmp_path), "--device", "cuda:2"], capsys)
    assert err == "nfeval glue: error: --device cuda:2: this machine has 2 CUDA device(s): cuda:0 to cuda:1"
    assert list(tmp_path.iterdir()) == []


def test_zeroshot_records_the_device_that_scored_and_none_when_all_was_cached(
    tiny_clm_ckpt, tmp_path, monkeypatch
):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "zs.json"
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--data-dir", "embedded", "--tasks", "piqa", "--limit", "4"]
    argv += ["--output", str(out), "--no-progress"]
    assert cli.main(argv) == 0  # --device auto: what ran is the CPU, not "auto"
    results = json.loads(out.read_text())
    assert results["config"]["device"] == results["nfeval"]["device"] == "cpu"
    assert cli.main(argv) == 0  # every answer from the cache: no device ran
    results = json.loads(out.read_text())
    assert results["nfeval"]["cached_tasks"] == ["piqa_local"]
    assert results["config"]["device"] is None and results["nfeval"]["device"] is None


def test_a_mistyped_command_gets_did_you_mean(capsys):
    assert error_of(["zeroshoot", "--ckpt", "run"], capsys) == (
        "nfeval: error: unknown command 'zeroshoot'; did you mean 'zeroshot'?"
    )
    assert "invalid choice: 'xyzzy'" in error_of(["xyzzy"], capsys)  # nothing close: the list


# --------------------------------------------------------------------------------------- --limit


@pytest.mark.parametrize(
    ("command", "module", "function", "limit_of"),
    [
        (["zeroshot", "--ckpt", "run"], zeroshot_command, "evaluate", lambda ckpt, cfg, **_: cfg.limit),
        (
            ["glue", "--ckpt", "run", "--glue-dir", "embedded"],
            glue_command,
            "sweep",
            lambda ckpt, cfg: cfg.limit,
        ),
        (["demo"], demo_command, "run_demo", lambda cfg: cfg.zeroshot_limit),
    ],
)
def test_limit_zero_means_all_in_every_command(
    command, module, function, limit_of, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(module, function, lambda *args, **kwargs: seen.append(limit_of(*args, **kwargs)))
    assert cli.main([*command, "--limit", "0"]) == 0
    assert cli.main([*command, "--limit", "3"]) == 0
    assert seen == [None, 3]  # None: all
    err = error_of([*command, "--limit", "-1"], capsys)
    assert err.endswith("error: argument --limit: expected a count, or 0 for all, got '-1'")


# ------------------------------------------------------------------------------ data and the Hub


def test_the_storycloze_hint_points_to_a_data_dir_of_the_users_not_the_package(
    tiny_clm_ckpt, tmp_path, capsys
):
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--data-dir", "embedded", "--tasks", "storycloze_2016"]
    err = error_of([*argv, "--output", str(tmp_path / "zs.json")], capsys)
    assert "put the CSVs" in err and "in a folder of yours, DIR/storycloze/" in err
    assert err.endswith("then pass --data-dir DIR")
    assert os.path.join(embedded.ZEROSHOT_ROOT, "storycloze") not in err
    assert list(tmp_path.iterdir()) == []
    logged = []  # the demo's (and reproduce's, bakeoff's) data stage says the same
    stages.zeroshot_data(str(tmp_path), embedded.ZEROSHOT_ROOT, cloze_items=4, seed=0, log=logged.append)
    (story,) = [line for line in logged if "storycloze" in line]
    assert "in a folder of yours, DIR/storycloze/" in story and embedded.ZEROSHOT_ROOT not in story


@pytest.fixture
def offline(monkeypatch):
    """The Hub does not answer (no network is touched)."""
    for name in hub.OFFLINE_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hub, "reachable", lambda host, port: False)


def test_zeroshot_from_the_hub_offline_fails_at_once_naming_data_dir_embedded(
    tiny_clm_ckpt, tmp_path, offline, capsys
):
    started = time.monotonic()
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--tasks", "piqa", "--output", str(tmp_path / "zs.json")]
    err = error_of(argv, capsys)
    assert time.monotonic() - started < 10
    assert err.startswith("nfeval zeroshot: error: --tasks piqa_hub: the Hugging Face Hub is unreachable")
    assert "pass --data-dir embedded" in err and "HF_DATASETS_OFFLINE=1" in err
    assert list(tmp_path.iterdir()) == []


def test_glue_from_the_hub_offline_fails_at_once_naming_glue_dir_embedded(
    tiny_mlm_ckpt, tmp_path, offline, capsys
):
    argv = ["glue", "--ckpt", tiny_mlm_ckpt, "--tasks", "rte", "--out", str(tmp_path / "out")]
    err = error_of(argv, capsys)
    assert err.startswith("nfeval glue: error: nyu-mll/glue (rte): the Hugging Face Hub is unreachable")
    assert "--glue-dir embedded" in err
    assert list(tmp_path.iterdir()) == []


def test_the_probe_asks_the_hubs_address_and_gives_up_at_once_when_nothing_answers(monkeypatch):
    with socket.create_server(("127.0.0.1", 0)) as server:  # loopback only: no network
        port = server.getsockname()[1]
        assert PROBE("127.0.0.1", port)
    started = time.monotonic()
    assert not PROBE("127.0.0.1", port)  # closed now: refused
    assert time.monotonic() - started < hub.PROBE_SECONDS
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example:8443")
    for name in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert hub.address() == ("hf-mirror.example", 8443)
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    assert hub.address() == ("proxy.example", 3128)


def test_libraries_switched_offline_read_their_cache_without_a_probe(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(hub, "reachable", lambda host, port: pytest.fail("probed while offline"))
    hub.check_reachable("task piqa_hub", "pass --data-dir embedded")


# ------------------------------------------------------------------------------ Ctrl-C, SIGTERM


@pytest.mark.parametrize(
    ("command", "hint"),
    [
        ("demo", "; run the same command again to resume"),
        ("glue", "; run the same command again to resume"),
        ("train", "; run the same command with --resume to continue from its last checkpoint"),
        ("generate", ""),
    ],
)
def test_ctrl_c_is_one_line_and_status_130(command, hint, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.command_module(command), "run", interrupted)
    assert cli.main(device_argv(command, tmp_path)) == 130
    assert capsys.readouterr().err == f"nfeval {command}: interrupted{hint}\n"


def pool_command(name: str, where: Path, tiny_mlm_ckpt: str) -> list[str]:
    """Returns a long two-worker ``nfeval`` command line on tiny data written under ``where``."""
    if name == "tune":
        corpus = where / "train.txt"
        corpus.write_text(make_corpus(300), encoding="utf-8")
        argv = ["tune", "--preset", "prenorm-tiny", "--lrs", "1e-3,2e-3,3e-3", "--budget", "steps=100000"]
        argv += ["--train-data", str(corpus), "--vocab-size", "300", "--batch-size", "2", "--seq-len", "32"]
        return [*argv, "--eval-samples", "8", "--peak-flops", "1e12"]
    argv = ["glue", "--ckpt", tiny_mlm_ckpt, "--glue-dir", "embedded", "--tasks", "stsb"]
    return [*argv, "--lrs", "1e-4,2e-4,3e-4", "--epochs", "1000"]


@pytest.mark.parametrize(
    ("command", "stop", "status", "how"),
    [
        ("tune", "ctrl-c", 130, "interrupted"),  # a terminal sends SIGINT to the whole process group
        ("glue", "sigterm", 143, "terminated"),  # a scheduler sends SIGTERM to the command only
    ],
)
def test_a_stopped_pool_command_is_one_line_and_leaves_no_worker(
    command, stop, status, how, tmp_path, tiny_mlm_ckpt
):
    out = tmp_path / "out"
    argv = [
        *pool_command(command, tmp_path, tiny_mlm_ckpt),
        "--jobs",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": ROOT, "NFEVAL_CACHE": str(tmp_path / "cache")}
    child = subprocess.Popen(
        [sys.executable, "-m", "nfeval", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        # as from a terminal, whatever this test process ignores
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while len([p for p in out.rglob(".lock") if p.parent != out]) < 2:  # both workers hold a point
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.2)
        workers = psutil.Process(child.pid).children(recursive=True)
        spawned = [w for w in workers if "spawn_main" in " ".join(w.cmdline())]
        if stop == "ctrl-c":
            os.killpg(child.pid, signal.SIGINT)
        else:
            child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == status, err
    lines = err.strip().splitlines()
    assert lines[-1] == f"nfeval {command}: {how}; run the same command again to resume", err
    assert all(line.startswith("nfeval train: ") for line in lines[:-1]), err  # the points' own logs
    assert len(spawned) == 2
    deadline = time.monotonic() + 10
    while any(running(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if running(w)]  # no orphan keeps training


def running(process: psutil.Process) -> bool:
    """Returns whether ``process`` still runs (a zombie has ended: its new parent may be slow to reap it)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
