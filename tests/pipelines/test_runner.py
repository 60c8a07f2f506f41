"""The one runner (``pipelines.runner``): run specs round-trip as data; the same specs give the same
records trained one at a time here, two at a time in spawned workers (the CPU standing in for runs that
share one device) and as Slurm jobs (submitit's local executor); a rerun trains nothing; how many runs
share a GPU."""

from __future__ import annotations

import functools
import json
import os

import pytest
from conftest import make_corpus, tiny_train_config

from nfeval.base.errors import ConfigError
from nfeval.cli import main
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.training import memory
from nfeval.launch import local
from nfeval.launch.options import LaunchOptions
from nfeval.pipelines import runner

COMPARED = ("status", "steps", "val_ppl", "judge", "name", "seed", "budget", "lr")


def _specs(corpus: str, out: str) -> list[runner.RunSpec]:
    base = tiny_train_config(corpus, max_steps=4, eval_interval=2, eval_samples=4)
    specs = []
    for seed in (1, 2):
        cfg = base.__class__(**{**base.__dict__, "seed": seed})
        record = {"name": "prenorm", "seed": seed, "budget": {"max_steps": 4}}
        specs.append(runner.RunSpec("prenorm", seed, cfg, os.path.join(out, f"seed{seed}"), record))
    return specs


def _records(specs: list[runner.RunSpec]) -> list[dict]:
    out = []
    for s in specs:
        record = json.load(open(s.directory + ".json"))
        out.append({k: record.get(k) for k in COMPARED})
    return out


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(make_corpus(300), encoding="utf-8")
    return str(path)


def test_a_run_spec_round_trips_through_json(corpus, tmp_path):
    spec = runner.RunSpec(
        "clm-normformer",
        3,
        tiny_train_config(corpus, model={"n_layer": 2}, lr=2e-3),
        str(tmp_path / "runs" / "clm-normformer" / "lr=0.002" / "seed3"),
        {"key": "clm-normformer", "seed": 3, "budget": {"max_steps": 7}, "step_ratio": None},
        role=runner.BAND,
        lr=2e-3,
    )
    again = runner.RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.label == "clm-normformer/lr=0.002/seed3"


def test_a_spec_says_what_is_wrong_with_it(corpus):
    cfg = tiny_train_config(corpus)
    with pytest.raises(ConfigError, match="role='tune'"):
        runner.RunSpec("a", 1, cfg, "d", role="tune")
    with pytest.raises(ConfigError, match="band LR"):
        runner.RunSpec("a", 1, cfg, "d", role=runner.BAND)
    with pytest.raises(ConfigError, match="run spec field 'config'.*no_such_field"):
        runner.RunSpec.from_dict({"name": "a", "seed": 1, "directory": "d", "config": {"no_such_field": 1}})


def test_judged_runs_go_first_seed_by_seed(corpus):
    cfg = tiny_train_config(corpus)
    specs = [
        runner.RunSpec("b", 2, cfg, "b2"),
        runner.RunSpec("a", 1, cfg, "a-band", role=runner.BAND, lr=1e-3),
        runner.RunSpec("a", 2, cfg, "a2"),
        runner.RunSpec("b", 1, cfg, "b1"),
    ]
    assert [s.directory for s in runner.ordered(specs)] == ["b1", "b2", "a2", "a-band"]


def test_the_same_specs_give_the_same_records_here_two_at_once_and_as_jobs(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the spawned workers' and jobs' threads, as this process's
    ensure = functools.partial(runner.ensure, log=print)
    here = _specs(corpus, str(tmp_path / "here"))
    assert runner.train(here, ensure, str(tmp_path / "here"), jobs=1, device="cpu", progress=False) is None
    shared = _specs(corpus, str(tmp_path / "shared"))
    assert runner.train(shared, ensure, str(tmp_path / "shared"), jobs=2, threads=1, device="cpu") is None
    jobs = _specs(corpus, str(tmp_path / "jobs"))
    slurm = LaunchOptions(launcher="slurm", executor="local", time_min=5, poll_s=0.2)
    assert runner.train(jobs, ensure, str(tmp_path / "jobs"), launch=slurm, progress=False) is None
    expected = _records(here)
    assert [r["status"] for r in expected] == ["finished", "finished"] and expected[0]["judge"]
    assert expected[0]["val_ppl"] != expected[1]["val_ppl"]  # two seeds, two runs
    assert _records(shared) == expected
    assert _records(jobs) == expected


def test_a_rerun_trains_nothing_and_reread_reads_what_is_there(corpus, tmp_path, monkeypatch):
    specs = _specs(corpus, str(tmp_path))
    ensure = functools.partial(runner.ensure, log=print)
    runner.train(specs[:1], ensure, str(tmp_path), progress=False)
    calls = []
    monkeypatch.setattr(local, "run_points", lambda points, **k: calls.append([p.name for p in points]))
    assert runner.train(specs, ensure, str(tmp_path), progress=False) is not None  # seed 2 still missing
    assert calls == [["prenorm/seed2"]]
    with pytest.raises(runner.runs.NotTrained, match="seed2"):
        runner.ensure(specs[1], print, reread=True)
    assert runner.ensure(specs[0], print, reread=True)["status"] == "finished"


def test_runs_per_gpu_from_free_memory_and_the_cores(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError, match="no GPU is visible here"):
        local.gpu_jobs(2, 1)
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: ((10 * gib, 80 * gib), (7 * gib, 80 * gib))[i])
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert local.gpu_jobs(0, 3 * gib) == 4  # the fuller GPU holds 2 of 3 GiB, on each of 2 GPUs
    assert local.gpu_jobs(3, 3 * gib) == 6
    assert local.gpu_jobs(0, 100 * gib) == 2  # at least one a GPU
    assert local.gpu_jobs(12, gib) == 16  # one core a run


def test_a_run_is_estimated_from_its_model_and_batch():
    model = preset("normformer-tiny", n_layer=3, vocab_size=500)
    assert memory.parameter_count(model) == sum(p.numel() for p in Transformer(model).parameters())
    one, two = (memory.training_bytes(model, b, 64, "bf16") for b in (4, 8))
    fixed = memory.MARGIN * (memory.CUDA_CONTEXT_BYTES + 16 * memory.parameter_count(model))
    assert two - fixed == pytest.approx(
        2 * (one - fixed), rel=1e-6
    )  # activations and logits grow with the batch
    assert memory.training_bytes(model, 4, 64, "fp32") > one  # fp32 activations take twice the room


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--runs-per-gpu", "0"], "--runs-per-gpu '0': expected a positive count or auto"),
        (["--runs-per-gpu", "2", "--jobs", "2"], "--jobs and --runs-per-gpu both say"),
        (["--runs-per-gpu", "auto"], "no GPU is visible here"),
    ],
)
def test_bad_runs_per_gpu_is_one_line(tmp_path, monkeypatch, capsys, flags, message):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    argv = ["bakeoff", "--size", "tiny", "--archs", "prenorm,normformer", "--out", str(tmp_path), *flags]
    try:
        code = main(argv)
    except SystemExit as e:  # refused by argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_the_ratio_is_timed_under_the_sharing_the_runs_will_have(monkeypatch):
    import torch

    from nfeval.pipelines import context
    from nfeval.pipelines.scales import SCALES

    ctx = context.RunContext(out="o", scale=SCALES["tiny"], budget={}, seeds=1, tokenizer="t", jobs=5)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert context.sharing(ctx) == 0  # on the CPU each run keeps its own cores
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert context.sharing(ctx) == 2  # 5 runs on 2 GPUs: up to 3 on one, 2 beside each
    ctx.device = "cpu"
    assert context.sharing(ctx) == 0
    ctx.device, ctx.launch = "auto", LaunchOptions(launcher="slurm", executor="local")
    assert context.sharing(ctx) == 0  # a Slurm job trains one run
