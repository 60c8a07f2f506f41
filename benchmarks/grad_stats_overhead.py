"""Overhead of ``GradStatsRecorder.record`` on a training step (the cost of ``--grad-stats``).

A training loop like ``nfeval train``'s (mean cross-entropy, backward, AdamW step) on a preset with
random tokens; every step is timed whole, and inside it the ``record`` call separately, so the
overhead is measured on the same steps (robust to a noisy machine). Half the steps lie inside the
window, half outside.

    python benchmarks/grad_stats_overhead.py --preset normformer-small --steps 16
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from nfeval.engine.fast.cpu_linear import convert
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.training.grad_stats import GradStatsRecorder


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="normformer-small")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="1: least disturbed by a busy machine")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = convert(Transformer(preset(args.preset)).train())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), weight_decay=0.01)
    half = args.steps // 2
    inside, outside = [], []
    with tempfile.TemporaryDirectory() as out_dir:
        recorder = GradStatsRecorder(model, (half + 1, args.steps), out_dir)
        for update in range(1, args.steps + 1):
            x = torch.randint(5, model.cfg.vocab_size, (args.batch_size, args.seq_len + 1))
            t0 = time.perf_counter()
            model.loss(x[:, :-1], x[:, 1:]).backward()
            t1 = time.perf_counter()
            recorder.record(update)
            t2 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t3 = time.perf_counter()
            if update > 2:  # the first steps allocate
                (inside if update > half else outside).append((t3 - t0, t2 - t1))
    step_out = statistics.median(s for s, _ in outside)
    step_in = statistics.median(s for s, _ in inside)
    record_in = statistics.median(r for _, r in inside)
    record_out = statistics.median(r for _, r in outside)
    print(
        json.dumps(
            {
                "preset": args.preset,
                "tokens_per_step": args.batch_size * args.seq_len,
                "threads": torch.get_num_threads(),
                "median_step_s_outside_window": step_out,
                "median_step_s_inside_window": step_in,
                "median_record_s_inside": record_in,
                "median_record_s_outside": record_out,
                "record_share_of_step_inside": record_in / step_in,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
