"""Pre-LN's gradient mismatch by model shape: which depth × width shows the problem NormFormer fixes.

The paper's Figure 3 (Shleifer et al. 2021, §4): at the beginning of training, Pre-LN's early layers
get much larger gradients than its late ones. For each shape, architecture and seed this trains the
first ``--updates`` updates of a ``--schedule``-update run exactly as ``nfeval reproduce --scale
small`` trains its runs (``pipelines.scales.SCALES["small"]``: fairseq's recipe, batches of 4 × 128
tokens, a 2,048-token BPE, 5% warm-up then linear decay over the whole schedule; the run is stopped
after ``--updates`` of it, its LR schedule that of the full run), and reads fc2's per-layer mean
|∂L/∂W| (``engine.training.grad_stats.per_layer_mean_abs``, what ``--grad-stats`` records) at every
update. The cell is layer 0's value ÷ the last layer's, at update 1 and over updates 1..``--updates``
(each layer averaged over the window first, as the reproduce and bakeoff reports do), per seed and as
mean ± std over seeds.

    python benchmarks/grad_mismatch_by_shape.py --threads 1 \
        --train-data ../shared/data/corpus/train.txt --valid-data ../shared/data/corpus/valid.txt \
        --json benchmarks/grad_mismatch_by_shape.json
    python benchmarks/grad_mismatch_by_shape.py --render benchmarks/grad_mismatch_by_shape.json

Table: benchmarks/RESULTS.md, "Gradient mismatch by shape".
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from typing import Any

import torch

from nfeval.base.artifacts import atomic_write_text
from nfeval.engine.training.budget import lr_at
from nfeval.engine.training.grad_stats import per_layer_mean_abs
from nfeval.engine.training.train_config import TrainConfig
from nfeval.engine.training.trainer import Trainer
from nfeval.pipelines.scales import SCALES

SMALL = SCALES["small"]
SHAPES = "6x64,12x64,12x128,24x64,24x128,12x256"
ARCHS = ("prenorm", "normformer")
# One LR for both: Pre-LN's tuned best at the small scale (1e-2 in docs/reproduce_small and
# docs/bakeoff_small), inside NormFormer's flat best region there (6e-3 in the bakeoff, 2e-2 in reproduce)
LR = 1e-2


def shape(text: str) -> dict[str, int]:
    """Returns the ModelConfig sizes of ``LAYERSxWIDTH`` (head dim 32, at least one head; FFN 4 × width)."""
    layers, width = (int(x) for x in text.lower().split("x"))
    return {"n_layer": layers, "d_model": width, "n_head": max(1, width // 32), "d_ffn": 4 * width}


def config(arch: str, sizes: dict[str, int], seed: int, args: argparse.Namespace) -> TrainConfig:
    """Returns the TrainConfig of one run: the small scale's recipe and batches at ``sizes``, the
    ``--schedule``-update budget (which fixes the LR schedule)."""
    return TrainConfig(
        preset=f"{arch}-{SMALL.size}",
        model={**SMALL.model, **sizes},
        train_data=args.train_data,
        valid_data=args.valid_data,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        max_steps=args.schedule,
        lr=args.lr,
        warmup=args.warmup,
        seed=seed,
        progress=False,
        peak_flops=1.0,  # for the MFU column only, which nothing here reads: not measured
    )


def measure(cfg: TrainConfig, updates: int) -> dict[str, Any]:
    """Trains ``cfg``'s first ``updates`` updates (its LR schedule that of the whole budget); returns
    fc2's layer-0 ÷ last-layer ratio at update 1 and over updates 1..``updates``, the first and last
    updates' losses and the seconds per update."""
    with tempfile.TemporaryDirectory(prefix="nfeval-grad-mismatch-") as scratch:
        trainer = Trainer(cfg, scratch)
        fc2: list[list[float]] = []
        trainer.gradient_hooks.append(
            lambda t, step: fc2.append(per_layer_mean_abs(t.model, lambda p: p.grad)["fc2"])
        )
        losses, t0 = [], time.perf_counter()
        for step in range(updates):
            loss, _ = trainer.train_step(step, lr_at(cfg, step, trainer.total_steps))
            losses.append(float(loss))
            if not math.isfinite(losses[-1]):
                raise RuntimeError(f"{cfg.preset} {cfg.model}: loss {losses[-1]} at update {step + 1}")
        step_s = (time.perf_counter() - t0) / updates
    mean = [statistics.fmean(layer) for layer in zip(*fc2)]
    return {
        "update_1": fc2[0][0] / fc2[0][-1],
        f"updates_1_{updates}": mean[0] / mean[-1],
        "fc2_mean_by_layer": mean,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "lr_last": lr_at(cfg, updates - 1, trainer.total_steps),
        "step_s": step_s,
    }


def summarise(values: list[float]) -> dict[str, float]:
    """Returns mean, sample std (0 for one value), min and max of ``values``."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "min": min(values), "max": max(values)}


def cells(rows: list[dict[str, Any]], updates: int) -> list[dict[str, Any]]:
    """Returns one cell per (shape, arch): its per-seed ratios and their summaries, in ``rows``' order."""
    keys = ("update_1", f"updates_1_{updates}")
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        cell = out.setdefault((row["shape"], row["arch"]), {"shape": row["shape"], "arch": row["arch"]})
        cell.setdefault("seeds", []).append(row["seed"])
        for key in keys:
            cell.setdefault(key, {"per_seed": []})["per_seed"].append(row[key])
    for cell in out.values():
        for key in keys:
            cell[key].update(summarise(cell[key]["per_seed"]))
    return list(out.values())


def markdown(result: dict[str, Any]) -> str:
    """Returns the RESULTS.md table of ``result`` (``main``'s, or the JSON it wrote): one row per shape and
    architecture, each ratio as mean ± std over seeds [min, max], and the fastest seed's seconds per update
    (the least disturbed by other work on the machine)."""
    updates = result["settings"]["updates"]
    names = {"prenorm": "Pre-LN", "normformer": "NormFormer"}
    lines = [
        f"| layers × d | arch | seeds | update 1 | updates 1–{updates} | ms/update (fastest seed) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for cell in result["cells"]:
        step_ms = [
            r["step_s"] * 1e3
            for r in result["rows"]
            if (r["shape"], r["arch"]) == (cell["shape"], cell["arch"])
        ]
        ratios = [cell[key] for key in ("update_1", f"updates_1_{updates}")]
        text = [f"{c['mean']:.2f} ± {c['std']:.2f} [{c['min']:.2f}, {c['max']:.2f}]" for c in ratios]
        shape_text = cell["shape"].replace("x", " × ")
        row = [shape_text, names.get(cell["arch"], cell["arch"]), str(len(cell["seeds"])), *text]
        lines.append("| " + " | ".join([*row, f"{min(step_ms):.0f}"]) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=SHAPES, help=f"LAYERSxWIDTH,... (default {SHAPES})")
    p.add_argument("--archs", default=",".join(ARCHS))
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    p.add_argument("--train-data")
    p.add_argument("--valid-data")
    p.add_argument("--tokenizer", help="a tokenizer.json (default: train the BPE, cached)")
    p.add_argument("--vocab-size", type=int, default=SMALL.vocab_size)
    p.add_argument("--batch-size", type=int, default=SMALL.batch_size)
    p.add_argument("--seq-len", type=int, default=SMALL.seq_len)
    p.add_argument("--schedule", type=int, default=int(SMALL.budget["max_steps"]), help="the run's updates")
    p.add_argument("--updates", type=int, default=SMALL.fig3_window[1], help="updates trained and read")
    p.add_argument("--warmup", type=float, default=SMALL.warmup, help="TrainConfig.warmup (default 0.05)")
    p.add_argument("--lr", type=float, default=LR)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the settings, every run and the table here")
    p.add_argument(
        "--render", metavar="JSON", help="print the markdown table of a JSON this wrote; train nothing"
    )
    args = p.parse_args(argv)
    if not 1 <= args.updates <= args.schedule:
        p.error(f"--updates {args.updates}: expected 1 to --schedule ({args.schedule})")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs every seed over every shape and architecture, seed by seed; after each whole seed the JSON
    (if asked) holds every seed so far, so a stopped run still leaves a table of whole seeds."""
    args = parse_args(argv)
    if args.render:
        with open(args.render, encoding="utf-8") as f:
            result = json.load(f)
        print(markdown(result), end="")
        return result
    torch.set_num_threads(args.threads)
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "render")}
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python benchmarks/grad_mismatch_by_shape.py", *given])
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        for text in args.shapes.split(","):
            sizes = shape(text)
            for arch in args.archs.split(","):
                result = measure(config(arch, sizes, seed, args), args.updates)
                rows.append({"shape": text, **sizes, "arch": arch, "seed": seed, **result})
                print(
                    f"{text:>7} {arch:<10} seed {seed}  fc2 layer0/last  update 1: {result['update_1']:5.2f}"
                    f"  updates 1-{args.updates}: {result[f'updates_1_{args.updates}']:5.2f}"
                    f"  loss {result['loss_first']:.2f} -> {result['loss_last']:.2f}"
                    f"  {result['step_s'] * 1e3:6.1f} ms/update",
                    flush=True,
                )
        out = {"settings": settings, "command": command, "rows": rows, "cells": cells(rows, args.updates)}
        if args.json:
            atomic_write_text(args.json, json.dumps(out, indent=1) + "\n")
    print(markdown(out), end="")
    return out


if __name__ == "__main__":
    main()
