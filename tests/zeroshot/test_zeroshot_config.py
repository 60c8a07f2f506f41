"""Zero-shot settings as objects: ``ZeroShotConfig`` for ``evaluate``, ``ScoringConfig`` for ``NFEvalLM``
(built by lm-eval from ``--model_args``), scoring choices that change answers keyed apart in the cache,
and lm-eval's custom-kwargs hint filtered only while nfeval evaluates."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval.base.errors import ConfigError, MissingDataError
from nfeval.model_adapters.config import ScoringConfig
from nfeval.model_adapters.lm import NFEvalLM
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot.config import ZeroShotConfig


def test_lm_eval_builds_the_model_from_its_model_args(tiny_clm_ckpt):
    lm = NFEvalLM.create_from_arg_string(
        f"pretrained={tiny_clm_ckpt},dtype=bfloat16,max_length=16,add_bos_token=false,pack=0",
        {"batch_size": "4", "max_batch_size": None, "device": "cpu"},  # as lm-eval's own options come
    )
    assert (lm.batch_size, lm.dtype, lm.max_length, lm.add_bos_token) == (4, torch.bfloat16, 16, False)
    assert not lm.packed and lm.tok_encode("The cat")[0] != lm.prefix_token_id
    auto = NFEvalLM.create_from_arg_obj(
        {"pretrained": tiny_clm_ckpt}, {"batch_size": "auto:4", "device": "cpu"}
    )
    assert (auto.batch_size, auto.max_rows) == (64, None)
    with pytest.raises(ConfigError, match=r"--model_args: unknown argument\(s\) \['trust_remote_code'\]"):
        NFEvalLM.create_from_arg_string(f"pretrained={tiny_clm_ckpt},trust_remote_code=True")
    with pytest.raises(ConfigError, match="--model_args: pack='sometimes': expected true or false"):
        NFEvalLM.create_from_arg_string(f"pretrained={tiny_clm_ckpt},pack=sometimes")
    with pytest.raises(ConfigError, match="pretrained=PATH is missing"):
        NFEvalLM.create_from_arg_string("dtype=bf16")


def test_bad_settings_name_their_flag_before_any_work(tiny_clm_ckpt, tmp_path):
    with pytest.raises(MissingDataError, match="--data-dir"):
        zeroshot.evaluate(tiny_clm_ckpt, ZeroShotConfig(data_dir=str(tmp_path / "none")))
    with pytest.raises(ConfigError, match="--limit 0: expected a positive integer"):
        zeroshot.evaluate(tiny_clm_ckpt, ZeroShotConfig(limit=0))
    with pytest.raises(ConfigError, match="--max-batch-tokens -1: expected a positive integer"):
        zeroshot.evaluate(tiny_clm_ckpt, ZeroShotConfig(scoring=ScoringConfig(max_batch_tokens=-1)))


def test_an_answer_changing_setting_has_its_own_cache_entry_and_the_hint_filter_does_not_pile_up(
    tiny_clm_ckpt, tmp_path, monkeypatch
):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    write_jsonl(tmp_path / "data" / "piqa" / "validation.jsonl", DOCS["piqa"])
    task_log = logging.getLogger("lm_eval.api.task")
    filters = list(task_log.filters)
    cfg = ZeroShotConfig(tasks=["piqa"], data_dir=str(tmp_path / "data"), scoring=ScoringConfig(device="cpu"))
    no_bos = dataclasses.replace(cfg, scoring=ScoringConfig(device="cpu", add_bos_token=False))
    default = zeroshot.evaluate(tiny_clm_ckpt, cfg)
    assert zeroshot.evaluate(tiny_clm_ckpt, no_bos)["nfeval"]["scoring"] is not None  # scored, not cached
    assert zeroshot.evaluate(tiny_clm_ckpt, cfg)["results"] == default["results"]
    assert task_log.filters == filters


def test_the_hint_is_filtered_inside_the_block_only():
    task_log = logging.getLogger("lm_eval.api.task")
    hint = logging.LogRecord(
        "lm_eval.api.task", logging.WARNING, "", 0, "piqa: Custom kwargs can be passed", None, None
    )
    with zeroshot._quiet_custom_kwargs_hint():
        assert not task_log.filter(hint)
    assert task_log.filter(hint)
