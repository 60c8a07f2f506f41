"""``nfeval zeroshot`` end to end: results file, cache, folding, bad data, lm-eval CLI, torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import lm_eval
import pytest
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval.cli import main as cli_main
from nfeval.model_adapters import NFEvalLM
from nfeval.model_adapters.config import ScoringConfig
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot.config import ZeroShotConfig


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("zs_cli_data")
    write_jsonl(
        root / "piqa" / "validation.jsonl", DOCS["piqa"] * 3
    )  # 6 docs: odd shards under 2 ranks are padded
    write_jsonl(root / "openbookqa" / "test.jsonl", DOCS["openbookqa"])
    write_jsonl(root / "winogrande" / "validation.jsonl", DOCS["winogrande"])
    return str(root)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def zeroshot_cli(ckpt: str, data_dir, out, *tasks: str) -> int:
    """Runs ``nfeval zeroshot`` on CPU over local data, writing ``out``; returns the exit status."""
    argv = ["zeroshot", "--ckpt", ckpt, "--data-dir", str(data_dir), "--tasks", *tasks]
    return cli_main([*argv, "--output", str(out), "--device", "cpu"])


def test_zeroshot_writes_results_and_caches(tiny_clm_ckpt, data_dir, tmp_path, capsys):
    out = tmp_path / "zs.json"
    rc = zeroshot_cli(tiny_clm_ckpt, data_dir, out, "piqa,openbookqa", "winogrande", "storycloze_2016")
    assert rc == 0
    printed = capsys.readouterr()
    assert (
        "piqa_local " in printed.out  # the task that ran, as stock lm-eval names it
        and "acc_per_token" in printed.out
        and "stderr" in printed.out
    )
    # skipped, with where to put the files
    assert "storycloze" in printed.err and "storycloze/" in printed.err
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"piqa_local", "openbookqa_local", "winogrande_local"}
    for key in ("acc,none", "acc_norm,none", "acc_per_token,none"):
        assert 0.0 <= res["results"]["piqa_local"][key] <= 1.0
    assert "acc_uncond,none" in res["results"]["openbookqa_local"]
    nf = res["nfeval"]
    assert nf["task_data"]["openbookqa_local"] == {
        "lm_eval_task": "openbookqa_local",
        "source": "local",
        "data_dir": data_dir,
    }
    assert nf["eval_split"]["openbookqa_local"] == "test"
    assert nf["tasks"] == {t: t.removesuffix("_local") for t in res["results"]}  # the column each fills
    config = res["config"]  # lm-eval's block, with the values this run used
    assert config["model"] == "nfeval" and config["batch_size"] == 16 and config["device"] == "cpu"
    assert config["model_args"] == f"pretrained={tiny_clm_ckpt},dtype=float32"  # as given (lm-eval's rule)
    assert nf["model"]["fingerprint"] and nf["model"]["compute"]["tokens"] == 1000
    assert nf["provenance"]["lm_eval_version"] == lm_eval.__version__ and nf["dtype"] == "float32"
    assert nf["gpt3_metric"] == {
        "piqa_local": "acc_per_token",
        "openbookqa_local": "acc_uncond",
        "winogrande_local": "acc",
    }
    assert "storycloze_2016_local" in nf["skipped"] and nf["cached_tasks"] == []
    assert res["n-samples"]["piqa_local"]["effective"] == 6
    scoring = nf["scoring"]  # the FLOP/s report, also printed under the table
    assert (
        scoring["requests"] > 0 and 0 < scoring["tokens"] <= scoring["input_tokens"] and scoring["flops"] > 0
    )
    assert scoring["flop_per_s"] == pytest.approx(scoring["flops"] / scoring["wall_s"])
    assert scoring["fraction_of_peak"] == pytest.approx(scoring["flop_per_s"] / scoring["peak_flop_per_s"])
    assert f"{scoring['requests']} requests" in printed.out and "% of" in printed.out

    again = zeroshot.evaluate(
        tiny_clm_ckpt,
        ZeroShotConfig(
            tasks=["piqa", "openbookqa", "winogrande"], data_dir=data_dir, scoring=ScoringConfig(device="cpu")
        ),
    )
    assert sorted(again["nfeval"]["cached_tasks"]) == ["openbookqa_local", "piqa_local", "winogrande_local"]
    assert again["results"] == res["results"] and again["nfeval"]["scoring"] is None


def test_cache_is_per_model(tiny_clm_ckpt, tmp_path, data_dir):
    from conftest import _save_tiny

    from nfeval.engine.checkpoints import checkpoint

    tok = checkpoint.load(tiny_clm_ckpt).tokenizer
    other = _save_tiny(tmp_path / "other", tok, "normformer", "clm", seed=1)
    a = zeroshot.evaluate(
        tiny_clm_ckpt, ZeroShotConfig(tasks=["piqa"], data_dir=data_dir, scoring=ScoringConfig(device="cpu"))
    )
    b = zeroshot.evaluate(
        other, ZeroShotConfig(tasks=["piqa"], data_dir=data_dir, scoring=ScoringConfig(device="cpu"))
    )
    assert (
        b["nfeval"]["cached_tasks"] == []
        and a["nfeval"]["model"]["fingerprint"] != b["nfeval"]["model"]["fingerprint"]
    )


def test_folded_and_unfolded_give_identical_task_results(tiny_clm_ckpt, data_dir):
    manager = zeroshot.task_manager(data_dir, ["piqa_local", "openbookqa_local"])
    results = []
    for fold in (True, False):
        lm = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", fold_head_scale=fold, progress=False))
        out = lm_eval.simple_evaluate(
            model=lm, tasks=["piqa_local", "openbookqa_local"], task_manager=manager, log_samples=True
        )
        results.append((out["results"], [s["filtered_resps"] for s in out["samples"]["piqa_local"]]))
    (res_a, resps_a), (res_b, resps_b) = results
    assert res_a == res_b
    flat = lambda resps: [float(ll) for doc in resps for ll, _ in doc]  # noqa: E731
    assert max(abs(x - y) for x, y in zip(flat(resps_a), flat(resps_b))) <= 1e-4


def test_bad_local_data_fails_before_writing(tiny_clm_ckpt, tmp_path, capsys):
    bad = tmp_path / "data" / "piqa" / "validation.jsonl"
    write_jsonl(bad, DOCS["piqa"])
    with open(bad, "a") as f:
        f.write('{"goal": "x", "sol1": "a", "sol2": "b", "label": 7}\n')
    out = tmp_path / "zs.json"
    rc = zeroshot_cli(tiny_clm_ckpt, tmp_path / "data", out, "piqa")
    err = capsys.readouterr().err
    assert rc == 2 and f"{bad}:3" in err and "'label'" in err
    assert not out.exists() and not (tmp_path / "cache").exists()


def test_lm_eval_cli_runs_the_nfeval_model(tiny_clm_ckpt, data_dir, tmp_path):
    out = tmp_path / "lm_eval_out"
    rc = cli_main(
        [
            "lm-eval",
            "--model",
            "nfeval",
            "--model_args",
            f"pretrained={tiny_clm_ckpt},progress=false",
            "--tasks",
            "piqa_local",
            "--data-dir",
            data_dir,
            "--device",
            "cpu",
            "--output_path",
            str(out),
        ]
    )
    assert rc == 0
    (result_file,) = list(out.rglob("results_*.json"))
    assert 0.0 <= json.loads(result_file.read_text())["results"]["piqa_local"]["acc,none"] <= 1.0


def test_torchrun_two_ranks_equal_one(tiny_clm_ckpt, data_dir, tmp_path):
    one = zeroshot.evaluate(
        tiny_clm_ckpt,
        ZeroShotConfig(
            tasks=["piqa", "openbookqa"],
            data_dir=data_dir,
            use_cache=False,
            scoring=ScoringConfig(device="cpu"),
        ),
    )
    out = tmp_path / "dp.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        "29533",
        "-m",
        "nfeval",
        "zeroshot",
        "--ckpt",
        tiny_clm_ckpt,
        "--data-dir",
        data_dir,
        "--tasks",
        "piqa",
        "openbookqa",
        "--device",
        "cpu",
        "--no-cache",
        "--output",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = json.loads(out.read_text())
    for task in ("piqa_local", "openbookqa_local"):
        assert two["n-samples"][task]["effective"] == one["n-samples"][task]["effective"]
        for key, value in one["results"][task].items():
            if isinstance(value, float):
                assert two["results"][task][key] == pytest.approx(value, abs=1e-9), (task, key)


def test_token_budget_batches_give_the_same_results(tiny_clm_ckpt, data_dir, tmp_path, capsys):
    """--batch-size auto with a small --max-batch-tokens changes only how requests are batched."""
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--data-dir", data_dir, "--tasks", "piqa", "openbookqa"]
    runs = []
    for extra in ([], ["--batch-size", "auto", "--max-batch-tokens", "48"]):
        out = tmp_path / f"r{len(runs)}.json"
        assert cli_main([*argv, *extra, "--no-cache", "--output", str(out), "--device", "cpu"]) == 0
        runs.append(json.loads(out.read_text()))
    assert runs[0]["results"] == runs[1]["results"]
    assert runs[1]["nfeval"]["batch_size"] == "auto" and runs[1]["nfeval"]["max_batch_tokens"] == 48
    assert runs[1]["nfeval"]["scoring"]["requests"] == runs[0]["nfeval"]["scoring"]["requests"]
    with pytest.raises(SystemExit) as exit_status:
        cli_main([*argv, "--max-batch-tokens", "0", "--output", str(tmp_path / "x.json")])
    assert exit_status.value.code == 2
    assert "argument --max-batch-tokens: expected a positive integer, got '0'" in capsys.readouterr().err


def test_zeroshot_refuses_an_empty_answer_option_in_one_line(tiny_clm_ckpt, tmp_path, capsys):
    """Issue 55: an OpenBookQA item whose choice text is '' was scored (log-probability 0, acc_norm / 0)."""
    bad = DOCS["openbookqa"][1] | {
        "choices": {"text": ["zero C", "", "ten C", "ninety C"], "label": list("ABCD")}
    }
    path = tmp_path / "data" / "openbookqa" / "test.jsonl"
    write_jsonl(path, [DOCS["openbookqa"][0], bad])
    argv = [
        "zeroshot",
        "--ckpt",
        tiny_clm_ckpt,
        "--data-dir",
        str(tmp_path / "data"),
        "--tasks",
        "openbookqa",
    ]
    assert cli_main([*argv, "--no-cache", "--output", str(tmp_path / "r.json"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:2: " in err and "non-empty answer texts" in err, err
    assert not (tmp_path / "r.json").exists()
