"""The zero-shot LM head alone against the machine's matmul peak, measured interleaved in one process.

Random fp32 features (N positions × d) and a GPT-2-sized output projection (50,259 × d). Each round
times, in turn: the projection's matmul alone over the whole vocabulary 64 positions at a time (what
the head ran before tiling, its exponentials and argmax excluded) and in tiles, and
``vocab_head.target_log_probs`` at each (ROW_CHUNK, VOCAB_TILE) asked for, each case right after a
square n×n matmul burst (the peak, as ``budget.measure_matmul_flops`` takes it). Prints the best
GFLOP/s of each over the rounds and its fraction of the best peak; first checks the head against
log_softmax + gather + argmax on the first positions.

    OMP_NUM_THREADS=1 python benchmarks/zeroshot_head.py [--positions 2048] [--d-model 256] [--rounds 3]
        [--tiles 1024x256 512x512 ...]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from nfeval.engine.fast.cpu_linear import linear
from nfeval.engine.inference import vocab_head

VOCAB = 50_259


def square_matmul(n: int):
    """Returns a function running 4 n×n fp32 matmuls, and its FLOPs."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return (lambda: [linear(a, b) for _ in range(4)]), 8.0 * n**3


def matmul_only(features, weight, rows: int, tile: int):
    """Returns a function running the projection's matmul alone, ``rows`` × ``tile`` logits at a time."""

    def run():
        out = torch.empty(rows, tile)
        for r in range(0, len(features), rows):
            for v in range(0, len(weight), tile):
                w = weight[v : v + tile]
                torch.mm(features[r : r + rows], w.T, out=out[: len(features[r : r + rows]), : len(w)])

    return run


def tiled_head(features, weight, at, target, rows: int, tile: int):
    """Returns a function running ``target_log_probs`` with ``rows`` × ``tile`` tiles."""

    def run():
        vocab_head.ROW_CHUNK, vocab_head.VOCAB_TILE = rows, tile
        return vocab_head.target_log_probs(features, vocab_head.VocabProjection(weight), at, target)

    return run


def check(features, weight, at, target) -> float:
    """Returns the largest |Δ log-prob| of the head against log_softmax on the first 256 positions;
    raises if a greedy flag differs."""
    keep = at < 256
    lp, wrong = vocab_head.target_log_probs(features, vocab_head.VocabProjection(weight), at, target)
    ref = F.linear(features[:256], weight).log_softmax(-1)
    want_wrong = (ref.argmax(-1)[at[keep]] != target[keep]).long()
    if not torch.equal(wrong[keep], want_wrong):
        raise AssertionError("greedy flags differ from argmax")
    return float((lp[keep] - ref[at[keep], target[keep]]).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--positions", type=int, default=2048)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peak-n", type=int, default=1024)
    parser.add_argument("--tiles", nargs="+", default=["1024x256", "512x512", "256x512", "1024x128"])
    args = parser.parse_args()
    torch.manual_seed(0)
    features, weight = torch.randn(args.positions, args.d_model), torch.randn(VOCAB, args.d_model) * 0.5
    at = torch.arange(args.positions)
    target = torch.randint(0, VOCAB, (args.positions,))
    target[::4] = F.linear(features[::4], weight).argmax(-1)  # greedy hits too
    head_flops = 2.0 * args.positions * VOCAB * args.d_model
    peak, peak_flops = square_matmul(args.peak_n)
    cases = {"matmul alone, 64 × whole vocabulary (the untiled head's matmul)": (
        matmul_only(features, weight, 64, VOCAB))}  # fmt: skip
    for spec in args.tiles:
        rows, tile = (int(x) for x in spec.split("x"))
        cases[f"matmul alone, {rows} × {tile} tiles"] = matmul_only(features, weight, rows, tile)
        head = tiled_head(features, weight, at, target, rows, tile)
        cases[f"target_log_probs, {rows} × {tile} tiles"] = head
    print(f"check: max |Δ log-prob| vs log_softmax {check(features, weight, at, target):.2e}, flags equal")
    best = dict.fromkeys(["peak", *cases], 0.0)
    for _ in range(args.rounds):
        for name, fn in cases.items():  # a peak burst before each case: both see the same load
            for key, run, flops in (("peak", peak, peak_flops), (name, fn, head_flops)):
                t0 = time.perf_counter()
                run()
                best[key] = max(best[key], flops / (time.perf_counter() - t0))
    threads = torch.get_num_threads()
    print(f"{threads} thread(s); peak ({args.peak_n}² matmul): {best['peak'] / 1e9:.1f} GFLOP/s")
    for name in cases:
        print(f"{best[name] / 1e9:7.1f} GFLOP/s {100 * best[name] / best['peak']:5.1f}%  {name}")


if __name__ == "__main__":
    main()
