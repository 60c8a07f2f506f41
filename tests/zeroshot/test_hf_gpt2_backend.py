"""A HF GPT-2 directory scored in the engine tokenizes as transformers does for lm-eval's HFLM, and goes
to transformers whenever its tokenizer config asks for something tokenizer.json alone does not do."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from test_zeroshot_adapter import build_hf_gpt2
from test_zeroshot_cli import data_dir  # noqa: F401  (the fixture: tiny local task files)

from nfeval.engine.fast import cpu_linear
from nfeval.engine.text.tokenization import GPT2_EOT
from nfeval.model_adapters import NFEvalLM
from nfeval.model_adapters.config import ScoringConfig
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot.config import ZeroShotConfig

TEXTS = ["The cat sat.", " leading space", "ünïcödé and emoji 🐈", "</s> starts with EOS", "a\nb\t c  ",
         "<s><pad>", GPT2_EOT + " x", ""]  # fmt: skip


def check_tokenized_as_hflm(path: str) -> NFEvalLM:
    """Returns the engine adapter of ``path`` after checking its ids and special ids against HFLM's."""
    from lm_eval.models.huggingface import HFLM

    ref = HFLM(pretrained=path, device="cpu", batch_size=1, dtype="float32")
    ours = NFEvalLM(path, ScoringConfig(device="cpu", progress=False))
    assert ours.model_backend.forward_by == "nfeval engine (GPT-2 weights)"
    for text in TEXTS:
        for special in (None, True, False):
            assert ours.tok_encode(text, add_special_tokens=special) == ref.tok_encode(
                text, add_special_tokens=special
            ), (text, special)
    assert (ours.eot_token_id, ours.prefix_token_id, ours.max_length) == (
        ref.eot_token_id, ref.prefix_token_id, ref.max_length
    )  # fmt: skip
    assert ours.model_backend.token_text(ours.prefix_token_id) == ref.tokenizer.decode(ref.prefix_token_id)
    return ours


def test_a_fast_tokenizer_with_named_special_tokens(tmp_path):
    check_tokenized_as_hflm(build_hf_gpt2(tmp_path / "hf"))


def test_gpt2s_own_tokenizer_class_and_its_default_special_tokens(tmp_path):
    path = build_hf_gpt2(tmp_path / "hf")
    tok_file = os.path.join(path, "tokenizer.json")
    spec = json.loads(open(tok_file).read())  # GPT-2's <|endoftext|> as the one special token
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    spec["added_tokens"].append({"id": len(spec["model"]["vocab"]), "content": GPT2_EOT, **flags})
    spec["model"]["vocab"][GPT2_EOT] = len(spec["model"]["vocab"])
    open(tok_file, "w").write(json.dumps(spec))
    cfg_file = os.path.join(path, "config.json")
    cfg = json.loads(open(cfg_file).read())
    open(cfg_file, "w").write(json.dumps(cfg | {"vocab_size": len(spec["model"]["vocab"])}))
    build_hf_gpt2_weights(path, len(spec["model"]["vocab"]))
    gpt2_class = json.dumps({"tokenizer_class": "GPT2Tokenizer"})  # no special token named
    open(os.path.join(path, "tokenizer_config.json"), "w").write(gpt2_class)
    ours = check_tokenized_as_hflm(path)
    assert ours.eot_token_id == ours.prefix_token_id == spec["model"]["vocab"][GPT2_EOT]


def build_hf_gpt2_weights(path: str, vocab_size: int) -> None:
    """Rewrites ``path``'s weights for a vocabulary of ``vocab_size``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config.from_pretrained(path)
    GPT2LMHeadModel(cfg).save_pretrained(path)
    assert cfg.vocab_size == vocab_size


@pytest.mark.parametrize(
    "change",
    [{"add_bos_token": True}, {"add_prefix_space": True}, {"tokenizer_class": "LlamaTokenizer"},
     {"some_new_option": 1}],
)  # fmt: skip
def test_a_tokenizer_config_the_engine_does_not_reproduce_goes_to_transformers(tmp_path, change):
    path = build_hf_gpt2(tmp_path / "hf")
    cfg_file = os.path.join(path, "tokenizer_config.json")
    cfg = json.loads(open(cfg_file).read())
    open(cfg_file, "w").write(json.dumps(cfg | change))
    if change.get("tokenizer_class") == "LlamaTokenizer":  # transformers would not load it: just the choice
        from nfeval.engine.fast.hf_gpt2_backend import tokenizer_special_tokens

        assert tokenizer_special_tokens(path) is None
        return
    assert (
        NFEvalLM(path, ScoringConfig(device="cpu", progress=False)).model_backend.forward_by == "transformers"
    )


def test_special_tokens_map_disagreeing_with_the_config_goes_to_transformers(tmp_path):
    from nfeval.engine.fast.hf_gpt2_backend import tokenizer_special_tokens

    path = build_hf_gpt2(tmp_path / "hf")
    assert tokenizer_special_tokens(path)["bos_token"] == "<s>"
    open(os.path.join(path, "special_tokens_map.json"), "w").write(json.dumps({"bos_token": "</s>"}))
    assert tokenizer_special_tokens(path) is None


def test_zeroshot_results_say_what_computed_the_forward_and_cache_it_apart(tmp_path, data_dir, monkeypatch):  # noqa: F811
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    path = build_hf_gpt2(tmp_path / "hf")
    run = ZeroShotConfig(tasks=["piqa"], data_dir=data_dir, limit=4, scoring=ScoringConfig(device="cpu"))
    engine = zeroshot.evaluate(path, run)
    assert engine["nfeval"]["scoring"]["forward_by"] == "nfeval engine (GPT-2 weights)"
    transformers = dataclasses.replace(run, scoring=ScoringConfig(device="cpu", hf_forward="transformers"))
    stock = zeroshot.evaluate(path, transformers)  # not answered from the cache
    assert stock["nfeval"]["scoring"]["forward_by"] == "transformers"
    kernel = cpu_linear.describe()
    assert engine["nfeval"]["scoring"]["cpu_linear_kernel"] == kernel
    # transformers' own forward, then the engine's output projection
    want = f"transformers' forward; output projection: {kernel}"
    assert stock["nfeval"]["scoring"]["cpu_linear_kernel"] == want
    assert stock["results"]["piqa_local"]["acc,none"] == engine["results"]["piqa_local"]["acc,none"]
    assert zeroshot.evaluate(path, run)["nfeval"]["scoring"] is None  # the default's own cache entry


def test_every_generation_setting_of_transformers_is_sorted_into_kept_or_sent_to_transformers():
    """A GenerationConfig field the engine has not been told about would be ignored in config.json: each
    one is either harmless (``GENERATION_KEYS``) or sends the directory to transformers."""
    from transformers import GenerationConfig

    from nfeval.engine.fast.hf_gpt2_backend import GENERATION_KEYS, GENERATION_PARAMS

    fields = set(GenerationConfig().to_dict())
    assert not GENERATION_KEYS & GENERATION_PARAMS
    assert fields - GENERATION_KEYS - GENERATION_PARAMS == set()
