"""fp32 linear products on this CPU: torch's ``F.linear`` (MKL) against ``nfeval.engine.fast.cpu_linear``
(oneDNN, with plain and with packed weights), forward at each row count and forward + backward.

Each weight shape of a decoder layer (default the 125M shape: q/k/v, out_proj, fc1, fc2) is held as
``--matrices`` distinct matrices that are multiplied in turn, so that the few-row products stream their
weights from memory as decoding does. Forward: for each row count, the fastest of ``--repeats`` passes
per kernel, as GFLOP/s and GB/s of weights read, and oneDNN's speed over MKL's. Training: forward and
backward (input and weight gradients) of one matrix at ``--train-rows`` rows, autograd through
``F.linear`` against ``cpu_linear.linear``. One thread by default. First checks that every kernel's
results equal ``F.linear``'s to fp32 rounding.

    python benchmarks/cpu_linear.py [--d-model 768] [--rows 1 2 4 16 64 512] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from nfeval.engine.fast import cpu_linear


def fastest(fn, repeats: int) -> float:
    """Returns the fastest of ``repeats`` timings of ``fn()`` after one untimed call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def forward_kernels(weights):
    """Returns {name: fn(x) running every (weight, bias) of ``weights`` in turn} for the three kernels."""
    packed = [(torch.ops.mkldnn._reorder_linear_weight(w), b) for w, b in weights]
    return {
        "MKL": lambda x: [F.linear(x, w, b) for w, b in weights],
        "oneDNN": lambda x: [cpu_linear._product(x, w, b) for w, b in weights],
        "oneDNN packed": lambda x: [cpu_linear._product(x, w, b) for w, b in packed],
    }


def check(weights, n_in: int) -> None:
    """Raises unless every kernel's product equals F.linear's to fp32 rounding."""
    x = torch.randn(16, n_in)
    want = F.linear(x, *weights[0])
    for name, run in forward_kernels(weights[:1]).items():
        got = run(x)[0]
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
            raise AssertionError(f"{name}: differs from F.linear by {float((got - want).abs().max()):.2e}")


def train_seconds(weight, bias, rows: int, use_engine: bool, repeats: int) -> float:
    """Returns the fastest forward + backward of one linear at ``rows`` rows."""
    x = torch.randn(rows, weight.shape[1], requires_grad=True)
    w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    grad = torch.randn(rows, weight.shape[0])
    product = cpu_linear.linear if use_engine else F.linear

    def step():
        x.grad = w.grad = b.grad = None
        product(x, w, b).backward(grad)

    return fastest(step, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 16, 64, 512])
    parser.add_argument("--train-rows", type=int, default=2048)
    parser.add_argument("--matrices", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ[cpu_linear.ENV] = "onednn"  # both kernels side by side, whatever ``auto`` picks here
    cpu_linear.choice.cache_clear()
    if cpu_linear.kernel() != "onednn":
        raise SystemExit("this torch has no oneDNN linear kernel here (not x86, or built without it)")
    torch.set_num_threads(args.threads)
    d = args.d_model
    shapes = {"q/k/v": (d, 3 * d), "out_proj": (d, d), "fc1": (d, 4 * d), "fc2": (4 * d, d)}
    print(f"{args.threads} thread(s), {args.matrices} matrices a shape in turn, fastest of {args.repeats}\n")
    print("| weight | in → out | rows | MKL GFLOP/s (GB/s) | oneDNN | oneDNN packed | packed / MKL |")
    print("|---|---|---:|---:|---:|---:|---:|")
    training = []
    for name, (n_in, n_out) in shapes.items():
        weights = [(torch.randn(n_out, n_in) * 0.02, torch.zeros(n_out)) for _ in range(args.matrices)]
        check(weights, n_in)
        kernels = forward_kernels(weights)
        for rows in args.rows:
            x = torch.randn(rows, n_in)
            seconds = {k: fastest(lambda run=run, x=x: run(x), args.repeats) for k, run in kernels.items()}
            flops, nbytes = 2 * rows * n_in * n_out * len(weights), 4 * n_in * n_out * len(weights)
            rate = {k: f"{flops / s / 1e9:.0f} ({nbytes / s / 1e9:.1f})" for k, s in seconds.items()}
            ratio = seconds["MKL"] / seconds["oneDNN packed"]
            cells = " | ".join(rate.values())
            print(f"| {name} | {n_in} → {n_out} | {rows} | {cells} | {ratio:.2f}x |", flush=True)
        w, b = weights[0]
        torch_s = train_seconds(w, b, args.train_rows, False, args.repeats)
        ours_s = train_seconds(w, b, args.train_rows, True, args.repeats)
        training.append((name, n_in, n_out, 6 * args.train_rows * n_in * n_out, torch_s, ours_s))
    print(f"\nForward + backward at {args.train_rows} rows (autograd):\n")
    print("| weight | in → out | MKL GFLOP/s | oneDNN GFLOP/s | oneDNN / MKL |")
    print("|---|---|---:|---:|---:|")
    for name, n_in, n_out, flops, torch_s, ours_s in training:
        speeds = f"{flops / torch_s / 1e9:.0f} | {flops / ours_s / 1e9:.0f} | {torch_s / ours_s:.2f}x"
        print(f"| {name} | {n_in} → {n_out} | {speeds} |")


if __name__ == "__main__":
    main()
