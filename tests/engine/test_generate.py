"""KV-cache decoding and batched generation against full recomputation (the model's own forward)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from nfeval.engine.inference.generate import Sampling, generate, left_pad, prefill_mask
from nfeval.engine.model.config import ModelConfig
from nfeval.engine.model.kv_cache import KVCache
from nfeval.engine.model.model import Transformer

HEAD_SCALES = {  # (scale_heads, head_scale_position, head_scale_transpose_bug)
    "off": (False, "after_out_proj", False),
    "after": (True, "after_out_proj", False),
    "before": (True, "before_out_proj", False),
    "after+bug": (True, "after_out_proj", True),
}
ARCH_COMBOS = list(
    itertools.product(("pre", "post"), (False, True), HEAD_SCALES, (False, True), ("learned", "sinusoidal"))
)


def make_model(norm="pre", normformer=True, heads="after", resids=False, positions="learned", seed=0):
    """A small random model whose every parameter (gains, norms, biases) is non-trivial."""
    scale_heads, placement, bug = HEAD_SCALES[heads]
    cfg = ModelConfig(
        vocab_size=97,
        n_layer=2,
        d_model=32,
        n_head=4,
        d_ffn=64,
        max_seq_len=48,
        norm_position=norm,
        scale_attn=normformer,
        scale_fc=normformer,
        scale_heads=scale_heads,
        head_scale_position=placement,
        head_scale_transpose_bug=bug,
        scale_resids=resids,
        positions=positions,
        scale_embedding=positions == "sinusoidal",
    )
    torch.manual_seed(seed)
    model = Transformer(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return model


def default_init_model(seed=5):
    """A NormFormer with the training init: its greedy rows differ from each other and do not repeat
    one token from the start, as the heavily randomized models' rows tend to."""
    torch.manual_seed(seed)
    return Transformer(make_model().cfg).eval()


def greedy_by_recompute(model, prompt, n, eos_id=None):
    """Greedy tokens, re-running the whole sequence for every new token (no cache)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            token = int(model(torch.tensor([ids]))[0, -1].argmax())
            if token == eos_id:
                break
            ids.append(token)
    return ids[len(prompt) :]


PROMPTS = [[5, 17, 3, 44, 9, 60, 2], [11, 12], [70, 1, 33, 8], [42]]


@pytest.mark.parametrize("norm,normformer,heads,resids,positions", ARCH_COMBOS)
def test_cached_logits_equal_recomputed_at_every_step(norm, normformer, heads, resids, positions):
    model = make_model(norm, normformer, heads, resids, positions)
    ids = torch.tensor([PROMPTS[0]])
    cache = KVCache(model.cfg, 1, 20)
    with torch.no_grad():
        logits = model(ids, cache=cache)[:, -1]
        for _ in range(12):
            torch.testing.assert_close(logits, model(ids)[:, -1], rtol=0, atol=1e-5)
            token = logits.argmax(-1, keepdim=True)
            ids = torch.cat([ids, token], dim=1)
            logits = model(token, cache=cache)[:, -1]
    assert cache.length == ids.shape[1]


@pytest.mark.parametrize("norm,normformer,heads,resids,positions", ARCH_COMBOS)
def test_greedy_with_cache_equals_recompute(norm, normformer, heads, resids, positions):
    model = make_model(norm, normformer, heads, resids, positions, seed=1)
    got = generate(model, PROMPTS, max_new_tokens=10, batch_size=4)
    assert got == [greedy_by_recompute(model, p, 10) for p in PROMPTS]


@pytest.mark.parametrize("heads", ["after", "before", "after+bug"])
def test_folded_head_scale_generates_the_same(heads):
    model = make_model(heads=heads, seed=2)
    want = generate(model, PROMPTS, max_new_tokens=8)
    model.fold_head_scale()
    assert generate(model, PROMPTS, max_new_tokens=8) == want


def test_chunked_prefill_after_cache_equals_full_forward():
    """Several new tokens after cached ones (the offset causal mask) give the full forward's logits."""
    model = make_model(positions="sinusoidal", seed=3)
    ids = torch.tensor([PROMPTS[0] + PROMPTS[2]])
    cache = KVCache(model.cfg, 1, 16)
    with torch.no_grad():
        first = model(ids[:, :4], cache=cache)
        rest = model(ids[:, 4:], cache=cache)
        torch.testing.assert_close(torch.cat([first, rest], 1), model(ids), rtol=0, atol=1e-5)


def test_a_float_step_mask_gives_the_bool_masks_hidden_states_bitwise():
    """Decoding steps pass the padding mask as the 0 / -inf floats SDPA adds to the scores (made once
    per batch): bitwise what SDPA makes of the bool mask at every call."""
    model = make_model(seed=6)
    ids, real, positions = left_pad(PROMPTS, 0, 3, "cpu")
    width = ids.shape[1]
    caches = [KVCache(model.cfg, len(PROMPTS), width + 3) for _ in range(2)]
    with torch.no_grad():
        for cache in caches:
            model.encode(
                ids, position_ids=positions[:, :width], attn_mask=prefill_mask(real, width), cache=cache
            )
        bias = torch.zeros(real.shape).masked_fill_(~real, -math.inf)
        step = torch.tensor([[3], [1], [4], [1]])
        masks = (real[:, None, None, : width + 1], bias[:, None, None, : width + 1])
        got = [
            model.encode(step, position_ids=positions[:, width : width + 1], attn_mask=m, cache=c)
            for m, c in zip(masks, caches)
        ]
    assert torch.equal(got[0], got[1])


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_batched_ragged_prompts_equal_one_at_a_time(batch_size):
    model = default_init_model(seed=4)
    alone = [generate(model, [p], max_new_tokens=12)[0] for p in PROMPTS]
    assert generate(model, PROMPTS, max_new_tokens=12, batch_size=batch_size) == alone
    assert alone == [greedy_by_recompute(model, p, 12) for p in PROMPTS]


def test_eos_ends_each_row_independently():
    model = default_init_model()
    full = [greedy_by_recompute(model, p, 12) for p in PROMPTS]
    eos = full[1][2]  # a token row 1 generates at step 3; other rows may or may not meet it
    got = generate(model, PROMPTS, max_new_tokens=12, eos_id=eos, batch_size=4)
    assert got == [row[: row.index(eos)] if eos in row else row for row in full]
    assert len(got[1]) <= 2 and any(len(r) == 12 for r in got)


def test_stop_strings_end_each_row_independently():
    model = default_init_model()
    full = [greedy_by_recompute(model, p, 12) for p in PROMPTS]
    decode = lambda ids: "".join(f"<{t}>" for t in ids)  # noqa: E731
    stop = f"<{full[2][4]}><{full[2][5]}>"  # spans two tokens
    got = generate(model, PROMPTS, max_new_tokens=12, stop=["never", stop], decode=decode, batch_size=4)
    for row, out in zip(full, got):  # each row ends with the token that completes the stop string
        end = next((k for k in range(1, len(row) + 1) if stop in decode(row[:k])), len(row))
        assert out == row[:end]
    assert len(got[2]) <= 6 and any(len(r) == 12 for r in got)


def test_sampling_is_reproducible_and_independent_of_batching():
    model = default_init_model(seed=7)
    s = Sampling(temperature=1.5, top_k=20, top_p=0.9, seed=123)
    a = generate(model, PROMPTS, max_new_tokens=10, sampling=s, batch_size=4)
    assert a == generate(model, PROMPTS, max_new_tokens=10, sampling=s, batch_size=1)
    b = generate(model, PROMPTS, max_new_tokens=10, sampling=Sampling(temperature=1.5, top_k=20, seed=124))
    assert a != b
    assert a != generate(model, PROMPTS, max_new_tokens=10)  # really sampled, not greedy


def test_temperature_zero_and_top_k_one_equal_greedy():
    model = make_model(seed=8)
    greedy = [greedy_by_recompute(model, p, 8) for p in PROMPTS]
    assert generate(model, PROMPTS, max_new_tokens=8, sampling=Sampling(temperature=0.0, seed=9)) == greedy
    assert generate(model, PROMPTS, max_new_tokens=8, sampling=Sampling(temperature=0.7, top_k=1)) == greedy


def test_bf16_cache_tracks_bf16_recompute():
    model = make_model(seed=9).to(torch.bfloat16)
    ids = torch.tensor([PROMPTS[0]])
    cache = KVCache(model.cfg, 1, 12, dtype=torch.bfloat16)
    with torch.no_grad():
        logits = model(ids, cache=cache)[:, -1]
        for _ in range(4):
            assert cache.layers[0].keys.dtype == torch.bfloat16
            torch.testing.assert_close(logits.float(), model(ids)[:, -1].float(), rtol=0.05, atol=0.1)
            token = logits.argmax(-1, keepdim=True)
            ids, logits = torch.cat([ids, token], 1), model(token, cache=cache)[:, -1]
    assert len(generate(model, PROMPTS, max_new_tokens=4)[0]) == 4


def test_bad_requests_fail_before_work():
    model = make_model()
    with pytest.raises(ValueError, match="context window"):
        generate(model, [[1] * 40], max_new_tokens=10)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate(model, [[1], []], max_new_tokens=2)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="max_seq_len"):
        KVCache(model.cfg, 1, 49)


def test_fp32_weights_generate_in_fp32(monkeypatch):
    """bf16 is never switched on behind the caller's back: the cache and weights keep the model's dtype."""
    import nfeval.engine.inference.generate as engine

    dtypes = []

    class SpyCache(KVCache):
        def __init__(self, cfg, batch_size, capacity, device=None, dtype=None):
            dtypes.append(dtype)
            super().__init__(cfg, batch_size, capacity, device, dtype)

    monkeypatch.setattr(engine, "KVCache", SpyCache)
    model = default_init_model()
    generate(model, PROMPTS, max_new_tokens=3, batch_size=2)
    assert dtypes == [torch.float32, torch.float32]
    assert {p.dtype for p in model.parameters()} == {torch.float32}
