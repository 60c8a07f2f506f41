"""Results are keyed by the lm-eval task that ran, as stock lm-eval keys them (``piqa_local``: the shipped
local YAML), and ``nfeval.tasks`` names the column each fills (``piqa``); files written before, keyed by
the column (``piqa``, with ``nfeval.task_data`` keyed so too), still read everywhere."""

from __future__ import annotations

import json
import os

import pytest
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval.base.errors import ConfigError
from nfeval.model_adapters.config import ScoringConfig
from nfeval.report import paired
from nfeval.report.leaderboard import build
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot.config import ZeroShotConfig


def as_old_file(new: str, old: str) -> str:
    """Writes ``new`` (and its items file) as nfeval wrote it before: keyed by the column (``piqa``), with
    no ``nfeval.tasks``; returns the old file's path."""
    data = json.loads(open(new).read())
    for key in ("results", "n-samples", "configs", "versions", "higher_is_better", "n-shot"):
        if isinstance(data.get(key), dict):
            data[key] = {t.removesuffix("_local"): v for t, v in data[key].items()}
    for key in ("task_data", "eval_split", "gpt3_metric"):
        data["nfeval"][key] = {t.removesuffix("_local"): v for t, v in data["nfeval"][key].items()}
    del data["nfeval"]["tasks"]
    open(old, "w").write(json.dumps(data))
    items = json.loads(open(new.replace(".json", ".items.json")).read())
    items["tasks"] = {t.removesuffix("_local"): v for t, v in items["tasks"].items()}
    items["nfeval"]["results"] = os.path.basename(old)
    del items["nfeval"]["results_sha256"]  # kept since issue 39; an old sidecar has none
    open(old.replace(".json", ".items.json"), "w").write(json.dumps(items))
    return old


def test_results_keyed_by_lm_eval_task_and_old_files_still_read(tiny_clm_ckpt, tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "data"
    write_jsonl(data / "piqa" / "validation.jsonl", DOCS["piqa"])
    new = str(tmp_path / "new.json")
    out = zeroshot.evaluate(
        tiny_clm_ckpt,
        ZeroShotConfig(tasks=["piqa"], data_dir=str(data), output=new, scoring=ScoringConfig(device="cpu")),
    )
    assert set(out["results"]) == set(out["n-samples"]) == set(out["configs"]) == {"piqa_local"}
    assert out["nfeval"]["task_data"] == {
        "piqa_local": {"lm_eval_task": "piqa_local", "source": "local", "data_dir": str(data)}
    }
    assert out["nfeval"]["tasks"] == {"piqa_local": "piqa"}  # the column it fills
    assert set(json.loads(open(new.replace(".json", ".items.json")).read())["tasks"]) == {"piqa_local"}
    assert out["config"]["model"] == "nfeval" and out["config"]["device"] == "cpu"
    assert out["config"]["batch_size"] == 16 and out["config"]["model_args"].startswith("pretrained=")

    old = as_old_file(new, str(tmp_path / "old.json"))
    boards = [build([path])["zeroshot"]["rows"][0]["scores"]["piqa"]["value"] for path in (new, old)]
    assert boards[0] == boards[1] == out["results"]["piqa_local"]["acc_per_token,none"]
    rows = paired.compare_files(new, old, n_resamples=200)  # the same model: old and new pair exactly
    assert {r["task"] for r in rows} == {"piqa"} and all(r["difference"] == 0 for r in rows)


def test_two_variants_of_one_task_are_refused(tiny_clm_ckpt, tmp_path, monkeypatch):
    monkeypatch.setattr(zeroshot, "load_tasks", lambda names, manager: (dict.fromkeys(names), {}))
    with pytest.raises(ConfigError, match="piqa_local and piqa_hub both score piqa"):
        zeroshot.evaluate(
            tiny_clm_ckpt,
            ZeroShotConfig(
                tasks=["piqa_local", "piqa_hub"], use_cache=False, scoring=ScoringConfig(device="cpu")
            ),
        )
