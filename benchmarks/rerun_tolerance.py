"""Re-run tolerance: how far one training config's final perplexity moves between runs and CPU kernels.

Trains one short config (default: Pre-LN 12 × 128, the ``small`` reproduce scale's recipe and batches,
a 300-update schedule, seed 1) as separate ``nfeval train`` processes, one after another, each under
one CPU linear kernel (``NFEVAL_CPU_LINEAR``: ``torch`` is torch's own ``F.linear``, MKL's sgemm;
``onednn`` is oneDNN's, ``engine.fast.cpu_linear``) and ``--threads`` threads. Prints each run's
final validation perplexity and weight fingerprint, whether the runs under one kernel are bit-identical
(same weights, same final losses), and |Δ log PPL| between the kernels.

    python benchmarks/rerun_tolerance.py --kernels torch,torch,onednn,onednn --threads 1 \
        --train-data ../shared/data/corpus/train.txt --valid-data ../shared/data/corpus/valid.txt \
        --json /tmp/rerun_tolerance.json

Figures: benchmarks/RESULTS.md, "Re-run tolerance".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from nfeval.base.jsonio import load_json, read_jsonl
from nfeval.engine.training.train_config import TrainConfig
from nfeval.engine.training.train_flags import to_flags
from nfeval.pipelines.scales import SCALES

SMALL = SCALES["small"]


def config(args: argparse.Namespace) -> TrainConfig:
    """Returns the run's TrainConfig: the small scale's recipe, batches and vocabulary, ``--steps`` updates
    (the schedule of a run that long), validation and checkpoint at the end only."""
    return TrainConfig(
        preset=f"{args.arch}-{SMALL.size}",
        model=dict(SMALL.model),
        train_data=args.train_data,
        valid_data=args.valid_data,
        vocab_size=SMALL.vocab_size,
        batch_size=SMALL.batch_size,
        seq_len=SMALL.seq_len,
        max_steps=args.steps,
        lr=args.lr,
        warmup=SMALL.warmup,
        log_interval=args.steps,
        eval_interval=0,
        eval_samples=SMALL.eval_samples,
        ckpt_interval=0,
        seed=args.seed,
        progress=False,
    )


def train_once(cfg: TrainConfig, kernel: str, threads: int, out: str) -> dict[str, Any]:
    """Trains ``cfg`` into ``out`` in a new ``nfeval train`` process under ``kernel``; returns its record."""
    env = {**os.environ, "NFEVAL_CPU_LINEAR": kernel, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "nfeval", "train", "--out", out, *to_flags(cfg)]
    t0 = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    wall_s = time.perf_counter() - t0
    meta = load_json(os.path.join(out, "config.json"))
    records, _ = read_jsonl(os.path.join(out, "metrics.jsonl"))
    train_rows = [row for _, row in records if "loss" in row]
    val_rows = [row for _, row in records if "val_loss" in row]
    return {
        "kernel": kernel,
        "kernel_recorded": meta["compute"]["hardware"]["cpu_linear_kernel"],
        "fingerprint": meta["fingerprint"],
        "final_train_loss": train_rows[-1]["loss"],
        "final_val_loss": val_rows[-1]["val_loss"],
        "final_val_ppl": val_rows[-1]["val_ppl"],
        "process_wall_s": wall_s,
        "libraries": meta["provenance"].get("libraries"),
    }


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Returns, per kernel, whether its runs are bit-identical (weights and final losses), and per pair of
    kernels |Δ log PPL| of their first runs (the validation loss is log PPL)."""
    by_kernel: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_kernel.setdefault(run["kernel"], []).append(run)
    keys = ("fingerprint", "final_train_loss", "final_val_loss")
    repeats = {
        kernel: all(r[k] == group[0][k] for r in group for k in keys)
        for kernel, group in by_kernel.items()
        if len(group) > 1
    }
    between = {
        f"{a}/{b}": abs(by_kernel[a][0]["final_val_loss"] - by_kernel[b][0]["final_val_loss"])
        for a, b in itertools.combinations(by_kernel, 2)
    }
    return {"bit_identical_repeats": repeats, "abs_delta_log_ppl": between}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", default="torch,torch,onednn,onednn", help="NFEVAL_CPU_LINEAR of each run")
    p.add_argument("--arch", default="prenorm")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=1e-2, help="default: Pre-LN's tuned LR at the small scale")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--train-data")
    p.add_argument("--valid-data")
    p.add_argument("--json", help="also write every run and the comparison here")
    args = p.parse_args(argv)
    cfg, runs = config(args), []
    with tempfile.TemporaryDirectory(prefix="nfeval-rerun-") as tmp:
        for i, kernel in enumerate(args.kernels.split(",")):
            run = train_once(cfg, kernel, args.threads, os.path.join(tmp, f"run{i}-{kernel}"))
            runs.append(run)
            print(
                f"run {i}: NFEVAL_CPU_LINEAR={kernel:<6} ({run['kernel_recorded']})  final val PPL "
                f"{run['final_val_ppl']:.4f}  val loss {run['final_val_loss']!r}  train loss "
                f"{run['final_train_loss']!r}  weights {run['fingerprint'][:16]}",
                flush=True,
            )
    result = {"settings": vars(args), "train_flags": to_flags(cfg), "runs": runs, **compare(runs)}
    for kernel, same in result["bit_identical_repeats"].items():
        print(f"{kernel}: repeated runs bit-identical (weights, final losses): {same}")
    for pair, delta in result["abs_delta_log_ppl"].items():
        print(f"|Δ log PPL| {pair}: {delta:.3e}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return result


if __name__ == "__main__":
    main()
