"""The normalisation schemes of 2024–2025 (issue 42) against hand-written references of their papers'
equations: Peri-LN (Kim et al., ICML 2025), LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth"),
Mix-LN (Li et al. 2024) and DyT (Zhu et al., CVPR 2025, "Transformers without Normalization").

The reference forward below is the whole model in plain torch (embeddings, every block by its paper's
equation with its 1-based depth ℓ, final norm, tied head) on the module's own weights, in float64; the
KV cache against recomputation, fairseq's initialisation, the presets and the refusals follow.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import make_corpus, tiny_train_config
from test_init_recipe import assert_stats, expected_stats, weight_kinds
from test_norm_placements import (
    check_kv_cache_matches_recompute,
    norm_ref,
    randomize,
    reference_attention,
    reference_ffn,
)
from torch import nn

from nfeval.base.errors import ConfigError
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.checkpoints.checkpoint import Checkpoint
from nfeval.engine.model.config import ARCHITECTURES, RECIPES, ModelConfig, preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.model.norms import DynamicTanh
from nfeval.engine.training.train import train
from nfeval.engine.training.train_config import parse_set

SCHEMES = ("periln", "lnscaling", "mixln", "dyt")


def reference_forward(model: Transformer, idx: torch.Tensor) -> torch.Tensor:
    """Logits of a causal ``model`` computed from the papers' equations, block ℓ = 1..L:

    Pre-LN        x + F(N(x))                    LayerNorm Scaling: x + F(N(x) / sqrt(ℓ))
    Peri-LN       x + N'(F(N(x)))                (sandwich; with LayerNorm Scaling N(x) / sqrt(ℓ))
    Mix-LN        N(x + F(x)) for ℓ <= int(α·L) (the paper's code: int(), 3 of 12 at α = 0.25), Pre-LN after
    DyT           every N is γ·tanh(α·x) + β     (``norm_ref``)
    """
    cfg = model.cfg
    T = idx.shape[1]
    table = model.pos_emb.weight if model.pos_emb is not None else model.sin_pos
    scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
    x = F.embedding(idx, model.tok_emb.weight) * scale + table[:T]
    if cfg.embedding_norm:  # Peri-LN's optional initial embedding norm, y_0 = N(x_0)
        x = norm_ref(model.emb_norm, x)
    post_layers = int(cfg.mix_ln_fraction * cfg.n_layer)
    for i, block in enumerate(model.blocks):
        ell = i + 1
        s = 1 / math.sqrt(ell) if cfg.ln_scaling else 1.0

        def attn(h, block=block):
            return reference_attention(block.attn, h, cfg)

        def ffn(h, block=block):
            return reference_ffn(block, h, cfg)

        if ell <= post_layers:  # Mix-LN's Post-LN blocks
            x = norm_ref(block.attn_norm, x + attn(x))
            x = norm_ref(block.ffn_norm, x + ffn(x))
        elif cfg.norm_position == "sandwich":  # Peri-LN
            x = x + norm_ref(block.attn_post_norm, attn(s * norm_ref(block.attn_norm, x)))
            x = x + norm_ref(block.ffn_post_norm, ffn(s * norm_ref(block.ffn_norm, x)))
        else:
            assert cfg.norm_position == "pre"
            x = x + attn(s * norm_ref(block.attn_norm, x))
            x = x + ffn(s * norm_ref(block.ffn_norm, x))
    return norm_ref(model.final_norm, x) @ model.tok_emb.weight.T


def scheme_model(name: str, seed: int = 0, **overrides) -> Transformer:
    """The preset ``NAME-tiny`` (its recipe: sinusoidal positions, √d embedding scale, fairseq init) at
    a small vocabulary, every parameter then made non-trivial, in float64."""
    torch.manual_seed(seed)
    cfg = preset(f"{name}-tiny", vocab_size=97, max_seq_len=48, **overrides)
    model = Transformer(cfg).eval()
    randomize(model, seed)
    return model.double()


def logits(model: Transformer, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(idx)


def check_against_reference(model: Transformer) -> torch.Tensor:
    idx = torch.randint(0, model.cfg.vocab_size, (2, 11), generator=torch.Generator().manual_seed(1))
    got = logits(model, idx)
    with torch.no_grad():
        torch.testing.assert_close(got, reference_forward(model, idx), rtol=1e-9, atol=1e-9)
    return got


# --- Peri-LN ---------------------------------------------------------------------------------------------


def test_periln_is_sandwich_under_the_papers_name():
    assert ARCHITECTURES["periln"] == ARCHITECTURES["sandwich"]
    for size in ("tiny", "small", "125M"):
        for objective in ("clm", "mlm"):
            periln = preset(f"periln-{size}", objective=objective)
            assert periln == preset(f"sandwich-{size}", objective=objective)
    assert preset("periln-tiny").architecture == "sandwich"  # one architecture, reported by its first name


def test_periln_embedding_norm_ends_up_as_the_recipe_or_the_override_says():
    """The paper's optional initial embedding norm is ``embedding_norm``, a recipe field: the preset leaves
    it to the objective's recipe (applied after the architecture's fields, so an architecture could not
    set it anyway), and an explicit override wins over both."""
    assert preset("periln-tiny").embedding_norm is False  # fairseq's LM recipe
    assert preset("periln-tiny", objective="mlm").embedding_norm is True  # RoBERTa's recipe
    on = preset("periln-tiny", embedding_norm=True)
    assert on.embedding_norm is True and Transformer(on).emb_norm is not None
    assert Transformer(preset("periln-tiny")).emb_norm is None


def test_no_architecture_sets_a_recipe_field():
    """``preset`` applies the recipe after the architecture: a recipe field in an architecture would be
    silently overwritten, so none may hold one."""
    recipe_fields = {k for r in RECIPES.values() for k in r["model"]}
    assert {arch: sorted(set(flags) & recipe_fields) for arch, flags in ARCHITECTURES.items()} == {
        arch: [] for arch in ARCHITECTURES
    }


@pytest.mark.parametrize("embedding_norm", [False, True])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_periln_matches_the_papers_equation(embedding_norm, norm):
    model = scheme_model("periln", n_layer=3, norm=norm, embedding_norm=embedding_norm)
    check_against_reference(model)


# --- LayerNorm Scaling -----------------------------------------------------------------------------------


def test_ln_scaling_factor_is_one_over_sqrt_of_the_1_based_depth():
    model = Transformer(preset("lnscaling-small"))
    assert [b.ln_scale for b in model.blocks] == pytest.approx([1 / math.sqrt(ell) for ell in range(1, 13)])
    assert model.blocks[0].ln_scale == 1.0  # ℓ = 1: the first block is Pre-LN's
    assert all(b.ln_scale is None for b in Transformer(preset("prenorm-small")).blocks)


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("lnscaling", {}),
        ("lnscaling", {"norm": "rmsnorm", "qk_norm": True}),
        ("periln", {"ln_scaling": True}),  # the norm before each sub-layer scaled; the output norm not
        ("mixln", {"ln_scaling": True}),  # Mix-LN's Post-LN blocks have no norm before a sub-layer
    ],
)
def test_ln_scaling_matches_the_papers_equation(name, overrides):
    model = scheme_model(name, n_layer=4, **overrides)
    scaled = check_against_reference(model)
    model.cfg = model.cfg.replace(ln_scaling=False)  # the reference without the scaling differs
    idx = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (reference_forward(model, idx) - scaled).abs().max() > 1e-3


# --- Mix-LN ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fraction, n_layer, post",
    [
        (0.25, 2, 0),  # tiny: no Post-LN block, the model is Pre-LN
        (0.25, 8, 2),
        (0.25, 12, 3),  # the paper's 130M (its code: POST_NUM=3)
        (0.25, 24, 6),  # the paper's 250M/1B (POST_NUM=6)
        (0.3, 10, 3),  # 0.3 · 10 is 3.0000000000000004 in floating point
        (0.29, 100, 29),  # 0.29 · 100 is 28.999999999999996: the slack counts the 29 it says
        (0.26, 10, 2),  # floor, not round
        (1.0, 5, 5),
        (0.0, 12, 0),
    ],
)
def test_mix_ln_post_layers_are_the_floor_of_alpha_times_depth(fraction, n_layer, post):
    cfg = preset("mixln-tiny", n_layer=n_layer, mix_ln_fraction=fraction)
    assert cfg.post_ln_layers == post
    blocks = Transformer(cfg).blocks
    assert [b.norm_after_add for b in blocks] == [i < post for i in range(n_layer)]
    assert [b.norm_before for b in blocks] == [i >= post for i in range(n_layer)]
    assert cfg.final_norm  # Pre-LN's final norm after the last block, as the paper's LLaMA keeps


@pytest.mark.parametrize("n_layer", [4, 8, 12])
def test_mix_ln_matches_the_papers_equation_where_it_has_post_ln_blocks(n_layer):
    model = scheme_model("mixln", n_layer=n_layer)
    assert model.cfg.post_ln_layers == n_layer // 4 > 0
    mixed = check_against_reference(model)
    pre = scheme_model("prenorm", n_layer=n_layer)  # the same weights, every block Pre-LN
    pre.load_state_dict(model.state_dict())
    idx = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    assert (logits(pre, idx) - mixed).abs().max() > 1e-3


def test_mix_ln_at_two_layers_is_pre_ln():
    """floor(0.25 · 2) = 0: the preset ``mixln-tiny`` has no Post-LN block, its forward is Pre-LN's
    (docs/train.md says so; ``bakeoff --size tiny`` trains 6 layers, one Post-LN, and small 3 of 12)."""
    mix, pre = scheme_model("mixln"), scheme_model("prenorm")
    assert mix.cfg.post_ln_layers == 0 and preset("mixln-small").post_ln_layers == 3
    idx = torch.randint(0, 97, (2, 11))
    assert torch.equal(logits(mix, idx), logits(pre, idx))


# --- DyT -------------------------------------------------------------------------------------------------


def test_dyt_is_gamma_tanh_alpha_x_plus_beta():
    dyt = DynamicTanh(6, alpha_init=0.7)
    assert dyt.alpha.shape == (1,) and dyt.alpha.item() == pytest.approx(0.7)
    assert torch.equal(dyt.weight, torch.ones(6)) and torch.equal(dyt.bias, torch.zeros(6))
    randomize(dyt, seed=3)
    x = torch.randn(2, 5, 6) * 3
    a, g, b = dyt.alpha.item(), dyt.weight.detach(), dyt.bias.detach()
    torch.testing.assert_close(dyt(x), g * torch.tanh(a * x) + b)
    bare = DynamicTanh(6, alpha_init=0.5, affine=False)  # norm_affine=False: tanh(α·x), α still learned
    assert [n for n, _ in bare.named_parameters()] == ["alpha"] and bare.weight is None
    torch.testing.assert_close(bare(x), torch.tanh(0.5 * x))


@pytest.mark.parametrize("objective", ["clm", "mlm"])
def test_every_norm_of_a_dyt_model_is_dyt_with_its_alpha(objective):
    """The attention sub-layer's norms (its input norm, q/k norms, output norms) start at
    ``dyt_alpha_attn``; the FFN's, the embedding, final and MLM-head norms at ``dyt_alpha_other``;
    the model's initialisation leaves them there (γ 1, β 0)."""
    cfg = preset("dyt-tiny", objective=objective, qk_norm=True, scale_fc=True, dyt_alpha_attn=0.8)
    cfg = cfg.replace(dyt_alpha_other=0.2, norm_position="sandwich")
    model = Transformer(cfg)
    norms = {n: m for n, m in model.named_modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm, DynamicTanh))}
    assert norms and all(isinstance(m, DynamicTanh) for m in norms.values())
    attention = {n for n in norms if ".attn" in n}
    assert {n.split(".", 2)[-1] for n in attention} == {
        "attn_norm", "attn.q_head_norm", "attn.k_head_norm", "attn_post_norm",
    }  # fmt: skip
    for name, m in norms.items():
        alpha = 0.8 if name in attention else 0.2
        assert m.alpha.item() == pytest.approx(alpha), name
        assert torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any(), name
    others = {n.split(".")[-1] for n in norms if n not in attention}
    assert others == {"ffn_norm", "ffn_hidden_norm", "ffn_post_norm", "final_norm"} | (
        {"emb_norm", "mlm_norm"} if objective == "mlm" else set()
    )


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("dyt", {}),
        ("dyt", {"qk_norm": True, "dyt_alpha_attn": 0.8, "dyt_alpha_other": 0.2}),
        ("dyt", {"norm_affine": False}),
        ("periln", {"norm": "dyt"}),
        ("mixln", {"norm": "dyt", "n_layer": 4}),
    ],
)
def test_dyt_matches_the_papers_equation(name, overrides):
    model = scheme_model(name, **{"n_layer": 3, **overrides})
    assert not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in model.modules())
    check_against_reference(model)


def test_dyt_alpha_is_learned():
    model = scheme_model("dyt", qk_norm=True).float().train()
    idx = torch.randint(0, 97, (2, 11))
    model.loss(idx[:, :-1], idx[:, 1:]).backward()
    alphas = [m.alpha for m in model.modules() if isinstance(m, DynamicTanh)]
    assert alphas and all(a.grad is not None and a.grad.abs().item() > 0 for a in alphas)


@pytest.mark.parametrize("affine", [True, False])
def test_dyt_parameter_count(affine):
    """A DyT holds one α more than a LayerNorm (γ and β per channel, or nothing without affine)."""
    dyt, ln = preset("dyt-tiny", norm_affine=affine), preset("prenorm-tiny", norm_affine=affine)
    n_norms = sum(isinstance(m, DynamicTanh) for m in Transformer(dyt).modules())
    assert n_norms == 2 * dyt.n_layer + 1  # two per block and the final norm
    assert Transformer(dyt).num_params() - Transformer(ln).num_params() == n_norms
    for m in Transformer(dyt).modules():
        if isinstance(m, DynamicTanh):
            assert sum(p.numel() for p in m.parameters()) == dyt.norm_param_count(m.dim)
    nf = preset("normformer-tiny", normformer_norm="dyt")  # NormFormer's extra norms as DyT
    added = Transformer(nf).num_params() - Transformer(preset("prenorm-tiny")).num_params()
    assert nf.normformer_param_count() == added


# --- fairseq's initialisation, the KV cache --------------------------------------------------------------


@pytest.mark.parametrize("name", SCHEMES)
def test_fairseq_init_is_applied(name):
    """Each scheme's weights are drawn as fairseq's ``transformer_lm_gpt`` draws them (the statistics of
    test_init_recipe); the schemes add no draw, so the same seed gives Pre-LN's (sandwich's) weights."""
    shape = dict(n_layer=4, d_model=128, n_head=8, d_ffn=384, vocab_size=1000, max_seq_len=128)
    cfg = ModelConfig(**{**ARCHITECTURES[name], **shape}, positions="learned", init="fairseq")
    torch.manual_seed(0)
    model = Transformer(cfg)
    expected = expected_stats(cfg)
    for kind, t in weight_kinds(model).items():
        assert_stats(kind, t, *expected[kind])
    torch.manual_seed(0)
    base = Transformer(cfg.replace(norm="layernorm", ln_scaling=False, mix_ln_fraction=0.0))
    ours = model.state_dict()
    for key, value in base.state_dict().items():
        torch.testing.assert_close(ours[key], value, rtol=0, atol=0, msg=key)
    dyt = [m for m in model.modules() if isinstance(m, DynamicTanh)]
    assert bool(dyt) == (name == "dyt") and all(m.alpha.item() == 0.5 for m in dyt)


def small_scheme_cfg(name: str, **overrides) -> ModelConfig:
    fields = dict(vocab_size=97, n_layer=4, d_model=32, n_head=4, d_ffn=64, max_seq_len=48)
    return ModelConfig(**{**ARCHITECTURES[name], **fields, **overrides})


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("periln", {}),
        ("lnscaling", {"qk_norm": True}),
        ("mixln", {"mix_ln_fraction": 0.5, "ln_scaling": True}),  # 2 Post-LN blocks of 4
        ("dyt", {"qk_norm": True, "scale_heads": True}),
    ],
)
def test_kv_cache_equals_recompute(name, overrides):
    check_kv_cache_matches_recompute(small_scheme_cfg(name, **overrides))


# --- presets, names and refusals -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lnscaling", "mixln", "dyt"])
def test_presets_name_their_architecture(name):
    for size in ("tiny", "small", "125M"):
        assert preset(f"{name}-{size}").architecture == name
    assert preset("sandwich-tiny", ln_scaling=True).architecture == "sandwich+ln_scaling"
    assert preset("prenorm-tiny", mix_ln_fraction=0.5).architecture == "prenorm+mix_ln_fraction=0.5"
    assert preset("dyt-tiny", dyt_alpha_attn=0.8).architecture == "prenorm+norm=dyt+dyt_alpha_attn=0.8"


def test_fields_come_from_set_like_every_field():
    overrides = parse_set(["ln_scaling=true", "mix_ln_fraction=0.25", "norm=dyt", "dyt_alpha_attn=0.8"])
    assert overrides == {"ln_scaling": True, "mix_ln_fraction": 0.25, "norm": "dyt", "dyt_alpha_attn": 0.8}
    cfg = preset("prenorm-small", **overrides)
    assert (cfg.post_ln_layers, cfg.dyt_alpha_other) == (3, 0.5)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="mix_ln_fraction='a'"):
        parse_set(["mix_ln_fraction=a"])


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(mix_ln_fraction=1.5), r"mix_ln_fraction=1.5: expected a number in \[0, 1\]"),
        (dict(mix_ln_fraction=-0.1), "mix_ln_fraction=-0.1"),
        (dict(mix_ln_fraction=0.25, norm_position="sandwich"), "Mix-LN mixes Post-LN"),
        (dict(mix_ln_fraction=0.25, norm_position="post"), "norm_position='post'"),
        (dict(ln_scaling=True, norm_position="post"), "ln_scaling=True with norm_position='post'"),
        (dict(ln_scaling=True, norm_position="olmo2"), "before each sub-layer"),
        (dict(ln_scaling=True, norm_position="deepnorm"), "ln_scaling=True"),
        (dict(dyt_alpha_attn=0.8), "dyt_alpha_attn=0.8 without a DyT or Derf norm"),
        (dict(norm="dyt", dyt_alpha_other=0.0), "dyt_alpha_other=0.0: expected a positive number"),
        (dict(norm="dyt", dyt_alpha_attn=-1.0), "dyt_alpha_attn=-1.0"),
        (dict(norm="tanh"), "norm='tanh': expected one of"),
    ],
)
def test_refused_combinations_name_the_fields(fields, message):
    with pytest.raises(ConfigError, match=message):
        preset("prenorm-tiny", **fields)
    stored = {**preset("prenorm-tiny").to_dict(), **fields}
    with pytest.raises(ConfigError, match=message):  # a stored config (a checkpoint's) is refused too
        ModelConfig.from_dict(stored, source="config.json")


def test_dyt_alphas_shape_normformers_dyt_norms():
    cfg = preset("normformer-tiny", normformer_norm="dyt", dyt_alpha_attn=0.9, dyt_alpha_other=0.1)
    block = Transformer(cfg).blocks[0]
    assert isinstance(block.attn_norm, nn.LayerNorm)  # the placement's norms keep norm="layernorm"
    assert block.attn_out_norm.alpha.item() == pytest.approx(0.9)
    assert block.ffn_hidden_norm.alpha.item() == pytest.approx(0.1)


def trained_scheme(tmp_path, name: str, n_layer: int = 4) -> Checkpoint:
    """``nfeval train --preset NAME-tiny --set n_layer=N`` for 4 steps, its checkpoint loaded (through the
    meta-device skeleton): checks that it holds the weights the run saved, the preset's config and finite
    logits, and returns it."""
    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(300), encoding="utf-8")
    run = tmp_path / name
    cfg = tiny_train_config(str(corpus), preset=f"{name}-tiny", model={"n_layer": n_layer}, max_steps=4)
    summary = train(cfg, str(run))
    loaded = checkpoint.load(str(run))
    assert loaded.fingerprint == summary["fingerprint"]
    assert loaded.config == preset(f"{name}-tiny", vocab_size=loaded.config.vocab_size, n_layer=n_layer)
    with torch.no_grad():
        assert torch.isfinite(loaded.model(torch.randint(0, 300, (2, 16)))).all()
    return loaded


def test_each_scheme_trains_saves_and_loads(tmp_path):
    """Each scheme's run config holds its fields, its checkpoint loads to the weights it saved, and DyT's
    α was trained."""
    for name in SCHEMES:
        loaded = trained_scheme(tmp_path, name)
        assert loaded.config.post_ln_layers == (1 if name == "mixln" else 0)
        alphas = [m.alpha.item() for m in loaded.model.modules() if isinstance(m, DynamicTanh)]
        assert bool(alphas) == (name == "dyt") and all(a != 0.5 for a in alphas)
