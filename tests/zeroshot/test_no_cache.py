"""``zeroshot --no-cache`` needs no writable cache, and a damaged peak FLOP/s cache is measured again."""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval.cli import main
from nfeval.engine.training import budget


def test_no_cache_scores_with_a_cache_folder_that_cannot_be_written(tiny_clm_ckpt, tmp_path, monkeypatch):
    write_jsonl(tmp_path / "data" / "piqa" / "validation.jsonl", DOCS["piqa"])
    (tmp_path / "a_file").write_text("x")
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "a_file" / "cache"))  # nothing can be made there
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--data-dir", str(tmp_path / "data"), "--tasks", "piqa"]
    out = tmp_path / "zs.json"
    assert main([*argv, "--no-cache", "--device", "cpu", "--output", str(out)]) == 0
    assert "acc,none" in json.loads(out.read_text())["results"]["piqa_local"]


def test_a_damaged_peak_cache_is_measured_again_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path))
    cfg = SimpleNamespace(peak_flops=None, dtype="fp32")
    for damaged in ('{"cpu": "fast", "x|cpu|fp32": true}', "[1, 2]", '{"cut'):
        (tmp_path / "peak_flops.json").write_text(damaged)
        peak, source = budget.peak_flops(cfg, torch.device("cpu"))
        assert peak > 1e6 and "best so far" in source
        assert all(
            isinstance(v, float) for v in json.loads((tmp_path / "peak_flops.json").read_text()).values()
        )
