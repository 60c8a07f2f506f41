"""Few-row products by layout: why ``nfeval.engine.decode_layout`` re-lays widening weights column-major.

For each weight shape of a decoder layer (default the 125M shape: q/k/v, out_proj, fc1, fc2) and each
row count, ``F.linear`` over ``--matrices`` distinct matrices in turn (so no weight stays in cache), the
weight stored row-major ``(out, in)`` as ``nn.Linear`` keeps it, or column-major (``W.t()`` row-major,
GPT-2's ``Conv1D`` layout). Prints GB/s of weights read (the fastest of ``--repeats`` timings) and the
column-major / row-major speed ratio, one thread by default.

    python benchmarks/decode_layout_gemv.py [--d-model 768] [--rows 1 2 4 16]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def seconds_per_pass(weights, x, repeats: int) -> float:
    """Returns the fastest time of one pass of ``F.linear(x, w, b)`` over every (w, b) in ``weights``."""
    best = float("inf")
    for _ in range(repeats + 1):  # the first pass warms up
        t0 = time.perf_counter()
        for w, b in weights:
            F.linear(x, w, b)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 16])
    parser.add_argument("--matrices", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    d = args.d_model
    shapes = {"q/k/v": (d, 3 * d), "out_proj": (d, d), "fc1": (d, 4 * d), "fc2": (4 * d, d)}
    print("| rows | weight | in → out | row-major GB/s | column-major GB/s | column / row |")
    print("|---:|---|---|---:|---:|---:|")
    for name, (n_in, n_out) in shapes.items():
        rows_major = [(torch.randn(n_out, n_in) * 0.02, torch.zeros(n_out)) for _ in range(args.matrices)]
        col_major = [(w.t().contiguous().t(), b) for w, b in rows_major]
        gigabytes = args.matrices * n_in * n_out * 4 / 1e9
        for rows in args.rows:
            x = torch.randn(rows, n_in)
            row_s = seconds_per_pass(rows_major, x, args.repeats)
            col_s = seconds_per_pass(col_major, x, args.repeats)
            speeds = f"{gigabytes / row_s:.1f} | {gigabytes / col_s:.1f} | {row_s / col_s:.2f}"
            print(f"| {rows} | {name} | {n_in} → {n_out} | {speeds} |", flush=True)


if __name__ == "__main__":
    main()
