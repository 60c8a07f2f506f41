"""benchmarks/gpu_check.py starts: its --dry-run runs every GPU path on the CPU with tiny shapes."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))


EMBEDDED_ZEROSHOT = REPO / "nfeval" / "embedded" / "zeroshot"  # the four tasks' slices, ../shared's layout
ALL_CHECKS = [
    "train_step_eager",
    "train_step_compiled",
    "flash_attention",
    "ddp_checkpoint_resume",
    "killed_run_resumes",
    "zeroshot_cuda_vs_cpu",
    "train_mfu",
    "runs_sharing_device",
    "out_of_memory_exits",
    "generate_vs_hf",
    "zeroshot_vs_hflm",
    "zeroshot_full_vs_hflm",
    "glue_vs_trainer",
]


def dry_run(out: Path, data_dir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    script = str(REPO / "benchmarks" / "gpu_check.py")
    argv = [sys.executable, script, "--dry-run", "--out", str(out), "--data-dir", str(data_dir), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> dict:
    """The whole dry run, once: its data folder holds the embedded zero-shot slices and no GLUE data."""
    data = tmp_path_factory.mktemp("data")
    shutil.copytree(EMBEDDED_ZEROSHOT, data / "zeroshot")
    out = tmp_path_factory.mktemp("out")
    done = dry_run(out, data)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "gpu_check.json").read_text())
    record["markdown"] = (out / "gpu_check.md").read_text()
    return record


def finite_positive(*values) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values)


def test_gpu_check_dry_run(record):
    checks = record["checks"]
    assert list(checks) == ALL_CHECKS
    assert all(c["status"] == "ok" for c in checks.values()), checks
    assert (
        checks["train_step_eager"]["tokens_per_s"] > 0 and checks["ddp_checkpoint_resume"]["losses_bitwise"]
    )
    killed = checks["killed_run_resumes"]
    assert (
        killed["losses_bitwise"] and killed["weights_bitwise"] and 0 < killed["killed_after_checkpoint"] < 40
    )
    zeroshot = checks["zeroshot_cuda_vs_cpu"]  # CPU against CPU in the dry run: identical
    assert zeroshot["max_abs_loglik_diff"] == 0.0 and zeroshot["choices_differing"] == 0
    generation = checks["generate_vs_hf"]  # greedy fp32 on one device: the same tokens on every side
    for batch in (1, 16):
        prompts = generation[f"b{batch}_prompts"]
        assert generation[f"b{batch}_identical"] == generation[f"b{batch}_hf_static_identical"] == prompts
        assert generation[f"b{batch}_nfeval_tok_s"] > 0 and generation[f"b{batch}_limit_fp32"] > 0
    scoring = checks["zeroshot_vs_hflm"]
    assert scoring["forward_by"] == "nfeval engine (GPT-2 weights)" and scoring["max_abs_loglik_diff"] < 1e-4
    table = record["markdown"]
    assert table.startswith("## GPU check") and table.count("| ok |") == len(checks)


def test_train_mfu_times_both_architectures_at_their_best_batch(record):
    mfu = record["checks"]["train_mfu"]
    assert mfu["rounds"] == 2 and finite_positive(mfu["normformer_over_prenorm_step_time"], mfu["peak_flops"])
    for arch in ("normformer", "prenorm"):
        tried = mfu[f"{arch}_batches_tried"]
        assert set(tried) == {"1", "2"} and finite_positive(*tried.values())
        assert mfu[f"{arch}_batch"] == max((b for b in (1, 2)), key=lambda b: tried[str(b)])
        assert mfu[f"{arch}_preset"] == f"{arch}-tiny"
        assert finite_positive(mfu[f"{arch}_tokens_per_s"], mfu[f"{arch}_mfu"], mfu[f"{arch}_step_ms"])


def test_runs_sharing_device_compares_two_runs_with_one(record):
    sharing = record["checks"]["runs_sharing_device"]
    assert sharing["rounds"] == 2
    for scale in ("24x64-gpu", "12x128-gpu"):
        assert sharing[f"{scale} runs"] == 2 and sharing[f"{scale} tokens_per_step"] == 64
        figures = [sharing[f"{scale} {k}"] for k in ("alone_tokens_per_s", "together_tokens_per_s")]
        assert finite_positive(*figures, sharing[f"{scale} combined_over_alone"])


def test_out_of_memory_exits_with_one_line_and_nothing_written(record):
    oom = record["checks"]["out_of_memory_exits"]
    assert oom["simulated"] and oom["exit_status"] == 2 and oom["run_folder_holds"] == []
    assert oom["largest_batch_that_fits"] == 2 and "\n" not in oom["line"]
    assert "a batch of 8 × 32 tokens" in oom["line"] and "--batch-size 2 --grad-accum 4" in oom["line"]


def test_zeroshot_full_vs_hflm_scores_the_four_tasks_alike_on_both_sides(record):
    full = record["checks"]["zeroshot_full_vs_hflm"]
    tasks = ["piqa_local", "hellaswag_local", "winogrande_local", "openbookqa_local"]
    assert full["documents"] == dict.fromkeys(tasks, 4) and full["requests"] > 4 * 4 * 2
    for dtype in ("bf16", "fp32"):
        assert full[f"{dtype} rounds"] == 2
        assert finite_positive(
            full[f"{dtype} hflm s"], full[f"{dtype} nfeval s"], full[f"{dtype} hflm / nfeval"]
        )
        assert full[f"{dtype} hflm setting"] in full[f"{dtype} hflm trials s"]
        assert full[f"{dtype} nfeval setting"] in full[f"{dtype} nfeval trials s"]
        hflm, ours = full[f"{dtype} hflm metrics"], full[f"{dtype} nfeval metrics"]
        assert list(hflm) == tasks and set(hflm["piqa_local"]) == {"acc", "acc_norm"}
        assert full[f"{dtype} metrics identical"] == (hflm == ours)
    assert full["fp32 metrics identical"] and full["fp32 max abs loglik diff"] < 1e-4


def test_glue_vs_trainer_sweeps_both_sides(record):
    glue = record["checks"]["glue_vs_trainer"]  # no glue/ in the dry run's data folder: synthetic
    assert glue["data"] == "synthetic SST-2" and glue["train_rows"] == 64 and glue["lrs"] == 2
    assert all(
        glue[f"{side} s"] > 0 and 0 <= glue[f"{side} best dev"] <= 1 for side in ("nfeval", "HF Trainer")
    )
    assert finite_positive(glue["HF Trainer / nfeval"])


def test_a_check_without_its_data_is_skipped_not_failed(tmp_path):
    done = dry_run(tmp_path / "out", tmp_path, "--checks", "zeroshot_full_vs_hflm", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    full = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["checks"]["zeroshot_full_vs_hflm"]
    assert full["status"] == "skipped" and "no piqa, hellaswag, winogrande, openbookqa" in full["reason"]


def test_the_device_calls_name_every_check_once():
    import gpu_check

    calls = [gpu_check.check_names(call) for call in gpu_check.CALLS]
    assert sorted(sum(calls, [])) == sorted(gpu_check.CHECKS) and set(gpu_check.ESTIMATE_S) == set(
        gpu_check.CHECKS
    )
    assert all(sum(gpu_check.ESTIMATE_S[n] for n in names) <= 8.5 * 60 for names in calls)


def test_the_data_helper_copies_what_the_checks_read(tmp_path):
    import gpu_check_data

    source, dest = tmp_path / "shared", tmp_path / "gpu_data"
    for rel in gpu_check_data.FILES[:-1]:
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(rel, encoding="utf-8")
    done = gpu_check_data.copy_data(source, dest)
    assert done == {"copied": list(gpu_check_data.FILES[:-1]), "missing": [gpu_check_data.FILES[-1]]}
    assert all((dest / rel).read_text(encoding="utf-8") == rel for rel in done["copied"])


def test_normformer_and_prenorm_compile_as_one_graph():
    """What train_mfu compiles: one graph, no break, so the extra norms need no converter."""
    from nfeval.engine.model.config import preset
    from nfeval.engine.model.model import Transformer
    from nfeval.engine.training.objective import Objective

    for name in ("normformer-tiny", "prenorm-tiny"):
        cfg = preset(name)
        x = torch.randint(0, cfg.vocab_size, (2, 16))
        explained = torch._dynamo.explain(Objective(Transformer(cfg)))(x, x)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_gpu_check_refuses_an_unknown_check_and_a_check_without_its_input(tmp_path):
    script = str(REPO / "benchmarks" / "gpu_check.py")
    for checks, message in [("nope", "unknown check 'nope'"), ("zeroshot_cuda_vs_cpu", "add it")]:
        done = subprocess.run(
            [sys.executable, script, "--dry-run", "--checks", checks, "--out", str(tmp_path)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]


def test_killed_run_resumes_bit_for_bit_in_the_dry_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    script = str(REPO / "benchmarks" / "gpu_check.py")
    done = subprocess.run(
        [sys.executable, script, "--dry-run", "--checks", "killed_run_resumes", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    killed = json.loads((tmp_path / "gpu_check.json").read_text())["checks"]["killed_run_resumes"]
    assert killed["status"] == "ok" and killed["losses_bitwise"] and killed["weights_bitwise"]
    assert 0 < killed["killed_after_checkpoint"] < killed["steps"]  # killed mid-run, after a checkpoint
