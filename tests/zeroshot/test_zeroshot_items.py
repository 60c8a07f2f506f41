"""``nfeval zeroshot`` keeps each document's outcome in a sidecar, also after a cached rerun."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval.base.errors import MissingDataError
from nfeval.model_adapters.config import ScoringConfig
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot import items as zeroshot_items
from nfeval.zeroshot.config import ZeroShotConfig


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("zs_items_data")
    write_jsonl(root / "piqa" / "validation.jsonl", DOCS["piqa"] * 3)
    write_jsonl(root / "openbookqa" / "test.jsonl", DOCS["openbookqa"])
    write_jsonl(root / "winogrande" / "validation.jsonl", DOCS["winogrande"])
    return str(root)


def score_three(ckpt: str, data_dir: str, output) -> dict:
    """Returns zero-shot results on piqa, openbookqa and winogrande (CPU), written to ``output``."""
    three = ["piqa", "openbookqa", "winogrande"]
    return zeroshot.evaluate(
        ckpt,
        ZeroShotConfig(
            tasks=three, data_dir=data_dir, output=str(output), scoring=ScoringConfig(device="cpu")
        ),
    )


def test_sidecar_written_and_kept_by_a_cached_rerun(tiny_clm_ckpt, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    first = tmp_path / "a.json"
    res = score_three(tiny_clm_ckpt, data_dir, first)
    items = json.loads((tmp_path / "a.items.json").read_text())
    assert items["nfeval"]["model"]["fingerprint"] == res["nfeval"]["model"]["fingerprint"]
    tasks = items["tasks"]
    assert tasks["piqa_local"]["doc_id"] == list(range(6)) and len(tasks["piqa_local"]["doc_hash"]) == 6
    assert set(tasks["openbookqa_local"]["metrics"]) == {
        "acc,none",
        "acc_norm,none",
        "acc_per_token,none",
        "acc_uncond,none",
    }
    for name, record in tasks.items():
        for key, metric in record["metrics"].items():
            assert np.mean(metric["value"]) == pytest.approx(res["results"][name][key], abs=1e-12)
            assert metric["chosen"] is not None, (name, key)  # every nfeval metric has a choice rule
            assert [float(c == g) for c, g in zip(metric["chosen"], record["gold"])] == metric["value"]

    again = tmp_path / "b.json"
    rerun = score_three(tiny_clm_ckpt, data_dir, again)
    assert sorted(rerun["nfeval"]["cached_tasks"]) == sorted(tasks)
    assert zeroshot_items.read_sidecar(str(again)) == tasks


def test_missing_sidecar_is_a_user_error(tmp_path):
    (tmp_path / "r.json").write_text("{}")
    with pytest.raises(MissingDataError, match="r.items.json"):
        zeroshot_items.read_sidecar(str(tmp_path / "r.json"))
