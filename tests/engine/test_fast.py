"""The speed layer at the edge: a plain backend never reaches it, and the fast one gives the same tokens
and scores."""

from __future__ import annotations

import pytest
import torch

from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.fast import cpu_linear, greedy_head, static_decode
from nfeval.engine.fast.speed import Fast, accelerate
from nfeval.engine.inference.backend import nfeval_backend
from nfeval.engine.inference.generate import Sampling
from nfeval.engine.inference.vocab_head import target_log_probs
from nfeval.model_adapters.backends import open_backend

CPU = torch.device("cpu")
PROMPTS = [[1, 5, 9, 2], [7, 7], [3, 8, 11, 4, 6, 2, 9], [12]]
SAMPLINGS = [Sampling(), Sampling(temperature=0.9, top_k=20, seed=3)]


def backend(path: str):
    """Returns the plain backend of the checkpoint at ``path`` (fp32, on the CPU)."""
    return nfeval_backend(checkpoint.read(path), CPU, torch.float32)


def scores(b) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (log-probs, not-greedy flags) of every next token of a fixed batch under backend ``b``."""
    vocab = b.ckpt.config.vocab_size
    idx = torch.randint(0, vocab, (8, 64), generator=torch.Generator().manual_seed(0))
    keep = torch.ones_like(idx, dtype=torch.bool)
    keep[:, -1] = False
    with torch.no_grad():
        features, projection = b.features_at(idx, keep)
    return target_log_probs(features, projection, torch.arange(len(features)), idx[:, 1:].reshape(-1))


def test_a_plain_backend_never_reaches_the_speed_layer(monkeypatch, tiny_clm_ckpt):
    def reached(*args, **kwargs):
        raise AssertionError("the plain path reached the speed layer")

    for name in ("linear", "takes_onednn", "packed_weights", "convert"):
        monkeypatch.setattr(cpu_linear, name, reached)
    monkeypatch.setattr(greedy_head, "greedy_head", reached)
    monkeypatch.setattr(static_decode.StaticDecoder, "__init__", reached)
    plain = backend(tiny_clm_ckpt)
    assert plain.speed.name == "plain" and plain.linear_kernel() == "torch"
    for sampling in SAMPLINGS:
        assert len(plain.generate(PROMPTS, 6, sampling, [], batch_size=2)) == len(PROMPTS)
    log_probs, _ = scores(plain)
    assert bool(torch.isfinite(log_probs).all())


def test_the_fast_path_gives_the_plain_paths_tokens_and_scores(tiny_clm_ckpt):
    plain, fast = backend(tiny_clm_ckpt), accelerate(backend(tiny_clm_ckpt))
    assert fast.speed.name == "fast" and fast.linear_kernel() == cpu_linear.describe()
    assert any(isinstance(m, cpu_linear.Linear) for m in fast.model.modules())
    for sampling in SAMPLINGS:
        want = plain.generate(PROMPTS, 12, sampling, [], batch_size=2)
        assert fast.generate(PROMPTS, 12, sampling, [], batch_size=2) == want
    (plain_lp, plain_flags), (fast_lp, fast_flags) = scores(plain), scores(fast)
    torch.testing.assert_close(fast_lp, plain_lp, atol=1e-5, rtol=0)
    assert torch.equal(fast_flags, plain_flags)


@pytest.mark.parametrize("speed", [Fast(static=True), Fast(greedy_screen=False)], ids=["static", "no-screen"])
def test_each_switch_keeps_the_tokens(tiny_clm_ckpt, speed):
    want = accelerate(backend(tiny_clm_ckpt)).generate(PROMPTS, 10, Sampling(), [], batch_size=4)
    assert (
        accelerate(backend(tiny_clm_ckpt), speed).generate(PROMPTS, 10, Sampling(), [], batch_size=4) == want
    )


def test_the_backends_nfeval_opens_are_fast(tiny_clm_ckpt):
    assert open_backend(tiny_clm_ckpt, CPU, torch.float32).speed.name == "fast"
