"""Training throughput, side by side: nfeval Pre-LN vs Hugging Face GPT2LMHeadModel of the same shape,
and NormFormer vs Pre-LN, in fp32 and bf16 autocast.

Every variant runs the same step (forward, summed cross-entropy, backward, fused AdamW) on the same
random batch. Rounds are interleaved (each round times every variant once) and the median over
rounds is reported, so load from other processes hits all variants alike.

    python benchmarks/train_throughput.py [--size small] [--batch 4] [--seq 128] [--steps 2] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

from nfeval.base.artifacts import hardware, hardware_key
from nfeval.engine.fast import cpu_linear
from nfeval.engine.interop.hf_gpt2 import gpt2_config
from nfeval.engine.model.config import preset
from nfeval.engine.model.flops import training_flops_per_token
from nfeval.engine.model.model import Transformer
from nfeval.engine.training.budget import measure_matmul_flops
from nfeval.engine.training.objective import Objective


def hf_gpt2(cfg) -> torch.nn.Module:
    """Returns a random-weight GPT2LMHeadModel with nfeval's shape (exact GELU, no dropout, SDPA)."""
    no_dropout = cfg.replace(dropout=0.0, attn_dropout=0.0)
    hf = gpt2_config(no_dropout, bos_token_id=None, eos_token_id=None)
    hf._attn_implementation = "sdpa"
    return GPT2LMHeadModel(hf)


class HFObjective(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        logits = self.model(input_ids=x).logits
        return F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")


def time_steps(obj, opt, x, y, dtype: str, steps: int) -> float:
    """Returns seconds per training step (after one untimed step)."""

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = obj(x, y)
        (loss / y.numel()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="small")
    p.add_argument(
        "--shape",
        default=None,
        help="LAYERSxD_MODELxHEADS overriding the preset's shape (FFN 4 d), e.g. 6x256x8: "
        "the 6-layer small of the figures before issue 43",
    )
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--dtypes",
        default=["fp32", "bf16"],
        type=lambda text: text.split(","),
        help="comma-separated; fp32 alone on a CPU without native bf16 (no avx512_bf16), where a bf16 "
        "step takes 20x an fp32 one",
    )
    return p.parse_args()


def measure(variants: dict, x, y, args) -> dict[tuple[str, str], list[float]]:
    """Returns the step times of every variant and dtype, measured in interleaved rounds."""
    optims = {
        k: torch.optim.AdamW(v.parameters(), lr=1e-4, betas=(0.9, 0.98), fused=True)
        for k, v in variants.items()
    }
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for dtype in args.dtypes:
            for name, obj in variants.items():
                times.setdefault((name, dtype), []).append(
                    time_steps(obj, optims[name], x, y, dtype, args.steps)
                )
    return times


def print_table(variants: dict, times: dict, prenorm, args) -> None:
    """Prints the machine, the shape and one row per dtype and model (medians, MFU, ratios)."""
    flops_per_token = training_flops_per_token(prenorm, args.seq)
    peaks = {
        d: measure_matmul_flops(torch.device("cpu"), torch.bfloat16 if d == "bf16" else torch.float32)
        for d in args.dtypes
    }
    n_params = {k: sum(p.numel() for p in v.parameters()) for k, v in variants.items()}
    tokens = args.batch * args.seq
    print(f"machine: {hardware_key(hardware())}; torch {torch.__version__}")
    print(
        f"shape: {args.size} (L={prenorm.n_layer}, d={prenorm.d_model}, ffn={prenorm.d_ffn}, "
        f"V={prenorm.vocab_size}), "
        f"batch {args.batch} x seq {args.seq}; {args.rounds} interleaved rounds x {args.steps} steps; median"
    )
    print(f"HF attention: {variants['HF GPT2LMHeadModel'].model.config._attn_implementation}")
    print("params: " + ", ".join(f"{k} {v / 1e6:.2f}M" for k, v in n_params.items()))
    print("matmul peak (measured): " + ", ".join(f"{d} {p / 1e9:.0f} GFLOP/s" for d, p in peaks.items()))
    print(f"cpu linear kernel: {cpu_linear.describe()}\n")
    print("| dtype | model | step ms | tokens/s | MFU | vs HF GPT-2 | vs nfeval Pre-LN |")
    print("|---|---|---|---|---|---|---|")
    for dtype in args.dtypes:
        med = {name: statistics.median(times[(name, dtype)]) for name in variants}
        for name in variants:
            tps = tokens / med[name]
            print(
                f"| {dtype} | {name} | {med[name] * 1e3:.1f} | {tps:,.0f} | "
                f"{tps * flops_per_token / peaks[dtype]:.1%} | "
                f"{med['HF GPT2LMHeadModel'] / med[name]:.3f}x speed | "
                f"{med[name] / med['nfeval Pre-LN'] - 1:+.1%} time |"
            )


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    prenorm, normformer = preset(f"prenorm-{args.size}"), preset(f"normformer-{args.size}")
    if args.shape:
        n_layer, d_model, n_head = (int(v) for v in args.shape.split("x"))
        shape = dict(n_layer=n_layer, d_model=d_model, n_head=n_head, d_ffn=4 * d_model)
        prenorm, normformer = replace(prenorm, **shape), replace(normformer, **shape)
    x = torch.randint(0, prenorm.vocab_size, (args.batch, args.seq))
    y = torch.randint(0, prenorm.vocab_size, (args.batch, args.seq))
    variants = {
        "nfeval Pre-LN": Objective(cpu_linear.convert(Transformer(prenorm))),
        "HF GPT2LMHeadModel": HFObjective(hf_gpt2(prenorm)),
        "nfeval NormFormer": Objective(cpu_linear.convert(Transformer(normformer))),
    }
    print_table(variants, measure(variants, x, y, args), prenorm, args)


if __name__ == "__main__":
    main()
