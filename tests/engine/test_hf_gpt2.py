"""GPT-2 directories read into the engine: the engine's logits equal GPT2LMHeadModel's, and any field,
tensor or file the engine does not compute keeps the directory out (transformers loads it)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.interop import hf_export
from nfeval.engine.interop.hf_gpt2 import read_dir
from nfeval.engine.model.model import Transformer


def save_gpt2(path, seed: int = 0, **config) -> str:
    """Saves a tiny random GPT2LMHeadModel (config overrides from ``config``) to ``path``, its gains and
    biases drawn too (GPT-2 starts them at one and zero), so that every tensor shows in the logits."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    settings = dict(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4) | config
    model = GPT2LMHeadModel(GPT2Config(**settings))
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.uniform_(-0.5, 1.5)
    model.save_pretrained(str(path))
    return str(path)


def engine_model(path: str) -> Transformer:
    ckpt, reasons = read_dir(path)
    assert reasons == []
    return checkpoint.materialize(ckpt).model


@pytest.mark.parametrize(
    "config",
    [{}, {"activation_function": "gelu"}, {"activation_function": "gelu_pytorch_tanh"},
     {"n_inner": 48, "layer_norm_epsilon": 1e-3}],
)  # fmt: skip
def test_engine_logits_equal_gpt2s(tmp_path, config):
    from transformers import AutoModelForCausalLM

    path = save_gpt2(tmp_path / "gpt2", **config)
    stock = AutoModelForCausalLM.from_pretrained(path).eval()
    ours = engine_model(path)
    assert ours.cfg.activation == ("gelu" if config.get("activation_function") == "gelu" else "gelu_tanh")
    idx = torch.randint(0, 97, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(idx), stock(idx).logits, rtol=0, atol=1e-5)
        positions = torch.tensor([[0, 1, 2, 1, 2]])  # packed rows: explicit positions reach wpe alike
        mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))[None, None]
        stock_mask = torch.zeros(1, 1, 5, 5).masked_fill_(~mask, torch.finfo(torch.float32).min)
        want = stock(idx[:1, :5], position_ids=positions, attention_mask=stock_mask).logits
        torch.testing.assert_close(ours(idx[:1, :5], position_ids=positions, attn_mask=mask), want,
                                   rtol=0, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize(
    "config, reason",
    [({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
     ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
     ({"activation_function": "relu"}, "activation_function"),
     ({"scale_attn_weights": False}, "scale_attn_weights")],
)  # fmt: skip
def test_a_config_the_engine_does_not_compute_is_not_read(tmp_path, config, reason):
    read, reasons = read_dir(save_gpt2(tmp_path / "gpt2", **config))
    assert read is None and reason in " ".join(reasons)


def test_untied_head_other_tensors_and_pickles_are_not_read(tmp_path):
    path = save_gpt2(tmp_path / "gpt2")
    weights = os.path.join(path, "model.safetensors")
    tensors = load_file(weights)
    save_file({**tensors, "lm_head.weight": torch.randn_like(tensors["transformer.wte.weight"])}, weights)
    assert "not tied" in " ".join(read_dir(path)[1])
    save_file({**tensors, "lm_head.weight": tensors["transformer.wte.weight"].clone()}, weights)
    assert read_dir(path)[0] is not None  # a stored copy of the tied head is the same model
    save_file({**tensors, "transformer.h.0.attn.extra": torch.zeros(1)}, weights)
    assert "unexpected" in " ".join(read_dir(path)[1])
    save_file(tensors, weights)
    torch.save({}, os.path.join(path, "pytorch_model.bin"))
    assert "safetensors" in " ".join(read_dir(path)[1])
    os.remove(os.path.join(path, "pytorch_model.bin"))
    cfg = json.loads(open(os.path.join(path, "config.json")).read())
    json.dump(cfg | {"n_layer": 3}, open(os.path.join(path, "config.json"), "w"))
    assert "missing" in " ".join(read_dir(path)[1])
    json.dump(cfg | {"model_type": "llama"}, open(os.path.join(path, "config.json"), "w"))
    assert "model_type" in " ".join(read_dir(path)[1])


def test_old_files_without_the_model_prefix_and_with_mask_buffers_are_read(tmp_path):
    path = save_gpt2(tmp_path / "gpt2")
    weights = os.path.join(path, "model.safetensors")
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(weights).items()}
    tensors["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 32, 32))
    save_file(tensors, weights)
    model = engine_model(path)
    torch.testing.assert_close(model.tok_emb.weight, tensors["wte.weight"], rtol=0, atol=0)


def test_tanh_gelu_models_export_as_gpt2s_gelu_new(tmp_path):
    from transformers import AutoModelForCausalLM

    path = save_gpt2(tmp_path / "gpt2")
    model = engine_model(path)
    assert not hf_export.gpt2_mismatches(model.cfg)
    assert hf_export.gpt2_config(model.cfg).activation_function == "gelu_new"
    state = hf_export.gpt2_state_dict(model.state_dict(), model.cfg.n_layer)
    stock = AutoModelForCausalLM.from_pretrained(path)
    assert all(torch.equal(v, stock.state_dict()[k]) for k, v in state.items())
