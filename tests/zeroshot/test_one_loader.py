"""Path → model is one loader (``engine.checkpoints.loading.identify``): a zero-shot cache miss reads and
hashes the
weights once, and zeroshot, generate, info and analyze all go through it."""

from __future__ import annotations

import pytest
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval.analysis import inputs
from nfeval.cli import main as cli_main
from nfeval.engine.checkpoints import checkpoint, loading
from nfeval.model_adapters.config import ScoringConfig
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot.config import ZeroShotConfig


@pytest.fixture
def data_dir(tmp_path):
    write_jsonl(tmp_path / "data" / "piqa" / "validation.jsonl", DOCS["piqa"])
    return str(tmp_path / "data")


@pytest.fixture
def counted(monkeypatch):
    """Counts the safetensors reads and the state-dict hashes of ``engine.checkpoints.checkpoint``, and
    the calls
    to the one loader."""
    calls = {"read": 0, "hash": 0, "identify": 0}

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(checkpoint, "load_file", counting("read", checkpoint.load_file))
    monkeypatch.setattr(
        checkpoint, "fingerprint_state_dict", counting("hash", checkpoint.fingerprint_state_dict)
    )
    monkeypatch.setattr(loading, "identify", counting("identify", loading.identify))
    return calls


def test_zeroshot_cache_miss_reads_and_hashes_the_weights_once(
    tiny_clm_ckpt, data_dir, tmp_path, monkeypatch, counted
):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    out = zeroshot.evaluate(
        tiny_clm_ckpt,
        ZeroShotConfig(tasks=["piqa"], data_dir=data_dir, limit=2, scoring=ScoringConfig(device="cpu")),
    )
    assert out["nfeval"]["cached_tasks"] == []  # a miss: the model was built and scored
    assert counted == {"read": 1, "hash": 1, "identify": 1}
    again = zeroshot.evaluate(
        tiny_clm_ckpt,
        ZeroShotConfig(tasks=["piqa"], data_dir=data_dir, limit=2, scoring=ScoringConfig(device="cpu")),
    )
    assert again["nfeval"]["cached_tasks"] == ["piqa_local"] and counted["read"] == 2


def test_generate_info_and_analyze_go_through_the_one_loader(tiny_clm_ckpt, counted, capsys):
    argv = ["generate", "--ckpt", tiny_clm_ckpt, "--prompt", "The", "--max-new-tokens", "2"]
    assert cli_main([*argv, "--device", "cpu"]) == 0
    assert counted == {"read": 1, "hash": 1, "identify": 1}
    assert cli_main(["info", tiny_clm_ckpt, "--json"]) == 0
    assert counted == {"read": 2, "hash": 2, "identify": 2}
    target = inputs.load_target(tiny_clm_ckpt)
    assert counted == {"read": 3, "hash": 3, "identify": 3}
    assert target.info["fingerprint"] == checkpoint.read(tiny_clm_ckpt).fingerprint
