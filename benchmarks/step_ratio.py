"""The paired NormFormer / Pre-LN step-time ratio at a ``nfeval reproduce`` scale, with its CI.

Builds both runs exactly as ``nfeval reproduce --scale SCALE`` trains them (its recipe, batch, sequence
length, threads; the built-in corpus and the scale's BPE vocabulary) and times them with
``nfeval.engine.training.step_ratio.measure_step_ratio``; prints one markdown row with the load average before
and after, since the paired design is meant to cancel it.

    python benchmarks/step_ratio.py --scale tiny [--objective clm] [--pairs 30] [--burst 3] [--clock wall]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch

from nfeval.base.artifacts import hardware, hardware_key
from nfeval.engine.training.step_ratio import measure_step_ratio
from nfeval.pipelines.reproduce.run_specs import Context, train_config
from nfeval.pipelines.scales import SCALES
from nfeval.pipelines.stages import shared_tokenizer


def measure(scale_name: str, objective: str, pairs: int, burst: int, warmup: int, clock: str | None) -> dict:
    """Returns the ratio record of ``{objective}-normformer`` to ``{objective}-prenorm`` at the scale,
    with the load averages around it and the machine."""
    scale = SCALES[scale_name]
    if scale.threads:
        torch.set_num_threads(scale.threads)
    with tempfile.TemporaryDirectory(prefix="step-ratio-") as out:
        ctx = Context(out=out, scale=scale, budget=dict(scale.budget), seeds=1, tokenizer="", progress=False)
        ctx.device = "cpu" if not torch.cuda.is_available() else "cuda"
        ctx.tokenizer = shared_tokenizer(out, scale.vocab_size)
        base = train_config(ctx, f"{objective}-prenorm", 1)
        cand = train_config(ctx, f"{objective}-normformer", 1)
        load_before = os.getloadavg()[0]
        r = measure_step_ratio(base, cand, pairs=pairs, burst=burst, warmup=warmup, clock=clock)
        load_after = os.getloadavg()[0]
    return {
        "r": r,
        "load": (load_before, load_after),
        "hw": hardware_key(hardware()),
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="tiny", choices=sorted(SCALES))
    p.add_argument("--objective", default="clm", choices=["clm", "mlm"])
    p.add_argument("--pairs", type=int, default=30)
    p.add_argument("--burst", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--clock", choices=["wall", "process_cpu"], help="default: the one reproduce uses")
    args = p.parse_args()
    m = measure(args.scale, args.objective, args.pairs, args.burst, args.warmup, args.clock)
    r = m["r"]
    print(
        "| scale | objective | ratio [CI] | overhead | pairs × burst | clock | Pre-LN ms/step "
        "| NormFormer ms/step | load avg before → after | hardware |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.scale} | {args.objective} | {r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] "
        f"({r.confidence:.1%}) | {r.ratio - 1:+.1%} | {r.pairs} × {r.burst} | {r.clock} | "
        f"{r.base_step_s * 1e3:.1f} | {r.cand_step_s * 1e3:.1f} | {m['load'][0]:.1f} → {m['load'][1]:.1f} | "
        f"{m['hw']}, {m['threads']} thread(s) |"
    )
    print("per-pair ratios:", " ".join(f"{x:.3f}" for x in r.per_pair))


if __name__ == "__main__":
    main()
