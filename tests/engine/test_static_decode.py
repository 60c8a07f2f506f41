"""Decoding with static shapes (``static_decode``, a GPU's CUDA-graph steps), run eagerly on the CPU:
the same tokens as the eager loop that drops finished rows, for every architecture, EOS, stop strings
and sampling; batches of one size share one decoder. The graph capture itself needs a GPU
(``benchmarks/gpu_check.py``'s ``generate_vs_hf``)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from test_generate import ARCH_COMBOS, PROMPTS, default_init_model, make_model

from nfeval.engine.fast.speed import Fast
from nfeval.engine.fast.static_decode import StaticDecoder
from nfeval.engine.inference.generate import Sampling, generate

RAGGED = PROMPTS * 2 + [[3, 1, 4, 1, 5, 9, 2, 6, 5]]


def both(model, prompts, **kwargs):
    """Returns (eager, static) generations of the same request."""
    return (
        generate(model, prompts, speed=Fast(static=False), **kwargs),
        generate(model, prompts, speed=Fast(static=True), **kwargs),
    )


@pytest.mark.parametrize("norm,normformer,heads,resids,positions", ARCH_COMBOS)
def test_static_steps_generate_what_the_eager_loop_does(norm, normformer, heads, resids, positions):
    model = make_model(norm, normformer, heads, resids, positions)
    for batch_size in (1, 3):
        eager, static = both(model, RAGGED, max_new_tokens=10, batch_size=batch_size)
        assert static == eager


def test_rows_end_at_eos_and_stop_strings_as_in_the_eager_loop():
    model = default_init_model()
    eager = generate(model, RAGGED, max_new_tokens=16, batch_size=4, speed=Fast(static=False))
    eos = eager[0][5]  # a token some row reaches mid-way: rows end at different steps
    eager, static = both(model, RAGGED, max_new_tokens=16, batch_size=4, eos_id=eos)
    assert static == eager
    assert len({len(row) for row in static}) > 1
    decode = lambda ids: " ".join(map(str, ids))  # noqa: E731
    stop = [decode(eager[1][2:4])]
    eager, static = both(model, RAGGED, max_new_tokens=16, batch_size=4, stop=stop, decode=decode)
    assert static == eager
    assert any(stop[0] in decode(row) and len(row) < 16 for row in static)


def test_sampling_with_static_steps_draws_the_eager_loops_samples():
    model = default_init_model()
    sampling = Sampling(temperature=0.9, top_k=30, top_p=0.95, seed=11)
    eager, static = both(model, RAGGED, max_new_tokens=12, batch_size=4, sampling=sampling, eos_id=7)
    assert static == eager
    assert static != generate(
        model, RAGGED, max_new_tokens=12, batch_size=4, speed=Fast(static=True)
    )  # it sampled


def test_batches_of_one_size_share_a_decoder(monkeypatch):
    made = []
    real_init = StaticDecoder.__init__

    def counting_init(self, model, batch_size, capacity, greedy):
        made.append((batch_size, capacity))
        real_init(self, model, batch_size, capacity, greedy)

    monkeypatch.setattr(StaticDecoder, "__init__", counting_init)
    generate(default_init_model(), RAGGED, max_new_tokens=6, batch_size=2, speed=Fast(static=True))
    longest = max(map(len, RAGGED))
    assert made == [(2, longest + 6), (1, longest + 6)]  # 9 prompts: four batches of 2 share one


def test_a_static_slot_write_leaves_the_other_slots_and_returns_every_slot():
    model = default_init_model()
    cache = StaticDecoder(model, 2, 5, greedy=True).cache
    layer = cache.layers[0]
    k = torch.randn(2, model.cfg.n_head, 1, model.cfg.head_dim)
    cache.write_at = torch.tensor([3])
    keys, values = layer.append(k, -k)
    assert keys.shape[2] == values.shape[2] == 5
    torch.testing.assert_close(keys[:, :, 3:4], k, rtol=0, atol=0)
    torch.testing.assert_close(values[:, :, 3:4], -k, rtol=0, atol=0)
    assert not keys[:, :, [0, 1, 2, 4]].any()  # zeroed by the decoder: no NaN under the mask


def test_a_failed_graph_capture_decodes_eagerly_with_a_warning(monkeypatch):
    """The capture's warm-up and captured steps run (here on the CPU, its streams stubbed), then the
    capture fails: the step's slot is restored, and decoding goes on eagerly to the same tokens."""

    class Stream:
        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def failing_graph(graph):  # here the step runs for real; a capture's errors surface at its end
        yield
        raise RuntimeError("operation not permitted when stream is capturing")

    real_init = StaticDecoder.__init__

    def graphed_init(self, *args):
        real_init(self, *args)
        self.graphed = True  # as on a GPU

    model = default_init_model()
    want = generate(model, RAGGED, max_new_tokens=8, batch_size=4, speed=Fast(static=False))
    monkeypatch.setattr(StaticDecoder, "__init__", graphed_init)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", object)
    monkeypatch.setattr(torch.cuda, "graph", failing_graph)
    with pytest.warns(RuntimeWarning, match="capture failed"):
        got = generate(model, RAGGED, max_new_tokens=8, batch_size=4, speed=Fast(static=True))
    assert got == want
