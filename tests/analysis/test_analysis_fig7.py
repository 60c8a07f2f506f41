"""Figure 7's normalisation (each layer's gradient over the baseline's mean of the same kind) and the
q/k/v split of the fused qkv weight, against hand-made gradients and the attention's own forward."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from test_analysis_grads import batch, tiny

from nfeval.analysis.grads import grad_norms, grads_result, relative_by_kind
from nfeval.engine.training.grad_stats import per_layer_mean_abs
from nfeval.pipelines.reproduce.gradient_experiment import depth_log_ratio, fig7_claims


def test_a_doubled_gradient_reads_two():
    model = tiny("prenorm", n_layer=3)
    idx, targets = batch()
    params = [p for p in model.parameters() if p.requires_grad]
    grads = dict(zip(map(id, params), torch.autograd.grad(model.loss(idx, targets), params)))
    base = per_layer_mean_abs(model, lambda p: grads[id(p)])
    doubled = per_layer_mean_abs(model, lambda p: 2 * grads[id(p)])
    flat = {k: [statistics.fmean(v)] * len(v) for k, v in base.items()}  # every layer at the mean
    for kind, ratios in relative_by_kind({k: [2 * x for x in v] for k, v in flat.items()}, base).items():
        assert ratios == pytest.approx([2.0] * 3), kind
    rel = relative_by_kind(doubled, base)
    for kind in ("q", "k", "v", "out_proj", "fc1", "fc2"):  # twice each layer's own share of the mean
        expected = [2 * v / statistics.fmean(base[kind]) for v in base[kind]]
        assert rel[kind] == pytest.approx(expected, rel=1e-6), kind
    result = grads_result(
        [
            {"name": "base", "info": {"architecture": "prenorm"}, "values": base},
            {"name": "twice", "info": {}, "values": doubled},
        ],
        "fc2",
        None,
    )
    twice = result["models"][1]
    assert statistics.fmean(twice["relative"]) == pytest.approx(2.0)
    assert all(statistics.fmean(v) == pytest.approx(2.0) for v in twice["relative_by_kind"].values())


def test_q_k_v_are_the_row_blocks_of_the_fused_weight():
    model = tiny("prenorm", n_layer=1)
    block = model.blocks[0]
    d = model.cfg.d_model
    hand = torch.cat([torch.full((d, d), 1.0), torch.full((d, d), 2.0), torch.full((d, d), -3.0)])
    values = per_layer_mean_abs(model, lambda p: hand if p is block.attn.qkv.weight else torch.zeros_like(p))
    assert (values["q"], values["k"], values["v"]) == ([1.0], [2.0], [3.0])
    # ...and the forward uses them in that order: with q = 0 every logit is 0, so k gets no gradient
    with torch.no_grad():
        block.attn.qkv.weight[:d].zero_()
        if block.attn.qkv.bias is not None:
            block.attn.qkv.bias[:d].zero_()
    got = grad_norms(model, *batch())
    assert got["k"] == [pytest.approx(0.0, abs=1e-12)] and got["q"][0] > 0 and got["v"][0] > 0


def test_fig7_claims_and_depth_ratio_by_hand():
    assert depth_log_ratio([math.e**2, math.e, 1.0]) == pytest.approx(2.0)  # log(first/last), fitted
    assert depth_log_ratio([1.0, 4.0, 2.0, 8.0]) < 0  # rising with depth
    layers = 4
    base = [{k: [1.0] * layers for k in ("q", "k", "v", "out_proj", "fc1", "fc2")} for _ in range(3)]
    nf = []
    for seed in range(3):
        up = 2.0 + 0.1 * seed
        values = {k: [0.5 - 0.01 * seed] * layers for k in ("q", "k", "v", "out_proj")}
        values |= {k: [1.0, 1.0, up, up] for k in ("fc1", "fc2")}  # later FC layers raised
        nf.append(values)
    claims = {c["claim"]: c for c in fig7_claims(base, nf)}
    fc2 = next(c for t, c in claims.items() if "later fc2" in t)
    assert fc2["verdict"] == "agrees" and fc2["mean"] == pytest.approx(
        statistics.fmean(math.log(2 + 0.1 * s) for s in range(3))
    )
    q = next(c for t, c in claims.items() if "lowers the q" in t)
    assert q["verdict"] == "agrees" and q["mean"] == pytest.approx(
        -statistics.fmean(math.log(0.5 - 0.01 * s) for s in range(3))
    )
    nf[0]["k"][2] = 3.0  # one layer above the baseline in one seed: "at every layer" no longer holds
    k = next(c for c in fig7_claims(base, nf) if "lowers the k" in c["claim"])
    assert k["verdict"] != "agrees"
