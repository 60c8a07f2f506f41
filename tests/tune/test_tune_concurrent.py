"""Two ``nfeval tune`` processes into one ``--out`` train each point once (issue 22 item 4): points are
claimed with the lock GLUE's sweep uses (``nfeval.base.sweep_lock``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_tune import corpus  # noqa: F401  (a fixture)

LRS = ["1e-3", "2e-3", "3e-3"]


@pytest.mark.timeout(300)
def test_two_tunes_into_one_out_train_each_point_once(corpus, tmp_path):  # noqa: F811
    out = tmp_path / "tune"
    argv = [sys.executable, "-m", "nfeval", "tune", "--preset", "prenorm-tiny", "--lrs", ",".join(LRS)]
    argv += ["--budget", "steps=3", "--train-data", corpus, "--vocab-size", "300", "--batch-size", "2"]
    argv += ["--seq-len", "32", "--eval-samples", "8", "--peak-flops", "1e12", "--no-progress"]
    argv += ["--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in "ab"]
    for p in procs:
        _, err = p.communicate(timeout=280)
        assert p.returncode == 0, err.decode()
    for lr in LRS:
        log = (out / "points" / "prenorm-tiny" / f"lr={float(lr)!r}" / "seed=1" / "train.log").read_text()
        assert log.count("| val loss") == 1, (lr, log)  # one final validation: trained once
    summary = json.loads((out / "tune.json").read_text())
    assert summary["missing"] == [] and [p["status"] for p in summary["points"]] == ["ok"] * 3
