"""Gradient norms by layer: against autograd and a chain-rule hand computation, across fairseq import,
and the training-time recorder on a small AdamW loop."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_fairseq_import import fairseq_config, to_fairseq

from nfeval.analysis.grads import grad_norms, relative_to_baseline
from nfeval.base.errors import ConfigError
from nfeval.base.jsonio import append_line
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.training.grad_stats import (
    GAIN_KINDS,
    GRAD_STATS,
    WEIGHT_KINDS,
    GradStatsRecorder,
    float32_text,
    read_grad_stats,
    row_line,
)
from nfeval.engine.training.train_config import clip_window, parse_grad_stats

ARCHS = ("postnorm", "prenorm", "normformer", "normformer-resscale")


def tiny(arch: str, n_layer: int = 2, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(preset(f"{arch}-tiny", n_layer=n_layer, vocab_size=128, max_seq_len=32))
    with torch.no_grad():  # gains away from 1 so that every kind has its own gradient
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, 128, (3, 17), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def test_grad_norms_equal_autograd_and_chain_rule_on_one_layer():
    model = tiny("normformer-resscale", n_layer=1)
    idx, targets = batch()
    block = model.blocks[0]
    captured = {}
    handle = block.fc2.register_forward_hook(
        lambda m, args, out: captured.update(h=args[0], out=out.register_hook(lambda g: captured.update(g=g)))
    )
    logits = model(idx)
    loss = F.cross_entropy(logits.reshape(-1, 128), targets.reshape(-1), reduction="sum") / targets.numel()
    params = {
        "qkv": block.attn.qkv.weight,
        "out_proj": block.attn.out_proj.weight,
        "fc1": block.fc1.weight,
        "fc2": block.fc2.weight,
        "attn_out_norm": block.attn_out_norm.weight,
        "ffn_hidden_norm": block.ffn_hidden_norm.weight,
        "head_gain": block.attn.head_gain,
        "resid_gain": block.resid_gain,
    }
    grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
    handle.remove()
    expected = {k: g.abs().mean().item() for k, g in grads.items() if k != "qkv"}
    expected.update(zip("qkv", (g.abs().mean().item() for g in grads["qkv"].chunk(3))))
    # fc2 by the chain rule: dL/dW = sum over tokens of (dL/d out) ⊗ (fc2 input)
    d = captured["g"].reshape(-1, captured["g"].shape[-1])
    fc2_by_hand = (d.t() @ captured["h"].reshape(-1, captured["h"].shape[-1])).abs().mean().item()

    got = grad_norms(model, idx, targets)
    assert set(got) == set(WEIGHT_KINDS) | set(GAIN_KINDS)
    for kind, value in expected.items():
        assert got[kind] == [pytest.approx(value, rel=1e-5)], kind
    assert got["fc2"][0] == pytest.approx(fc2_by_hand, rel=1e-4)
    assert all(p.grad is None for p in model.parameters())  # autograd.grad leaves .grad alone


@pytest.mark.parametrize("arch", ARCHS)
def test_fc2_value_is_mean_abs_grad_after_mean_reduced_backward(arch):
    model = tiny(arch)
    idx, targets = batch()
    got = grad_norms(model, idx, targets)
    model.loss(idx, targets).backward()
    assert got["fc2"] == pytest.approx(
        [b.fc2.weight.grad.abs().mean().item() for b in model.blocks], rel=1e-5
    )
    assert got["out_proj"] == pytest.approx(
        [b.attn.out_proj.weight.grad.abs().mean().item() for b in model.blocks], rel=1e-5
    )
    has_gains = model.cfg.scale_attn
    assert ("attn_out_norm" in got) == has_gains


@pytest.mark.parametrize("arch", ARCHS)
def test_grad_norms_same_after_fairseq_round_trip(tmp_path, arch):
    model = tiny(arch).eval()
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": to_fairseq(model), "cfg": {"model": fairseq_config(model.cfg)}}, path)
    imported = checkpoint.load(str(path)).model
    assert imported.cfg.architecture == model.cfg.architecture
    idx, targets = batch()
    ours, theirs = grad_norms(model, idx, targets), grad_norms(imported, idx, targets)
    assert ours.keys() == theirs.keys()
    for kind in ours:
        assert theirs[kind] == pytest.approx(ours[kind], rel=1e-6), kind


def test_figure7_ratio_is_over_the_baseline_mean():
    assert relative_to_baseline([1.0, 4.0], [1.0, 3.0]) == [0.5, 2.0]


def test_window_parsing_and_clipping():
    assert parse_grad_stats("950:1000") == (950, 1000)
    assert clip_window((950, 1000), 5000) == (950, 1000)
    assert clip_window((950, 1000), 980) == (950, 980)
    assert clip_window((950, 1000), 200) == (150, 200)  # wholly after the run: its last 51 updates
    assert clip_window((950, 1000), 20) == (1, 20)
    for bad in ("950", "a:b", "10:5", "0:3"):
        with pytest.raises(ConfigError, match="expected START:END"):
            parse_grad_stats(bad)
    from nfeval.engine.training.train_config import TrainConfig

    TrainConfig(max_steps=10, grad_stats="950:1000").validate()
    with pytest.raises(ConfigError, match="grad_stats='10:5'"):
        TrainConfig(max_steps=10, grad_stats="10:5").validate()


def test_recorder_in_a_training_loop(tmp_path):
    """A few AdamW updates; inside the window each line holds the mean |grad| of the mean-CE loss."""
    model = tiny("normformer")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    recorder = GradStatsRecorder(model, (2, 3), str(tmp_path))
    assert recorder.summary() == {"window": [2, 3], "updates": 0, "file": GRAD_STATS, "mean": {}}
    expected = {}
    for update in range(1, 5):
        idx, targets = batch(seed=update)
        model.loss(idx, targets).backward()  # mean token cross-entropy, no clipping
        expected[update] = [b.fc2.weight.grad.abs().mean().item() for b in model.blocks]
        recorder.record(update)
        opt.step()
        opt.zero_grad(set_to_none=True)
    rows = read_grad_stats(str(tmp_path / GRAD_STATS))
    assert [r["update"] for r in rows] == [2, 3]
    for r in rows:  # the float32 statistics read back exactly, not merely close
        assert r["values"]["fc2"] == expected[r["update"]]
        assert len(r["values"]["head_gain"]) == 2
    summary = recorder.summary()
    assert summary["window"] == [2, 3] and summary["updates"] == 2
    mean = [(a + b) / 2 for a, b in zip(expected[2], expected[3])]
    assert summary["mean"]["fc2"] == pytest.approx(mean, rel=1e-6)


def test_grad_stats_reader_keeps_newest_row_and_skips_a_partial_line(tmp_path):
    path = tmp_path / GRAD_STATS
    rows = [{"update": 1, "values": {"fc2": [1.0]}}, {"update": 1, "values": {"fc2": [2.0]}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"update": 2, "val')
    assert read_grad_stats(str(path)) == [{"update": 1, "values": {"fc2": [2.0]}}]


def test_float32_text_reads_back_as_the_same_float32_and_is_shorter_than_a_float64_repr():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=100_000, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = values[np.isfinite(values)].astype(np.float64)  # every exponent, subnormals included
    texts = [float32_text(v) for v in values]
    assert all(float(np.float32(json.loads(t))) == v for t, v in zip(texts, values))
    assert sum(map(len, texts)) < 0.7 * sum(len(repr(v)) for v in values)
    special = [float32_text(v) for v in (float("nan"), float("inf"), -float("inf"))]
    assert special == ["NaN", "Infinity", "-Infinity"]


def test_a_grad_stats_row_is_json_and_reads_back_as_recorded(tmp_path):
    values = {"fc2": [float(np.float32(v)) for v in (1e-3, 2.5e-7, 3.0)], "q": [float("nan")]}
    line = row_line(7, values)
    assert line.endswith("\n") and json.loads(line)["update"] == 7
    append_line(str(tmp_path / GRAD_STATS), line)
    (row,) = read_grad_stats(str(tmp_path / GRAD_STATS))
    assert row["values"]["fc2"] == values["fc2"] and math.isnan(row["values"]["q"][0])


def test_grads_result_keeps_same_named_models_apart_and_checks_the_baseline():
    from nfeval.analysis.grads import grads_result
    from nfeval.base.errors import DataError

    entries = [
        {"name": "nf", "info": {"architecture": "normformer"}, "values": {"fc2": [2.0, 4.0]}},
        {"name": "nf", "info": {"architecture": "prenorm"}, "values": {"fc2": [1.0, 3.0]}},
    ]
    result = grads_result(entries, "fc2", None)
    assert [m["name"] for m in result["models"]] == ["nf", "nf#2"] and result["baseline"] == "nf#2"
    assert result["models"][0]["relative"] == [1.0, 2.0]
    with pytest.raises(DataError, match="--baseline x: not one of"):
        grads_result(entries, "fc2", "x")
