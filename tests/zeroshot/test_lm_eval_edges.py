"""Where nfeval meets lm-eval's own rules: a ``.json`` ``--output_path`` (lm-eval's file-name prefix), the
device ``nfeval lm-eval`` picks without ``--device``, and an answer longer than the context window (one
line naming the task and document; ``--too-long truncate`` scores it as lm-eval does, recorded)."""

from __future__ import annotations

import contextlib
import io
import json
import warnings

import pytest
import torch

from nfeval import cli
from nfeval.commands.lm_eval import default_device
from nfeval.model_adapters import context_window
from nfeval.model_adapters.config import ScoringConfig


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))


def run_cli(*argv: str) -> tuple[int, str, str]:
    """Returns (exit status, stdout, stderr) of ``nfeval argv``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def zeroshot(ckpt: str, *flags: str) -> tuple[int, str, str]:
    """Runs ``nfeval zeroshot`` on two embedded PIQA documents on the CPU."""
    argv = ["zeroshot", "--ckpt", ckpt, "--data-dir", "embedded", "--tasks", "piqa", "--limit", "2"]
    return run_cli(*argv, "--device", "cpu", "--no-progress", *flags)


def test_an_existing_json_output_path_is_refused_naming_lm_evals_rule(tiny_clm_ckpt, tmp_path):
    taken = tmp_path / "nf.json"
    taken.write_text("{}")
    for argv in (
        ["zeroshot", "--ckpt", tiny_clm_ckpt, "--output_path", str(taken), "--device", "cpu"],
        ["lm-eval", "--model", "nfeval", "--model_args", f"pretrained={tiny_clm_ckpt}", "--tasks",
         "piqa_local", "--output_path", str(taken)],
    ):  # fmt: skip
        code, _, err = run_cli(*argv)
        assert code == 2 and err.count("\n") == 1, err
        assert f"--output_path {taken}: an existing file; lm-eval takes a .json" in err, err
        assert "file-name prefix" in err and "nf_<date>.json" in err
    assert {p.name for p in tmp_path.iterdir()} <= {"nf.json", "cache"} and taken.read_text() == "{}"


def test_a_new_json_output_path_follows_lm_evals_rule_and_says_so(tiny_clm_ckpt, tmp_path):
    code, _, err = zeroshot(
        tiny_clm_ckpt, "--output_path", str(tmp_path / "out" / "nf.json"), "--log_samples"
    )
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(names) == 2 and names[0].startswith("nf_") and names[1].startswith("samples_piqa_local_")
    assert "a .json --output_path is lm-eval's file-name prefix: nf_<date>.json" in err, err


def test_lm_eval_without_device_scores_where_it_can_without_a_cuda_warning(tiny_clm_ckpt, tmp_path):
    assert default_device() == ("cuda:0" if torch.cuda.is_available() else "cpu")
    argv = ["lm-eval", "--model", "nfeval", "--model_args", f"pretrained={tiny_clm_ckpt},progress=false"]
    argv += ["--tasks", "piqa_local", "--data-dir", "embedded", "--limit", "2"]
    argv += ["--output_path", str(tmp_path / "out")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, _, err = run_cli(*argv)
    assert code == 0, err
    assert not [w for w in caught if "CUDA is not available" in str(w.message)]
    (results,) = (tmp_path / "out").rglob("results_*.json")
    assert json.loads(results.read_text())["config"]["device"] == default_device()


def test_an_answer_past_the_context_window_is_one_line_naming_task_and_document(tiny_clm_ckpt):
    code, _, err = zeroshot(tiny_clm_ckpt, "--max-length", "4")
    last = err.strip().splitlines()[-1]  # after lm-eval's own tokenizing bar (on in this process)
    assert code == 2 and "Traceback" not in err and last.startswith("nfeval zeroshot: error: "), err
    assert "piqa_local document 0: an answer of" in last and "context window (4 tokens)" in last, err
    assert "--too-long truncate" in last


def test_too_long_truncate_scores_as_lm_eval_and_records_the_documents(tiny_clm_ckpt, tmp_path):
    out = tmp_path / "zs.json"
    code, _, err = zeroshot(
        tiny_clm_ckpt, "--max-length", "4", "--too-long", "truncate", "--output", str(out)
    )
    assert code == 0, err
    results = json.loads(out.read_text())
    truncated = results["nfeval"]["truncated"]["piqa_local"]
    assert truncated["doc_ids"] == [0, 1] and truncated["max_length"] == 4
    assert "too_long=truncate" in results["config"]["model_args"]
    assert "piqa_local: 2 document(s) longer than the context window (4 tokens) scored truncated" in err
    code, _, err = zeroshot(
        tiny_clm_ckpt, "--max-length", "4", "--too-long", "truncate", "--output", str(out)
    )
    assert code == 0 and "cached result" in err  # a cached rerun keeps the record
    assert json.loads(out.read_text())["nfeval"]["truncated"] == results["nfeval"]["truncated"]


def test_truncation_keeps_lm_evals_window():
    requests = [(None, [1, 2], [3, 4, 5, 6]), (None, [7], [8])]
    seen: dict[str, list[int]] = {}
    pairs = context_window.fit(requests, None, 2, "truncate", seen)
    assert pairs == [([1, 2, 3, 4], [5, 6]), ([7], [8])] and seen == {"None": [None]}
    assert ScoringConfig.from_model_args({"too_long": "truncate"}).too_long == "truncate"
