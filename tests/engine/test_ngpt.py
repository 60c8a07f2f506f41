"""nGPT (Loshchilov, Hsieh, Sun & Ginsburg, "nGPT: Normalized Transformer with Representation Learning on
the Hypersphere", ICLR 2025) as ``norm_position="ngpt"`` of the one Block, against a reference written
here from the paper's equations in plain torch ops on the module's own weights, in float64:

    h_0 = Norm(√d·E[x] + P)                                       (the harness's positions; the paper: RoPE)
    q = Norm(h W_q) s_qk, k = Norm(h W_k) s_qk (per head), softmax scale √d_k           (normalised attention)
    h_A = Norm(ATTN(h)),  h <- Norm(h + |α_A| (h_A - h))                                   (block update)
    u = h W_u s_u, ν = h W_ν s_ν √d, h_M = Norm(W_o (u ⊙ act(ν)))                   (normalised MLP)
    h <- Norm(h + |α_M| (h_M - h))
    z = (E h) s_z                                                                          (logits)

each scaling stored at s_scale and used as s·(s_init/s_scale): α 0.05 and 1/√d, s_qk 1 and 1/√d, s_u and
s_ν 1 and 1, s_z 1 and 1/√d. Then the hypersphere itself, the KV cache, the counts, the weight
normalisation after each optimizer step, its recipe, training, resuming, saving and loading.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
import torch.nn.functional as F
from conftest import make_corpus, tiny_train_config
from test_norm_placements import check_kv_cache_matches_recompute, randomize
from test_norm_schemes import trained_scheme

from nfeval.analysis.stability import AttentionLogitProbe
from nfeval.base.errors import ConfigError
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.inference.backend import NFEvalBackend
from nfeval.engine.model.config import ARCHITECTURES, SIZES, ModelConfig, preset
from nfeval.engine.model.flops import FLOPS_PER_ELEMENT, TRAINING_PASSES, training_flops_breakdown
from nfeval.engine.model.model import Block, Transformer
from nfeval.engine.training import recipe
from nfeval.engine.training.train import train
from nfeval.engine.training.train_config import TrainConfig, leave_to_scheme, parse_set, training_recipe


def norm(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x / x.norm(dim=dim, keepdim=True)


def reference_block(block: Block, h: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """One nGPT block by the paper's equations (no biases, no norm layer)."""
    B, T, d = h.shape
    H, hd, f = cfg.n_head, cfg.head_dim, cfg.d_ffn
    w_q, w_k, w_v = block.attn.qkv.weight.split(d)
    s_qk = (block.attn.qk_scale.s_qk.weight * (1.0 / d**-0.5)).view(H, 1, hd)
    q, k, v = ((h @ w.T).view(B, T, H, hd).transpose(1, 2) for w in (w_q, w_k, w_v))
    q, k = norm(q) * s_qk, norm(k) * s_qk
    scores = (q @ k.transpose(-1, -2)) * math.sqrt(hd)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d)
    h_a = norm(y @ block.attn.out_proj.weight.T)
    alpha_a = (block.attn_update.alpha.weight * (0.05 / d**-0.5)).abs()
    h = norm(h + alpha_a * (h_a - h))
    a = h @ block.fc1.weight.T
    s_nu = block.ffn_scale.s_nu.weight * (1.0 / 1.0) * math.sqrt(d)
    act = {
        "gelu": F.gelu,
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "silu": lambda x: x * torch.sigmoid(x),
    }[cfg.activation]
    if cfg.ffn_glu:  # fc1's output is [ν, u]: ν through the activation, u multiplying it
        nu, u = a[..., :f] * s_nu, a[..., f:] * block.ffn_scale.s_u.weight
        hidden = act(nu) * u
    else:
        hidden = act(a * s_nu)
    h_m = norm(hidden @ block.fc2.weight.T)
    alpha_m = (block.ffn_update.alpha.weight * (0.05 / d**-0.5)).abs()
    return norm(h + alpha_m * (h_m - h))


def reference_forward(model: Transformer, idx: torch.Tensor) -> torch.Tensor:
    """Logits of an nGPT model: normalised embedding plus positions, the blocks, s_z-scaled tied head."""
    cfg = model.cfg
    E = model.tok_emb.weight
    h = norm(F.embedding(idx, E) * math.sqrt(cfg.d_model) + model.sin_pos[: idx.shape[1]])
    for block in model.blocks:
        h = reference_block(block, h, cfg)
    s_z = model.logit_scale.weight * (1.0 / cfg.d_model**-0.5)
    return (h @ E.T) * s_z


def ngpt_model(seed: int = 0, **overrides) -> Transformer:
    """``ngpt-tiny`` (fairseq's recipe) at a small vocabulary, every parameter made non-trivial (the
    matrices back on the hypersphere, as training keeps them), in float64."""
    torch.manual_seed(seed)
    cfg = preset("ngpt-tiny", vocab_size=97, max_seq_len=48, **{"n_layer": 3, **overrides})
    model = Transformer(cfg).eval()
    randomize(model, seed)
    model.double().normalize_weights()
    return model


IDX = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"ffn_glu": True},
        {"ffn_glu": True, "activation": "silu"},
        {"activation": "gelu_tanh", "n_head": 2},
    ],
    ids=["gelu", "geglu", "swiglu", "gelu-tanh-2-heads"],
)
def test_the_model_is_the_papers_equations(overrides):
    model = ngpt_model(**overrides)
    with torch.no_grad():
        torch.testing.assert_close(model(IDX), reference_forward(model, IDX), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("ffn_glu", [False, True])
def test_one_block_is_the_papers_equations(ffn_glu):
    model = ngpt_model(ffn_glu=ffn_glu)
    h = norm(torch.randn(2, 7, model.cfg.d_model, dtype=torch.float64))
    for block in model.blocks:
        with torch.no_grad():
            torch.testing.assert_close(block(h), reference_block(block, h, model.cfg), rtol=1e-9, atol=1e-9)


def test_hidden_states_stay_on_the_unit_hypersphere():
    model = ngpt_model()
    seen = []
    hooks = [b.register_forward_hook(lambda m, i, out: seen.append(out)) for b in model.blocks]
    with torch.no_grad():
        final = model.encode(IDX)
    for hook in hooks:
        hook.remove()
    assert len(seen) == model.cfg.n_layer and final is seen[-1]
    for h in seen:
        torch.testing.assert_close(h.norm(dim=-1), torch.ones(IDX.shape, dtype=torch.float64))


def test_init_follows_the_papers_parametrisation():
    torch.manual_seed(0)
    cfg = preset("ngpt-small", ffn_glu=True)
    model = Transformer(cfg)
    d, V = cfg.d_model, cfg.vocab_size
    block = model.blocks[0]
    for scaling, stored, used in [
        (block.attn_update.alpha, d**-0.5, 0.05),
        (block.ffn_update.alpha, d**-0.5, 0.05),
        (block.attn.qk_scale.s_qk, d**-0.5, 1.0),
        (block.ffn_scale.s_u, 1.0, 1.0),
        (block.ffn_scale.s_nu, 1.0, math.sqrt(d)),  # ν also times √d
        (model.logit_scale, d**-0.5, 1.0),
    ]:
        torch.testing.assert_close(scaling.weight, torch.full_like(scaling.weight, stored))
        torch.testing.assert_close(scaling.value(), torch.full_like(scaling.weight, used))
    assert model.logit_scale.weight.shape == (V,) and block.attn.qk_scale.s_qk.weight.shape == (d,)
    assert not [m for m in model.modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))]
    assert all(m.bias is None for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert_on_the_hypersphere(model)


def assert_on_the_hypersphere(model: Transformer) -> None:
    """The token embedding's rows (the zero padding row aside), q/k/v's and fc1's rows, out_proj's and
    fc2's columns: unit vectors along the embedding dimension."""
    ones = lambda n: torch.ones(n, dtype=model.tok_emb.weight.dtype)  # noqa: E731
    rows = model.tok_emb.weight.norm(dim=1)
    torch.testing.assert_close(rows[rows > 0], ones(int((rows > 0).sum())))
    assert (rows > 0).sum() >= model.cfg.vocab_size - 1
    for block in model.blocks:
        for w, dim in ((block.attn.qkv.weight, 1), (block.fc1.weight, 1)):
            torch.testing.assert_close(w.norm(dim=dim), ones(w.shape[0]))
        for w in (block.attn.out_proj.weight, block.fc2.weight):
            torch.testing.assert_close(w.norm(dim=0), ones(w.shape[1]))


def test_normalize_weights_is_a_no_op_for_the_other_schemes():
    model = Transformer(preset("prenorm-tiny"))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.normalize_weights()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("overrides", [{}, {"ffn_glu": True}])
def test_kv_cache_equals_recompute(overrides):
    cfg = preset("ngpt-tiny", vocab_size=97, n_layer=3, d_model=32, n_head=4, d_ffn=64, max_seq_len=48)
    check_kv_cache_matches_recompute(cfg.replace(**overrides), dtype=torch.float64)


@pytest.mark.parametrize("size", ["tiny", "small", "125M"])
@pytest.mark.parametrize("glu", [False, True])
def test_parameter_count(size, glu):
    """No biases, no norm layers; α_A, α_M and s_qk (d each), s_ν (and s_u) per FFN channel, s_z per token."""
    cfg = preset(f"ngpt-{size}", ffn_glu=glu)
    L, d, f, V = cfg.n_layer, cfg.d_model, cfg.d_ffn, cfg.vocab_size
    with torch.device("meta"):
        n = Transformer(cfg).num_params()
    assert n == V * d + L * (4 * d * d + (2 + glu) * d * f) + L * (3 * d + (1 + glu) * f) + V


@pytest.mark.parametrize("size", ["tiny", "small", "125M"])
@pytest.mark.parametrize("glu", [False, True])
def test_flops_are_its_ops(size, glu):
    """Pre-LN's count less its norms and biases and adds, plus nGPT's L2 norms, steps and scalings."""
    cfg, base = preset(f"ngpt-{size}", ffn_glu=glu), preset(f"prenorm-{size}", ffn_glu=glu)
    L, d, f, V, T = cfg.n_layer, cfg.d_model, cfg.d_ffn, cfg.vocab_size, 512
    flops, pre = training_flops_breakdown(cfg, T), training_flops_breakdown(base, T)
    e = FLOPS_PER_ELEMENT
    changed = {k: flops[k] for k in flops if flops[k] != pre[k]}
    assert changed == {
        "layer_norms": 0.0,
        "adds": 0.0,
        "hypersphere": TRAINING_PASSES * (3 * d * (1 + 6 * L) + 3 * 2 * L * d),
        "ngpt_scales": TRAINING_PASSES * e["multiply"] * (L * (2 * d + (1 + glu) * f) + V),
    }
    assert e["l2_norm"] == e["interpolate"] == 3


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(qk_norm=True), "qk_norm=True with norm_position='ngpt'"),
        (dict(scale_attn=True), "scale_attn=True with norm_position='ngpt'"),
        (dict(attn_gate="headwise"), "attn_gate='headwise' with norm_position='ngpt'"),
        (dict(final_norm=True), "final_norm=True with norm_position='ngpt'"),
        (dict(norm="rmsnorm"), "norm='rmsnorm' with norm_position='ngpt'"),
        (dict(objective="mlm"), "objective='mlm' with norm_position='ngpt'"),
        (dict(mix_ln_fraction=0.5), "mix_ln_fraction=0.5 with norm_position='ngpt'"),
        (dict(ln_scaling=True), "ln_scaling=True with norm_position='ngpt'"),
    ],
)
def test_refused_combinations_name_the_fields(fields, message):
    with pytest.raises(ConfigError, match=message):
        preset("ngpt-tiny", **fields)


def test_the_field_comes_from_set_and_names_the_preset():
    overrides = parse_set(["norm_position=ngpt"])
    cfg = preset("prenorm-small", **overrides)
    assert cfg == preset("ngpt-small") and ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.ngpt and cfg.final_norm is False
    for size in SIZES:
        assert preset(f"ngpt-{size}").architecture == "ngpt"
    assert preset("ngpt-tiny", ffn_glu=True).architecture == "ngpt+ffn_glu"
    assert ARCHITECTURES["ngpt"]["norm_position"] == "ngpt"


def test_the_recipe_has_no_weight_decay_and_no_warmup_unless_the_run_sets_them():
    ngpt = training_recipe(TrainConfig(preset="ngpt-tiny"), 256)
    assert (ngpt["weight_decay"], ngpt["warmup"]) == (0.0, 0.0)
    assert ngpt["scheme"] == {"weight_decay": 0.0, "warmup": 0.0}
    same = training_recipe(TrainConfig(preset="prenorm-tiny", model={"norm_position": "ngpt"}), 256)
    assert same == ngpt
    mine = training_recipe(TrainConfig(preset="ngpt-tiny", weight_decay=0.1), 256)
    assert (mine["weight_decay"], mine["warmup"], mine["scheme"]) == (0.1, 0.0, {"warmup": 0.0})
    pre = training_recipe(TrainConfig(preset="prenorm-tiny"), 256)
    assert (pre["weight_decay"], pre["warmup"], "scheme" in pre) == (0.01, 0.01, False)
    words = recipe.describe(recipe.of_train_config(TrainConfig(preset="ngpt-tiny")))
    assert "wd 0," in words and "no warm-up" in words and "the scheme's weight_decay 0, warmup 0" in words


def test_a_comparison_may_let_each_scheme_carry_its_recipe():
    """A caller that sets the shared recipe for every candidate leaves nGPT's fields to it
    (``leave_to_scheme``); ``check_same`` lets exactly those fields differ when asked, and returns the
    recipe no scheme changed."""
    shared = dict(warmup=0.05, weight_decay=0.01)
    pre = TrainConfig(preset="prenorm-tiny", **shared)
    ngpt = leave_to_scheme(TrainConfig(preset="ngpt-tiny", **shared))
    assert (ngpt.warmup, ngpt.weight_decay) == (None, None) and leave_to_scheme(pre) == pre
    recipes = {"ngpt": recipe.of_train_config(ngpt), "prenorm": recipe.of_train_config(pre)}
    with pytest.raises(ConfigError, match="optimizer.weight_decay: 0.0 vs 0.01"):
        recipe.check_same(recipes, "bakeoff")
    assert recipe.check_same(recipes, "bakeoff", schemes_may_differ=True) == recipes["prenorm"]
    other = recipe.of_train_config(TrainConfig(preset="prenorm-tiny", **{**shared, "eps": 1e-6}))
    with pytest.raises(ConfigError, match="optimizer.eps"):  # a difference no scheme declared
        recipe.check_same({**recipes, "eps": other}, "bakeoff", schemes_may_differ=True)


def test_the_stability_probe_reads_ngpts_attention_logits_at_its_scale():
    """``analyze stability``'s probe reports |q·k|·√d_k for nGPT (its softmax scale), not |q·k|/√d_k."""
    model = ngpt_model().float()  # the probe computes in float32
    probe = AttentionLogitProbe(model)
    with torch.no_grad():
        model(IDX)
    probe.remove()
    block, cfg = model.blocks[0], model.cfg
    h = norm(F.embedding(IDX, model.tok_emb.weight) * math.sqrt(cfg.d_model) + model.sin_pos[:11])
    with torch.no_grad():
        q, k, _ = block.attn.project_heads(h)
    causal = torch.ones(11, 11, dtype=torch.bool).tril()
    expected = ((q @ k.transpose(-1, -2)).abs() * causal).max() * math.sqrt(cfg.head_dim)
    assert probe.maxima[0] == pytest.approx(float(expected), rel=1e-5)


def run_ngpt(tmp_path, name: str, **changes) -> TrainConfig:
    corpus = tmp_path / "train.txt"
    if not corpus.exists():
        corpus.write_text(make_corpus(300), encoding="utf-8")
    cfg = tiny_train_config(str(corpus), preset="ngpt-tiny", lr=3e-3, **changes)
    train(cfg, str(tmp_path / name))
    return cfg


def test_training_keeps_the_weights_on_the_hypersphere_and_records_the_recipe(tmp_path):
    run_ngpt(tmp_path, "run", max_steps=4)
    loaded = checkpoint.load(str(tmp_path / "run"))
    torch.manual_seed(TrainConfig().seed)
    init = Transformer(loaded.config)
    assert not torch.equal(init.blocks[0].fc1.weight, loaded.model.blocks[0].fc1.weight)  # it trained
    assert_on_the_hypersphere(loaded.model)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (
        config["recipe"]["optimizer"]["weight_decay"] == 0.0 and config["recipe"]["schedule"]["warmup"] == 0
    )
    assert config["recipe"]["scheme"] == {"weight_decay": 0.0, "warmup": 0.0}
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in rows if r["kind"] == "train"][0]["lr"] == pytest.approx(3e-3)  # no warm-up


def test_a_killed_run_resumes_to_the_same_weights(tmp_path):
    cfg = run_ngpt(tmp_path, "full", max_steps=8, ckpt_interval=3)
    full = tmp_path / "full"
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    for name in ("complete.json", "model.safetensors"):  # as if killed after the step-6 checkpoint
        (resumed / name).unlink()
    summary = train(cfg, str(resumed), resume=True)
    assert summary["step"] == 8
    assert summary["fingerprint"] == checkpoint.load(str(full)).fingerprint


def test_trains_saves_and_loads_and_scores_with_its_own_head(tmp_path):
    """``nfeval train --preset ngpt-tiny``: the checkpoint loads to the weights it saved; the zero-shot
    scorer's vocabulary projection is the model's own s_z-scaled head."""
    loaded = trained_scheme(tmp_path, "ngpt", n_layer=3)
    assert loaded.config.architecture == "ngpt"
    idx = torch.randint(0, loaded.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    keep = torch.ones_like(idx, dtype=torch.bool)
    with torch.no_grad():
        features, projection = NFEvalBackend(loaded, torch.device("cpu")).features_at(idx, keep)
        torch.testing.assert_close(projection(features), loaded.model(idx)[keep])
