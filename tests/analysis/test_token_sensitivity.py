"""Token sensitivity at initialisation: the cosine across positions and the own-token change of a model's
last layer, and the flag for a stack blind to its input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nfeval.analysis.token_sensitivity import (
    TokenSensitivity,
    flagged,
    last_layer_states,
    position_cosine,
    sensitivity_at_init,
    token_batch,
    token_sensitivity,
)
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer


def batch(vocab: int = 97, seed: int = 0) -> torch.Tensor:
    stream = np.random.default_rng(seed).integers(0, vocab, size=4000).astype(np.uint16)
    return token_batch(stream, 3, 24, seed=seed)


def tiny(name: str = "prenorm", **overrides):
    return preset(f"{name}-tiny", vocab_size=97, max_seq_len=32, n_layer=4, **overrides)


def test_a_pre_ln_stack_is_not_flagged():
    result = sensitivity_at_init(tiny(), batch(), seed=1)
    assert result.position_cosine < 0.9 and result.own_token_change > 0.1, result
    assert not result.flagged
    assert result.text() == (
        f"prenorm: cosine across positions {result.position_cosine:.3f}, "
        f"own-token change {100 * result.own_token_change:.1f}%"
    )


def test_a_stack_that_ignores_its_input_is_flagged():
    """The last block's FFN writes a huge constant (fc2's bias) over a residual stream it then carries:
    every position's state is that constant, whatever the tokens."""
    torch.manual_seed(0)
    model = Transformer(tiny())
    with torch.no_grad():
        model.blocks[-1].fc2.bias.fill_(1e4)
    result = token_sensitivity(model, batch(), name="constant")
    assert result.position_cosine > 0.999 and result.own_token_change < 1e-3
    assert result.flagged
    assert result.text().endswith("— FLAGGED: the last layer barely depends on its input")


def test_either_number_alone_flags():
    assert flagged(0.95, 0.5) and flagged(0.2, 0.05)
    assert not flagged(0.9, 0.1)  # the limits themselves pass
    assert TokenSensitivity("x", 0.2, 0.05, 8).to_dict()["flagged"] is True


def test_the_numbers_are_reproducible_under_a_seed_and_leave_the_global_rng_alone():
    idx = batch()
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = sensitivity_at_init(tiny("hybridnorm"), idx, seed=2)
    assert torch.equal(torch.rand(3), before)
    b = sensitivity_at_init(tiny("hybridnorm"), idx, seed=2)
    assert a == b
    c = sensitivity_at_init(tiny("hybridnorm"), idx, seed=3)
    assert c.position_cosine != a.position_cosine


def test_position_cosine_is_the_mean_over_distinct_pairs():
    states = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # pairs: 0, 1/sqrt 2, 1/sqrt 2
    assert position_cosine(states) == pytest.approx(2**0.5 / 3)
    assert position_cosine(torch.ones(2, 5, 3)) == pytest.approx(1.0)


def test_the_states_are_read_before_the_final_norm():
    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    idx = batch()
    states = last_layer_states(model, idx)
    with torch.no_grad():
        torch.testing.assert_close(model.final_norm(states), model.encode(idx))
        assert not torch.allclose(states, model.encode(idx))


def test_a_replaced_token_changes_its_own_state_only_from_there_on():
    """A causal stack: the states before the replaced position are untouched, so the change at the
    position itself is what is measured (a replacement is never the original id)."""
    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    idx = batch()
    changed = idx.clone()
    changed[0, 10] = (changed[0, 10] + 5) % 97
    before, after = last_layer_states(model, idx), last_layer_states(model, changed)
    torch.testing.assert_close(before[0, :10], after[0, :10])
    assert not torch.allclose(before[0, 10], after[0, 10])
