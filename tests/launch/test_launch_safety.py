"""The Slurm path never unpickles a file of the folder (a job's outcome is JSON at a path named by a
random token), sbatch's refusal is one line, one process submits from a folder at a time, and a crafted
job record is one line."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import test_launcher
from launch_points import counting_point
from test_launcher import local_jobs, slurm_options

from nfeval.cli import main
from nfeval.launch import cluster, records
from nfeval.launch.jobs import LaunchPoint

ROOT = str(Path(__file__).resolve().parents[2])
fake_slurm, job_env = test_launcher.fake_slurm, test_launcher.job_env  # the launcher tests' fixtures


class Planted:
    """A pickle that runs code when loaded: it creates the folder ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_result_pickle_planted_under_the_next_job_id_is_never_unpickled(tmp_path, fake_slurm, capsys):
    job_id = (fake_slurm / "next_id").read_text().strip()  # what the stand-in sbatch answers next
    files = Path(records.job_files(str(tmp_path)))
    files.mkdir()
    marker = tmp_path / "code-ran"
    (files / f"{job_id}_0_result.pkl").write_bytes(pickle.dumps(Planted(str(marker))))
    (fake_slurm / "sacct.txt").write_text(f"JobID|State|NodeList\n{job_id}|FAILED|node1\n")
    directory = str(tmp_path / "p")
    point = LaunchPoint("p", counting_point, (directory, 2, None), directory)
    options = dataclasses.replace(slurm_options(), poll_s=0.1)
    assert cluster.run_points([point], str(tmp_path), options, "tune", progress=False) == []
    assert not marker.exists()
    assert f"p: job {job_id} ended without finishing; log" in capsys.readouterr().err


def test_a_job_s_result_comes_from_its_json_outcome(tmp_path, job_env):
    directory = str(tmp_path / "p")
    point = LaunchPoint("p", counting_point, (directory, 2, None), directory)
    assert cluster.run_points([point], str(tmp_path), local_jobs(), "count", progress=False) == [
        {"directory": directory, "steps": 2}
    ]
    entry = json.loads((tmp_path / records.RECORD).read_text())["jobs"]["p"]
    outcome = json.loads(Path(records.outcome_path(str(tmp_path), entry["outcome"])).read_text())
    assert outcome == {"status": "finished", "result": {"directory": directory, "steps": 2}}


def test_sbatch_refusing_the_job_is_one_line_with_its_own_message(tmp_path, fake_slurm, capsys):
    sbatch = tmp_path / "bin" / "sbatch"
    sbatch.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: gpux' >&2\nexit 1\n")
    out = tmp_path / "run"
    flags = ["--launcher", "slurm", "--slurm-partition", "gpux"]
    assert main(["train", "--out", str(out), "--max-steps", "2", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sbatch: error: invalid partition specified: gpux" in err, err
    assert not (out / records.RECORD).exists()


def test_a_second_process_submitting_from_one_folder_is_refused(tmp_path, fake_slurm, capsys):
    hold = (
        "import sys, time; from nfeval.base.sweep_lock import folder_lock\n"
        "with folder_lock(sys.argv[1]): print('held', flush=True); time.sleep(120)"
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    slurm = records.job_files(str(tmp_path / "run"))
    holder = subprocess.Popen([sys.executable, "-c", hold, slurm], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        flags = ["--launcher", "slurm", "--slurm-partition", "gpu", "--no-wait"]
        assert main(["train", "--out", str(tmp_path / "run"), "--max-steps", "2", *flags]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert f"{slurm}: in use by another nfeval process (pid {holder.pid} on " in err
    assert not list(fake_slurm.glob("sbatch_*.sh"))


def test_a_crafted_job_record_is_one_line(tmp_path, fake_slurm, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / records.RECORD).write_text(json.dumps({"jobs": {"run": {"job_id": 7}}}))
    flags = ["--launcher", "slurm", "--slurm-partition", "gpu", "--no-wait"]
    assert main(["train", "--out", str(out), "--max-steps", "2", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / records.RECORD}: key 'jobs'" in err, err
