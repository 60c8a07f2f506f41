"""Denormals flushed to zero in the processes nfeval owns, in every thread or none
(``engine.fast.denormals``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_train_args

from nfeval import cli
from nfeval.engine.fast import denormals

REPO = Path(__file__).resolve().parents[2]
DAZ = torch.set_flush_denormal(False)  # whether this CPU can flush at all (x86 with SSE3's DAZ)
needs_daz = pytest.mark.skipif(not DAZ, reason="this CPU cannot flush denormals (no x86 DAZ)")

# A fresh two-thread process: what flush_in_this_process returns, what flushing() says after it, and how
# many of 2^20 denormals survive a product computed in a chunk per thread.
PROBE = """
import sys, torch
torch.set_num_threads(2)
from nfeval.engine.fast import denormals
if sys.argv[1] == "late":
    torch.randn(1 << 20).mul_(2)  # torch's threads start before the switch
returned = denormals.flush_in_this_process()
tiny = torch.full((1 << 20,), 1 << 20, dtype=torch.int32).view(torch.float32)
survivors, on_main = int((tiny * 1.5).count_nonzero()), int((tiny[:8] * 1.5).count_nonzero())
print(returned, denormals.flushing(), survivors, on_main)
"""


def probe(when: str, **env: str) -> list[str]:
    run_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, when], env=run_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_the_probe_tells_flushing_from_ieee_arithmetic():
    assert not denormals.flushing()  # this test process: IEEE denormals (the conftest guard keeps it so)
    if not DAZ:
        return
    torch.set_flush_denormal(True)  # one thread (conftest): the calling thread is every thread
    try:
        assert denormals.flushing()
    finally:
        torch.set_flush_denormal(False)


@needs_daz
def test_a_fresh_process_flushes_in_every_thread():
    assert probe("fresh") == ["True", "True", "0", "0"]


@needs_daz
def test_nfeval_flush_denormals_0_keeps_ieee_denormals():
    assert probe("fresh", NFEVAL_FLUSH_DENORMALS="0") == ["False", "False", str(1 << 20), "8"]


@needs_daz
def test_threads_started_before_the_switch_turn_it_off_in_every_thread():
    # the main thread alone would flush its chunk and not the other's: rather IEEE everywhere
    returned, flushing, survivors, on_main = probe("late")
    assert (returned, flushing, survivors, on_main) == ("False", "False", str(1 << 20), "8")


@needs_daz
def test_the_nfeval_executable_flushes_and_cli_main_in_another_program_does_not(tmp_path):
    from conftest import make_corpus

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(make_corpus(200), encoding="utf-8")
    args = ["train", *tiny_train_args(str(corpus), max_steps=2)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    own = subprocess.run(
        [sys.executable, "-m", "nfeval", *args, "--out", str(tmp_path / "own")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert own.returncode == 0, own.stderr[-2000:]
    assert cli.main([*args, "--out", str(tmp_path / "library")]) == 0

    def flushed(run: str) -> bool:
        record = json.loads((tmp_path / run / "config.json").read_text(encoding="utf-8"))
        return record["compute"]["hardware"]["cpu_flush_denormals"]

    assert (flushed("own"), flushed("library")) == (True, False)


@pytest.mark.parametrize("own_process", [True, False])
def test_the_executable_flushes_before_every_command_lm_eval_too(tiny_clm_ckpt, monkeypatch, own_process):
    calls = []
    monkeypatch.setattr(denormals, "flush_in_this_process", lambda: calls.append("flush"))
    lm_eval = cli.command_module("lm-eval")
    monkeypatch.setattr(lm_eval, "main", lambda argv: calls.append(("lm-eval", argv)) or 0)
    assert cli.main(["lm-eval", "--tasks", "piqa"], own_process=own_process) == 0
    assert cli.main(["info", tiny_clm_ckpt, "--json"], own_process=own_process) == 0
    flushed = ["flush"] if own_process else []
    assert calls == [*flushed, ("lm-eval", ["--tasks", "piqa"]), *flushed]
