"""--launcher slurm: job arrays through submitit, requeue and resume, reruns that submit only what is
missing; driven without a cluster by submitit's local executor (the same job pickles, real
subprocesses) and by stand-in sbatch/srun/sacct scripts that record what they were given."""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import pytest
from conftest import make_corpus, tiny_train_args, tiny_train_config
from launch_points import counting_point, failing_point
from test_glue import write_cat_tasks

from nfeval.cli import build_parser, main
from nfeval.commands import train as train_command
from nfeval.glue import sweep as glue
from nfeval.glue.config import GlueConfig
from nfeval.launch import cluster, records
from nfeval.launch.jobs import LaunchPoint
from nfeval.launch.options import LaunchOptions, add_launcher_arguments, launch_options, parse_minutes
from nfeval.pipelines.reproduce import run_specs
from nfeval.pipelines.scales import SCALES
from nfeval.tune.sweep import tune

HERE = Path(__file__).resolve().parent


@pytest.fixture
def job_env(monkeypatch):
    """Job subprocesses import launch_points (the points) and use one thread, like the tests."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def local_jobs(**changes) -> LaunchOptions:
    """Returns options that run the Slurm path's job files through submitit's local executor."""
    return LaunchOptions(launcher="slurm", executor="local", time_min=5, poll_s=0.2, **changes)


def test_a_preempted_job_is_requeued_and_resumes_its_point(tmp_path, job_env):
    points = [
        LaunchPoint(f"p{i}", counting_point, (str(tmp_path / f"p{i}"), 4, at), str(tmp_path / f"p{i}"))
        for i, at in enumerate([2, None])
    ]
    results = cluster.run_points(points, str(tmp_path), local_jobs(), "count")
    assert sorted(r["directory"] for r in results) == [p.directory for p in points]
    for p, attempts in zip(points, (2, 1)):
        assert (Path(p.directory) / "progress.txt").read_text().split() == ["0", "1", "2", "3"]
        assert len((Path(p.directory) / "attempts.txt").read_text().split()) == attempts
    record = json.loads((tmp_path / records.RECORD).read_text())
    assert set(record["jobs"]) == {"p0", "p1"} and all(
        e["executor"] == "local" for e in record["jobs"].values()
    )


def test_no_wait_returns_at_once_and_a_rerun_leaves_running_jobs_alone(tmp_path, job_env, capsys):
    directory = str(tmp_path / "p")
    point = LaunchPoint("p", counting_point, (directory, 3, None), directory)
    assert cluster.run_points([point], str(tmp_path), local_jobs(wait=False), "count") is None
    job_id = json.loads((tmp_path / records.RECORD).read_text())["jobs"]["p"]["job_id"]
    assert f"{job_id}  p" in capsys.readouterr().out
    assert cluster.run_points([point], str(tmp_path), local_jobs(wait=False), "count") is None
    assert f"job {job_id} is RUNNING, not resubmitted" in capsys.readouterr().out
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(directory, "done.json")) and time.time() < deadline:
        time.sleep(0.2)
    assert json.loads((tmp_path / records.RECORD).read_text())["jobs"]["p"]["job_id"] == job_id
    assert len(Path(directory, "attempts.txt").read_text().split()) == 1


def test_a_failed_job_is_one_line_with_its_log_and_the_others_finish(tmp_path, job_env, capsys):
    good, bad = str(tmp_path / "good"), str(tmp_path / "bad")
    points = [LaunchPoint("good", counting_point, (good, 1, None), good)]
    points.append(LaunchPoint("bad", failing_point, (bad,), bad))
    results = cluster.run_points(points, str(tmp_path), local_jobs(), "count", progress=False)
    assert [r["directory"] for r in results] == [good]
    [line] = [x for x in capsys.readouterr().err.splitlines() if "bad:" in x]
    assert "failed: ValueError:" in line and "this point cannot be computed" in line and ".err" in line


def test_a_tune_sweep_as_jobs_gives_the_in_process_results(tmp_path, job_env, capsys):
    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(600), encoding="utf-8")
    base = tiny_train_config(str(corpus), eval_samples=8)
    grid = (["normformer-tiny"], [1e-3, 1e-2], "steps=3")
    here = tune(base, *grid, str(tmp_path / "here"), progress=False)
    there = tune(base, *grid, str(tmp_path / "jobs"), progress=False, launch=local_jobs())
    assert [(p["lr"], p["step"], p["val_loss"]) for p in there["points"]] == [
        (p["lr"], p["step"], p["val_loss"]) for p in here["points"]
    ]
    record = (tmp_path / "jobs" / records.RECORD).read_text()
    assert sorted(json.loads(record)["jobs"]) == [
        "normformer-tiny/lr=0.001/seed=1",
        "normformer-tiny/lr=0.01/seed=1",
    ]
    capsys.readouterr()
    again = tune(base, *grid, str(tmp_path / "jobs"), progress=False, launch=local_jobs())
    out = capsys.readouterr().out
    assert "2 finished, 0 to run" in out and "submitted" not in out and again["points"] == there["points"]
    assert (tmp_path / "jobs" / records.RECORD).read_text() == record


def test_a_glue_sweep_as_jobs_gives_the_in_process_results(tmp_path, job_env, tiny_mlm_ckpt, capsys):
    glue_dir = write_cat_tasks(tmp_path / "glue", n_train=48, n_dev=24)
    recipe = glue.Recipe(epochs=1, batch_size=16, dtype="fp32")
    kw = dict(lrs=[1e-3, 3e-3], glue_dir=glue_dir, recipe=recipe, device="cpu", progress=False)
    here = glue.sweep(tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], out_dir=str(tmp_path / "here"), **kw))
    jobs = glue.sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], out_dir=str(tmp_path / "jobs"), launch=local_jobs(), **kw)
    )
    assert jobs["tasks"]["sst2"]["per_lr"] == here["tasks"]["sst2"]["per_lr"]
    names = sorted(json.loads((tmp_path / "jobs" / records.RECORD).read_text())["jobs"])
    assert names == ["sst2/lr=0.001/seed=0", "sst2/lr=0.003/seed=0"]
    capsys.readouterr()
    again = glue.sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], out_dir=str(tmp_path / "jobs"), launch=local_jobs(), **kw)
    )
    assert "2 already finished, 0 to run" in capsys.readouterr().out and again["tasks"] == jobs["tasks"]


# --- the Slurm path, on stand-in sbatch / srun / sacct -------------------------------------------


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """sbatch keeps each script it is given and answers with a fresh job ID; sacct prints sacct.txt."""
    bin_dir, state = tmp_path / "bin", tmp_path / "fake_slurm"
    bin_dir.mkdir()
    state.mkdir()
    (state / "next_id").write_text(str(random.randrange(10**5, 10**6)))  # submitit caches states by ID
    scripts = {
        "sbatch": 'n=$(cat "$FAKE_SLURM/next_id"); echo $((n+1)) > "$FAKE_SLURM/next_id"\n'
        'cp "$1" "$FAKE_SLURM/sbatch_$n.sh"; echo "Submitted batch job $n"\n',
        "srun": "exit 0\n",
        "sacct": 'cat "$FAKE_SLURM/sacct.txt"\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(state))
    return state


def slurm_options(*argv: str) -> LaunchOptions:
    p = argparse.ArgumentParser()
    add_launcher_arguments(p)
    return launch_options(p.parse_args(["--launcher", "slurm", "--slurm-partition", "gpu", *argv]))


def three_points(root: Path) -> list[LaunchPoint]:
    return [
        LaunchPoint(f"lr={lr}", counting_point, (str(root / f"lr={lr}"), 2, None), str(root / f"lr={lr}"))
        for lr in ("1e-3", "3e-3", "1e-2")
    ]


def test_the_sbatch_script_asks_for_what_the_flags_say(tmp_path, fake_slurm, capsys):
    flags = ["--slurm-time", "1:30:00", "--gpus-per-job", "2", "--cpus-per-job", "6"]
    flags += ["--array-parallelism", "2", "--slurm-max-requeues", "5", "--no-wait"]
    flags += ["--slurm-option", "account=proj", "--slurm-option", "qos=high", "--slurm-option", "exclusive="]
    options = slurm_options(*flags)
    assert options.max_requeues == 5
    assert cluster.run_points(three_points(tmp_path), str(tmp_path), options, "tune") is None
    [script] = list(fake_slurm.glob("sbatch_*.sh"))
    text = script.read_text()
    expected = ["--partition=gpu", "--time=90", "--gpus-per-node=2", "--cpus-per-task=6", "--array=0-2%2"]
    expected += ["--job-name=nfeval-tune", "--requeue", "--account=proj", "--qos=high", "--exclusive"]
    expected += ["--nodes=1", "--ntasks-per-node=1"]
    for flag in expected:
        assert f"#SBATCH {flag}\n" in text, flag
    assert "--signal=USR2@90" in text and "submitit.core._submit" in text
    job = script.stem.split("_")[1]
    jobs = json.loads((tmp_path / records.RECORD).read_text())["jobs"]
    assert {n: e["job_id"] for n, e in jobs.items()} == {
        "lr=1e-3": f"{job}_0",
        "lr=3e-3": f"{job}_1",
        "lr=1e-2": f"{job}_2",
    }
    out = capsys.readouterr().out
    assert f"{job}_2  lr=1e-2" in out and "submitted 3 job(s)" in out


def test_train_on_slurm_is_one_job_of_nodes_times_gpus_processes(tmp_path, fake_slurm, capsys):
    out = tmp_path / "nf-125M"
    flags = ["--launcher", "slurm", "--slurm-partition", "gpu", "--nodes", "2", "--gpus-per-node", "8"]
    assert main(["train", "--out", str(out), "--max-steps", "9", *flags, "--no-wait"]) == 0
    [script] = list(fake_slurm.glob("sbatch_*.sh"))
    text = script.read_text()
    for flag in ["--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8", "--job-name=nfeval-train-nf-125M"]:
        assert f"#SBATCH {flag}\n" in text, flag
    assert "--array" not in text
    job = json.loads((out / records.RECORD).read_text())["jobs"]["run"]["job_id"]
    assert job == script.stem.split("_")[1] and f"{job}  run" in capsys.readouterr().out


def test_a_rerun_submits_only_the_points_whose_jobs_ended(tmp_path, fake_slurm, capsys):
    points = three_points(tmp_path)
    cluster.run_points(points, str(tmp_path), slurm_options("--no-wait"), "tune")
    job = next(fake_slurm.glob("sbatch_*.sh")).stem.split("_")[1]
    rows = [f"{job}_0|PENDING|", f"{job}_1|RUNNING|node1", f"{job}_2|FAILED|node2"]
    (fake_slurm / "sacct.txt").write_text("JobID|State|NodeList\n" + "\n".join(rows) + "\n")
    capsys.readouterr()
    cluster.run_points(points, str(tmp_path), slurm_options("--no-wait"), "tune")
    out = capsys.readouterr().out
    assert f"job {job}_0 is PENDING, not resubmitted" in out and f"job {job}_1 is RUNNING" in out
    again = sorted(fake_slurm.glob("sbatch_*.sh"))
    assert len(again) == 2 and "--array" not in again[-1].read_text()  # one job: lr=1e-2 alone
    jobs = json.loads((tmp_path / records.RECORD).read_text())["jobs"]
    assert jobs["lr=1e-3"]["job_id"] == f"{job}_0" and jobs["lr=1e-2"]["job_id"] == str(int(job) + 1)


def test_a_job_of_unknown_state_is_resubmitted_only_when_asked(tmp_path, fake_slurm, capsys):
    points = three_points(tmp_path)[:1]
    cluster.run_points(points, str(tmp_path), slurm_options("--no-wait"), "tune")
    (fake_slurm / "sacct.txt").write_text("JobID|State|NodeList\n")  # sacct no longer knows the job
    cluster.run_points(points, str(tmp_path), slurm_options("--no-wait"), "tune")
    assert "cannot be known (sacct does not know the job); not resubmitted" in capsys.readouterr().out
    assert len(list(fake_slurm.glob("sbatch_*.sh"))) == 1
    cluster.run_points(points, str(tmp_path), slurm_options("--no-wait", "--resubmit"), "tune")
    assert len(list(fake_slurm.glob("sbatch_*.sh"))) == 2


def test_reproduce_submits_its_unfinished_runs_as_one_array(tmp_path, fake_slurm):
    ctx = run_specs.Context(
        out=str(tmp_path), scale=SCALES["tiny"], budget={"max_steps": 2}, seeds=2, tokenizer="t.json"
    )
    ctx.launch = slurm_options("--no-wait")
    Path(run_specs.run_dir(ctx, "clm-prenorm", 1) + ".json").parent.mkdir(parents=True)
    Path(run_specs.run_dir(ctx, "clm-prenorm", 1) + ".json").write_text("{}")  # finished: not submitted
    pending = run_specs.train_all(ctx, ["clm-prenorm", "clm-normformer"])
    assert pending.startswith("3 training run(s) not finished yet")
    jobs = json.loads((tmp_path / records.RECORD).read_text())["jobs"]
    assert sorted(jobs) == ["clm-normformer/seed1", "clm-normformer/seed2", "clm-prenorm/seed2"]
    assert "#SBATCH --job-name=nfeval-reproduce\n" in next(fake_slurm.glob("sbatch_*.sh")).read_text()


def test_bakeoff_submits_its_tunes_first_and_says_what_to_do(tmp_path, fake_slurm, capsys):
    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(200), encoding="utf-8")
    argv = ["bakeoff", "--size", "smoke", "--archs", "prenorm", "normformer", "--out", str(tmp_path / "b")]
    argv += ["--train-data", str(corpus)]
    assert main([*argv, "--launcher", "slurm", "--slurm-partition", "gpu", "--no-wait"]) == 0
    assert "the LR tunes' jobs are not all finished" in capsys.readouterr().out
    scripts = sorted(fake_slurm.glob("sbatch_*.sh"))
    assert len(scripts) == 2 and all("--job-name=nfeval-tune" in p.read_text() for p in scripts)
    assert not (tmp_path / "b" / "runs").exists()  # nothing trained on the submitting machine


# --- bad input: one line, exit status 2, nothing submitted ---------------------------------------


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--launcher", "kubernetes"], "--launcher 'kubernetes': expected one of local, slurm"),
        (["--launcher", "slurm"], "needs --slurm-partition NAME"),
        (["--launcher", "slurm", "--slurm-partition", "gpu", "--slurm-time", "soon"], "--slurm-time 'soon'"),
        (["--launcher", "slurm", "--slurm-partition", "gpu", "--slurm-option", "x"], "expected KEY=VALUE"),
        (
            ["--launcher", "slurm", "--slurm-partition", "gpu", "--cpus-per-job", "0"],
            "--cpus-per-job 0: expected",
        ),
    ],
)
def test_bad_launcher_flags_are_one_line_and_exit_2(tmp_path, fake_slurm, capsys, flags, message):
    assert main(["train", "--out", str(tmp_path / "run"), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not list(fake_slurm.glob("sbatch_*.sh")) and not (tmp_path / "run").exists()


COMMANDS = {
    "train": ["train"],
    "tune": ["tune", "--preset", "prenorm-tiny", "--lrs", "1e-3", "--budget", "steps=2"],
    "glue": ["glue", "--ckpt", "no-such-run", "--sweep"],
    "reproduce": ["reproduce"],
    "bakeoff": ["bakeoff"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_slurm_without_sbatch_or_partition(tmp_path, monkeypatch, capsys, command):
    argv = [*COMMANDS[command], "--out", str(tmp_path / "out"), "--launcher", "slurm"]
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch anywhere
    assert main([*argv, "--slurm-partition", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "sbatch is not on PATH" in err and err.count("\n") == 1
    (tmp_path / "sbatch").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "sbatch").chmod(0o755)
    assert main([*argv, "--slurm-partition", "gpu"]) == 2  # sbatch without srun (issue 55): one line
    err = capsys.readouterr().err
    assert "srun is not" in err and err.count("\n") == 1 and not (tmp_path / "out").exists()
    (tmp_path / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "srun").chmod(0o755)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs --slurm-partition" in err and err.count("\n") == 1 and not (tmp_path / "out").exists()


# --- nfeval train as one job of several processes ------------------------------------------------


def test_a_training_job_of_two_processes_trains_like_torchrun(tmp_path, job_env, capsys):
    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(1200), encoding="utf-8")
    flags = tiny_train_args(str(corpus), batch_size=None, max_steps=4, lr="3e-3", eval_interval=None)
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["train", "--out", str(one), *flags, "--batch-size", "4", "--grad-accum", "2"]) == 0
    args = build_parser("train").parse_args(
        ["train", "--out", str(two), *flags, "--batch-size", "2", "--grad-accum", "2"]
    )
    assert train_command.submit(args, local_jobs(gpus_per_node=2)) == 0
    record = (two / records.RECORD).read_text()
    assert train_command.submit(args, local_jobs(gpus_per_node=2)) == 0  # finished: nothing submitted
    assert (two / records.RECORD).read_text() == record
    config = json.loads((two / "config.json").read_text())
    assert config["train"]["world_size"] == 2
    losses = [
        [
            r["loss"]
            for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if r["kind"] == "train"
        ]
        for run in (one, two)
    ]
    assert len(losses[1]) == 4 and losses[0] == pytest.approx(losses[1], abs=1e-5)
    assert "the job ended with status 0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "text, minutes", [("90", 90), ("30:00", 30), ("1:30:00", 90), ("2-00:00:00", 2880), ("1-12", 2160)]
)
def test_slurm_times_read_as_sbatch_reads_them(text, minutes):
    assert parse_minutes(text) == minutes
