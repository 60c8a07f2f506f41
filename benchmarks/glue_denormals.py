"""One GLUE point's training time with denormals flushed to zero and with IEEE denormals, alternating.

At a learning rate near divergence a point's attention saturates; its softmax rows and the last layer's
key and value gradients fall below fp32's smallest normal (1.2e-38), where x86 cores compute through
microcode assists. The nfeval executable and its ``--jobs`` workers flush them (``engine.fast.denormals``).
This times the same point (``glue_sweep.py``'s RTE subset, model and recipe; one thread; in process) in
ABBA order, flushing on and off, and reports each time, the ratio and the dev scores.

    OMP_NUM_THREADS=1 python benchmarks/glue_denormals.py --glue-dir ../shared/data/glue --lr 3e-3

Other options (``--train``, ``--layers``, ``--d-model``, ``--epochs``, ...) are ``glue_sweep.py``'s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import torch
from glue_sweep import DEFAULT_GLUE, prepare_task, run_nfeval
from glue_sweep import parse_args as sweep_args


def main(argv: list[str] | None = None) -> dict[bool, list[tuple[float, dict]]]:
    """Returns {flushing: [(seconds, {lr: (best, last dev metric)}) per round]}; prints them and the ratio."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--glue-dir", default=str(DEFAULT_GLUE))
    p.add_argument("--task", default="rte")
    p.add_argument("--lr", default="3e-3")
    p.add_argument("--rounds", type=int, default=2, help="ABBA pairs: flushing on, off, off, on, ...")
    args, sweep_argv = p.parse_known_args(argv)
    torch.set_num_threads(1)  # one thread: torch.set_flush_denormal switches the calling thread only
    sweep = sweep_args(
        ["--glue-dir", args.glue_dir, "--tasks", args.task, "--lrs", args.lr, "--jobs", "1", *sweep_argv]
    )
    glue_dir, _, ckpt_dir = prepare_task(args.task, sweep, tempfile.mkdtemp(prefix="glue-denormals-"))
    runs: dict[bool, list[tuple[float, dict]]] = {True: [], False: []}
    try:
        for r in range(args.rounds):
            for flush in (True, False) if r % 2 == 0 else (False, True):
                torch.set_flush_denormal(flush)
                seconds, scores = run_nfeval(ckpt_dir, glue_dir, args.task, sweep)
                runs[flush].append((seconds, scores))
                print(f"flush={flush}: {seconds:.1f} s, dev (best, last epoch) {scores}", flush=True)
    finally:
        torch.set_flush_denormal(False)
    on, off = (statistics.median(s for s, _ in runs[flush]) for flush in (True, False))
    print(f"median: flushed {on:.1f} s, IEEE denormals {off:.1f} s: {off / on:.2f}x")
    return runs


if __name__ == "__main__":
    main()
