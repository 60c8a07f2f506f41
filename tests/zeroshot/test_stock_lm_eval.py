"""A folder stock lm-eval wrote (``lm-eval run --model hf`` on a tiny local GPT-2 folder with nfeval's shipped
YAMLs: no nfeval block) reads beside nfeval's own: the leaderboard gives its model a row named as lm-eval
names it, with GPT-3's per-token accuracy absent and the reason said; compare-scores and ``--baseline``
pair on its samples; and both write the same names: the task that ran (``piqa_local``) in the model folder
lm-eval's rule names (``pretrained=`` as given)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys

import pytest
from lm_eval.utils import get_file_task_name, get_sample_results_filenames, sanitize_model_name
from test_zeroshot_adapter import build_hf_gpt2

from nfeval import cli, embedded
from nfeval import tasks as nf_tasks
from nfeval.report import paired
from nfeval.report.compare_scores import compare_scores
from nfeval.report.leaderboard import build

TASKS = ("piqa_local", "openbookqa_local")
LIMIT = 8


def run_cli(*argv: str) -> tuple[int, str, str]:
    """Returns (exit status, stdout, stderr) of ``nfeval argv``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Scores one tiny HF GPT-2 folder with stock lm-eval (a child process, ``--output_path hfzs
    --log_samples``) and with ``nfeval zeroshot --output_path zs --log_samples``; returns the folders."""
    root = tmp_path_factory.mktemp("stock")
    hf = build_hf_gpt2(root / "tinygpt2", n_positions=512)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    metadata = json.dumps({"data_dir": embedded.zeroshot_dir("embedded")})
    stock = [sys.executable, "-m", "lm_eval", "run", "--model", "hf", "--model_args", f"pretrained={hf}"]
    stock += ["--tasks", *TASKS, "--include_path", nf_tasks.TASKS_DIR, "--metadata", metadata]
    stock += ["--limit", str(LIMIT), "--device", "cpu", "--batch_size", "4"]
    stock += ["--output_path", str(root / "hfzs"), "--log_samples"]
    done = subprocess.run(stock, env=env, capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NFEVAL_CACHE", str(root / "cache"))
        argv = ["zeroshot", "--ckpt", hf, "--data-dir", "embedded", "--tasks", *TASKS, "--limit", str(LIMIT)]
        argv += ["--output_path", str(root / "zs"), "--log_samples", "--device", "cpu", "--no-progress"]
        code, _, err = run_cli(*argv)
        assert code == 0, err
    return {"root": root, "hf": hf, "hfzs": str(root / "hfzs"), "zs": str(root / "zs"), "log": done.stderr}


def test_both_write_the_task_that_ran_in_the_model_folder_lm_evals_rule_names(runs):
    for side in ("hfzs", "zs"):
        (folder,) = pathlib.Path(runs[side]).iterdir()
        assert folder.name == sanitize_model_name(runs["hf"])
        samples = get_sample_results_filenames([str(p) for p in folder.iterdir()])
        assert {get_file_task_name(os.path.basename(f)) for f in samples} == set(TASKS), side
        (results,) = folder.glob("results_*.json")
        assert set(json.loads(results.read_text())["results"]) == set(TASKS), side


def test_stock_lm_eval_says_where_acc_per_token_is_left_out(runs):
    assert "acc_per_token (GPT-3's per-token accuracy) left out of the results" in runs["log"]


def test_the_leaderboard_takes_a_folder_stock_lm_eval_wrote(runs):
    out = runs["root"] / "lb.md"
    argv = ["leaderboard", runs["zs"], runs["hfzs"], "--reference", "gpt3", "--output", str(out)]
    code, _, err = run_cli(*argv)
    assert code == 0, err
    board = build([runs["zs"], runs["hfzs"]], reference="gpt3")
    ours, stock = (r for r in board["zeroshot"]["rows"] if r["reference"] is None)
    # the same model, scored by each: nfeval's row by its fingerprint, lm-eval's by the model it used
    assert ours["name"] == f"tinygpt2 ({ours['fingerprint'][:8]})"
    assert stock["name"] == "tinygpt2 (lm-eval hf)"
    assert stock["parameters"] == ours["parameters"] > 0  # lm-eval's model_num_parameters
    assert stock["scores"]["piqa"] is None and stock["scores"]["openbookqa"] is not None  # acc_uncond
    (absent,) = board["zeroshot"]["absent"]
    assert absent["model"] == "tinygpt2 (lm-eval hf)" and absent["metric"] == "acc_per_token"
    page = out.read_text()
    assert "passes no token counts" in page and "tinygpt2 (lm-eval hf) (PIQA acc_per_token)" in page
    by_acc = build([runs["zs"], runs["hfzs"]], metric=["acc"])["zeroshot"]["rows"]
    a, b = (r["scores"] for r in by_acc if r["reference"] is None)
    for task in ("piqa", "openbookqa"):  # the same model on the same documents: the same accuracy
        assert a[task]["value"] == pytest.approx(b[task]["value"], abs=1e-9)


def test_compare_scores_and_the_baseline_pair_on_stock_samples(runs):
    out = compare_scores(runs["zs"], runs["hfzs"], n_resamples=200)
    assert {(r["task"], r["metric"]) for r in out["rows"]} >= {("piqa", "acc"), ("openbookqa", "acc_uncond")}
    assert all(r["metric"] != "acc_per_token" for r in out["rows"])  # absent on the stock side
    assert all(r["n"] == LIMIT and r["difference"] == 0.0 for r in out["rows"]), out["rows"]
    board = build([runs["zs"], runs["hfzs"]], metric=["acc"])
    paired.add_to_board(board, "tinygpt2 (lm-eval hf)", n_resamples=200)
    assert board["paired"]["comparisons"] == 2
