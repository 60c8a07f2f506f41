"""Single-row decoding re-lays linear weights column-major and gives the model back as it was."""

from __future__ import annotations

import pytest
import torch
from test_generate import PROMPTS, default_init_model, greedy_by_recompute

from nfeval.engine import decode_layout
from nfeval.engine.generate import generate


def linears(model):
    """The widening linear layers, the ones re-laid: q/k/v and fc1."""
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.in_features < m.out_features]


@pytest.mark.parametrize("keep_bytes", [decode_layout.KEEP_BYTES, 0])  # kept aside / copied back
def test_one_row_decodes_column_major_and_the_model_comes_back_unchanged(monkeypatch, keep_bytes):
    monkeypatch.setattr(decode_layout, "KEEP_BYTES", keep_bytes)
    model = default_init_model(seed=4)
    params = {name: p for name, p in model.named_parameters()}
    before = {name: p.detach().clone() for name, p in params.items()}
    layouts = []
    encode = model.encode

    def spy(*args, **kwargs):
        layouts.append(all(lin.weight.t().is_contiguous() for lin in linears(model)))
        return encode(*args, **kwargs)

    monkeypatch.setattr(model, "encode", spy)
    got = generate(model, PROMPTS, max_new_tokens=40, batch_size=1)
    assert layouts and all(layouts) and len(linears(model)) == 2 * model.cfg.n_layer
    monkeypatch.undo()
    assert got == [greedy_by_recompute(model, p, 40) for p in PROMPTS]
    for name, p in model.named_parameters():
        assert p is params[name] and p.is_contiguous() and torch.equal(p, before[name]), name


def test_relays_only_few_fp32_cpu_rows_over_enough_tokens():
    model = default_init_model()
    assert decode_layout.relays(model, 1, decode_layout.MIN_TOKENS)
    assert decode_layout.relays(model, decode_layout.MAX_ROWS, 10_000)
    assert not decode_layout.relays(model, decode_layout.MAX_ROWS + 1, 10_000)
    assert not decode_layout.relays(model, 1, decode_layout.MIN_TOKENS - 1)
    assert not decode_layout.relays(model.to(torch.bfloat16), 1, 10_000)


def test_a_short_call_keeps_the_row_major_layout(monkeypatch):
    model = default_init_model()
    seen = []
    encode = model.encode
    first = linears(model)[0]

    def spy(*args, **kwargs):
        seen.append(first.weight.is_contiguous())
        return encode(*args, **kwargs)

    monkeypatch.setattr(model, "encode", spy)
    generate(model, PROMPTS[:1], max_new_tokens=4, batch_size=1)
    assert seen and all(seen)
