"""Benchmark for ``nfeval compare``: fidelity of the interpolated compute fraction, and speed.

Fidelity: two noise-free power-law loss curves L(C) = L_inf + A * C^-alpha (the candidate's A is
smaller), whose exact compute fraction to reach the baseline's final perplexity is known in closed
form, logged at validation intervals of 1–20% of training. Reports the interpolated fraction and its
error against the exact one (linear interpolation in perplexity between validation points).

Speed: parse + compare of two runs with many logged lines each.

    /work/venv/bin/python benchmarks/compare_bench.py
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time

from nfeval.report.compare import compare

L_INF, ALPHA, A_BASE, A_CAND, C_MAX = 2.0, 0.3, 40.0, 34.0, 1e18


def loss(a: float, c: float) -> float:
    return L_INF + a * c**-ALPHA


def write_run(root: str, name: str, a: float, n_val: int, n_train_per_val: int = 1) -> str:
    """Writes a run dir whose validation points are evenly spaced in compute (wall_s = FLOPs / 1e15)."""
    run = os.path.join(root, name)
    os.makedirs(run)
    lines = []
    n_steps = n_val * n_train_per_val
    for step in range(1, n_steps + 1):
        c = C_MAX * step / n_steps
        common = {"step": step, "tokens": step * 1000, "wall_s": c / 1e15, "flops": c}
        lines.append(
            json.dumps({"kind": "train", **common, "lr": 1e-3, "loss": loss(a, c), "grad_norm": 1.0})
        )
        if step % n_train_per_val == 0:
            lines.append(
                json.dumps({"kind": "val", **common, "val_loss": loss(a, c), "val_ppl": math.exp(loss(a, c))})
            )
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump({"compute": {"hardware": {"processor": "bench", "torch_threads": 1}}}, f)
    return run


def fidelity() -> None:
    exact = (A_CAND / (loss(A_BASE, C_MAX) - L_INF)) ** (1 / ALPHA) / C_MAX
    print(f"exact compute fraction: {exact:.6f}\n")
    print("| val interval (% of training) | interpolated fraction | abs. error | rel. error |")
    print("|---:|---:|---:|---:|")
    for pct in (1, 2, 5, 10, 20):
        with tempfile.TemporaryDirectory() as root:
            n_val = 100 // pct
            result = compare([write_run(root, "base", A_BASE, n_val), write_run(root, "cand", A_CAND, n_val)])
            got = result["runs"][1]["to_target"]["fraction"]["flops"]
            print(f"| {pct} | {got:.6f} | {got - exact:+.2e} | {(got - exact) / exact:+.3%} |")


def speed() -> None:
    print("\n| train lines per run | val lines per run | compare() wall time (s) |")
    print("|---:|---:|---:|")
    for n_val, per in ((100, 100), (1000, 100)):
        with tempfile.TemporaryDirectory() as root:
            runs = [write_run(root, name, a, n_val, per) for name, a in (("base", A_BASE), ("cand", A_CAND))]
            t0 = time.perf_counter()
            compare(runs)
            print(f"| {n_val * per} | {n_val} | {time.perf_counter() - t0:.2f} |")


if __name__ == "__main__":
    fidelity()
    speed()
