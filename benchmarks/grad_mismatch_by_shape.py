"""Pre-LN's gradient mismatch by model shape: which depth × width shows the problem NormFormer fixes.

For each shape, trains Pre-LN and NormFormer with ``nfeval train`` (fairseq's recipe, the given LR,
``--grad-stats`` on every update) for a short run and prints the fc2 gradient of layer 0 ÷ that of the
last layer (Shleifer et al. 2021, Figure 3: Pre-LN's early layers get much larger gradients than its
late ones), at update 1 and averaged over a window early in training, with the step time of each.
The ``small`` reproduce scale was chosen from this table (docs/reproduce_small/README.md).

    python benchmarks/grad_mismatch_by_shape.py --shapes 6x64,12x64,24x64,6x256,12x128 \
        --train-data ../shared/data/corpus/train.txt --valid-data ../shared/data/corpus/valid.txt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

import torch

from nfeval.engine.training.grad_stats import GRAD_STATS, read_grad_stats
from nfeval.engine.training.train import train
from nfeval.engine.training.train_config import TrainConfig


def shape(text: str) -> dict[str, int]:
    """Returns the ModelConfig sizes of ``LAYERSxWIDTH`` (head dim 32 or 16, FFN 4 × width)."""
    layers, width = (int(x) for x in text.lower().split("x"))
    return {"n_layer": layers, "d_model": width, "n_head": max(1, width // 32), "d_ffn": 4 * width}


def measure(arch: str, sizes: dict[str, int], args: argparse.Namespace, tokenizer: str | None, out: str):
    """Trains one short run; returns ({update or window: fc2 layer-0 ÷ last layer}, seconds per step)."""
    cfg = TrainConfig(
        preset=f"{arch}-tiny",
        model={**sizes, "max_seq_len": 1024},
        train_data=args.train_data,
        valid_data=args.valid_data,
        tokenizer=tokenizer,
        vocab_size=args.vocab_size,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        max_steps=args.steps,
        lr=args.lr,
        warmup=args.warmup,
        eval_interval=0,
        eval_samples=8,
        ckpt_interval=0,
        log_interval=args.steps,
        seed=args.seed,
        grad_stats=f"1:{args.steps}",
        progress=False,
    )
    summary = train(cfg, out)
    rows = read_grad_stats(os.path.join(out, GRAD_STATS))
    first = next(r for r in rows if r["update"] == 1)["values"]["fc2"]
    ratios = {"1": first[0] / first[-1]}
    for start, end in args.windows:
        window = [r["values"]["fc2"] for r in rows if start <= r["update"] <= end]
        mean = [statistics.fmean(layer) for layer in zip(*window)]
        ratios[f"{start}-{end}"] = mean[0] / mean[-1]
    return ratios, summary["wall_s"] / summary["step"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="6x64,12x64,24x64,6x256,12x128")
    p.add_argument("--train-data")
    p.add_argument("--valid-data")
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=float, default=50, help="warm-up steps (the small scale's 5%% of 1000)")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument(
        "--windows",
        type=lambda s: [tuple(int(x) for x in w.split(":")) for w in s.split(",")],
        default=[(63, 67), (1, 100)],
        help="update windows START:END,... to average over (the issue's 63:67 and the first 100)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="also write the table here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = None
        for text in args.shapes.split(","):
            sizes = shape(text)
            for arch in ("prenorm", "normformer"):
                out = os.path.join(tmp, f"{arch}-{text}")
                ratios, step_s = measure(arch, sizes, args, tokenizer, out)
                tokenizer = tokenizer or os.path.join(out, "tokenizer.json")  # one BPE for every run
                rows.append(
                    {"shape": text, **sizes, "arch": arch, "layer0_over_last": ratios, "step_s": step_s}
                )
                cells = "  ".join(f"updates {w}: {r:5.2f}" for w, r in ratios.items())
                print(
                    f"{text:>7} {arch:<10} fc2 layer0/last  {cells}   {step_s * 1e3:6.1f} ms/step", flush=True
                )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"settings": {k: v for k, v in vars(args).items() if k != "json"}, "rows": rows}, f)


if __name__ == "__main__":
    main()
