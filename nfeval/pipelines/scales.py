"""The scales every pipeline trains at: model size, batch, recipe, per-run budget, the LR tune's grid
and budget, the paired step-time ratio's timing, the stability test and the gradient windows, one
``Scale`` per name. ``nfeval reproduce --scale NAME`` runs the paper's experiments at one; ``nfeval
bakeoff --size NAME`` trains its candidates under one; ``SCALE_TRAIN_FIELDS`` are the fields every run's
TrainConfig takes from its scale as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Scale:
    """Model size, batch, recipe and per-run budget of one ``--scale`` (reproduce) or ``--size`` (bakeoff)."""

    name: str
    size: str  # the preset size (engine.model.config.SIZES)
    budget: dict[str, float]  # TrainConfig budget fields of every run (max_seconds, max_steps, ...)
    seeds: int  # default --seeds
    seq_len: int = 128
    batch_size: int = 16
    grad_accum: int = 1
    lr: float = 3e-3
    warmup: float = 0.05  # a fraction of the run (TrainConfig.warmup semantics)
    vocab_size: int = 2048
    log_interval: int = 25
    eval_interval: int = 100
    eval_samples: int = 128
    ckpt_interval: int = 200
    calibration_steps: int = 10  # steps timed to fix a time budget's step count (not part of the budget)
    cloze_items: int = 500
    zeroshot_limit: int | None = 500
    glue_epochs: int = 3
    glue_seeds: int = 3  # fine-tuning seeds at every GLUE point (Table 3)
    glue_lrs: tuple[float, ...] | None = None  # None: reproduce.eval_experiments' grid for the size
    stability_updates: int = 200  # updates of the rising-LR stability test (Figure 5) ...
    stability_batch: tuple[int, int] = (8, 128)  # ... on batches of (sequences, tokens)
    tune_lrs: tuple[float, ...] = (1e-3, 3e-3, 6e-3, 1e-2)  # the LR grid of the tune (nfeval tune --lrs)
    tune_budget: str = "steps=300"  # the tune's budget per point (nfeval tune --budget)
    # the paired step-time ratio of each run to its baseline (engine.training.step_ratio.measure_step_ratio)
    ratio_pairs: int = 20
    ratio_burst: int = 3  # steps of each run per burst
    ratio_warmup: int = 3  # untimed steps of each before the first pair
    # ModelConfig overrides of every run, on top of the preset, which brings the objective's recipe
    # (engine.model.config.RECIPES: fairseq's LM recipe, RoBERTa's for masked LMs), so no scale can lose it.
    # A window longer than the training blocks: zero-shot items longer than them still fit.
    model: dict[str, Any] = field(default_factory=lambda: {"max_seq_len": 1024})
    dtype: str = "fp32"
    needs_gpu: bool = False
    # torch CPU threads (None: torch's default). Tiny models run fastest on one thread, by far on a
    # busy machine (measured 0.17 s vs 1.3 s a step at 2 threads with the machine's load at 6).
    threads: int | None = None
    # Figures 3 and 7: every run records per-layer gradients over these updates (TrainConfig.grad_stats),
    # from the first (init) through Figure 3's window (the beginning of training) and Figure 7's.
    grad_stats: str | None = "1:1000"
    fig3_window: tuple[int, int] = (1, 100)
    # Figure 7's window as updates past the end of warm-up, the same update numbers for every run
    # (reproduce.fig7_window): the paper's 950–1000 are 200–250 past fairseq's 750-update warm-up, LR at peak
    fig7_after_warmup: tuple[int, int] = (200, 250)


SCALES: dict[str, Scale] = {
    # test-only: seconds per experiment; never a result
    "smoke": Scale(
        "smoke",
        "tiny",
        budget={"max_steps": 8},
        seeds=2,
        threads=1,
        seq_len=16,
        batch_size=2,
        vocab_size=300,
        log_interval=2,
        eval_interval=4,
        eval_samples=4,
        ckpt_interval=4,
        cloze_items=8,
        zeroshot_limit=2,
        glue_epochs=1,
        glue_lrs=(1e-3, 3e-3),
        stability_updates=6,
        stability_batch=(2, 16),
        tune_lrs=(1e-3, 3e-3),
        tune_budget="steps=4",
        ratio_pairs=4,
        ratio_burst=1,
        ratio_warmup=1,
        model={"max_seq_len": 256},
        grad_stats="1:8",
        fig3_window=(1, 4),
        fig7_after_warmup=(1, 2),
    ),
    # 6 layers of the tiny width (d 64): the depth claims of Figures 3 and 7 need more than a first and a
    # last layer. On the embedded corpus; minutes per run on one CPU thread. Pre-LN's gradient mismatch
    # is weak at this shape (layer-0 ÷ last fc2 gradient over updates 1-100: 1.42 in docs/bakeoff_tiny;
    # benchmarks/RESULTS.md, "Gradient mismatch by shape").
    # Before the runs: the LR tune (each preset × 7 LRs × 1000 steps) and the paired step ratios.
    "tiny": Scale(
        "tiny",
        "tiny",
        budget={"max_steps": 1000},
        seeds=5,
        threads=1,
        model={"max_seq_len": 1024, "n_layer": 6},
        # small batches: more updates per second, which is what a CPU can buy
        batch_size=4,
        eval_interval=50,
        eval_samples=64,
        calibration_steps=5,
        # a grid that brackets every preset's best LR, each point trained for a baseline run's whole
        # budget: a short tune favours high LRs a full run cannot keep
        tune_lrs=(3e-4, 1e-3, 3e-3, 6e-3, 1e-2, 2e-2, 4e-2),
        tune_budget="steps=1000",
        glue_epochs=1,
        stability_updates=100,
        stability_batch=(4, 64),
        # Figure 7 at the paper's phase: 51 updates (as 950–1000) right after warm-up, LR 95–100% of peak
        fig7_after_warmup=(1, 51),
    ),
    # 12 layers × d 128 (4 heads, FFN 512): Pre-LN's layer-0 ÷ last fc2 gradient over updates 1-100 is
    # 1.77 here, against 1.51 at 6 × 64 and 2.17-2.18 at 24 layers (benchmarks/RESULTS.md,
    # "Gradient mismatch by shape"; the mismatch grows with depth, not width), at a step time that runs
    # `--only fig2-clm,fig3-5` at 5 seeds, the tune included, in about 1.5 hours on 2 cores with
    # `--jobs 2`. Meant for natural text (`--train-data`); the tune's grid reaches lower than tiny's:
    # a 12-layer Post-LN wants a smaller LR.
    "small": Scale(
        "small",
        "small",
        budget={"max_steps": 1000},
        seeds=5,
        threads=1,
        batch_size=4,
        eval_interval=50,
        eval_samples=64,
        calibration_steps=5,
        # a 12-layer Post-LN's best lies low, NormFormer's high (first report: 2e-2 on the old top edge)
        tune_lrs=(1e-4, 3e-4, 1e-3, 3e-3, 6e-3, 1e-2, 2e-2, 4e-2),
        tune_budget="steps=1000",
        glue_epochs=1,
        stability_updates=100,
        stability_batch=(4, 64),
        # Figure 7 at the paper's phase: 51 updates (as 950–1000) right after warm-up, LR 95–100% of peak
        fig7_after_warmup=(1, 51),
    ),
    # fairseq's 125M recipe (examples/normformer), one GPU or torchrun; a day per run on 8 GPUs
    "125M": Scale(
        "125M",
        "125M",
        budget={"max_seconds": 86400},
        seeds=1,
        seq_len=2048,
        batch_size=4,
        grad_accum=8,
        lr=3e-3,
        warmup=750,
        vocab_size=50304,
        log_interval=100,
        eval_interval=1000,
        eval_samples=512,
        ckpt_interval=5000,
        zeroshot_limit=None,
        glue_epochs=10,
        tune_lrs=(1e-3, 2e-3, 3e-3, 6e-3),
        tune_budget="steps=5000",
        model={"dropout": 0.1, "attn_dropout": 0.1},
        dtype="bf16",
        needs_gpu=True,
        fig3_window=(1, 1000),  # the paper's run: 750 warm-up updates of 572k
    ),
}


def _gpu_axis(name: str, size: str, model: dict[str, Any]) -> Scale:
    """Returns a CPU shape at the batch a GPU runs efficiently: 64 sequences of 256 tokens (16,384 tokens
    an update), bf16 autocast, the paper's recipe; several runs share one device (``--jobs``), since a
    model this small leaves most of a GPU idle. Its token budgets come from ``--token-budgets``."""
    return Scale(
        name,
        size,
        budget={"max_steps": 1250},  # 20M tokens: 15 tokens per parameter at 24 × 64
        seeds=5,
        seq_len=256,
        batch_size=64,
        eval_interval=100,
        eval_samples=64,
        ckpt_interval=250,
        calibration_steps=5,
        # a larger batch than the CPU recipe's 4 × 128 wants a larger LR; the band's neighbours (×√2)
        # follow a best on an edge
        tune_lrs=(1.5e-3, 3e-3, 6e-3),
        tune_budget="steps=1250",  # every tune point trains a whole run (the axis sets the steps)
        model={"max_seq_len": 1024, **model},
        dtype="bf16",
        stability_updates=100,
        stability_batch=(16, 256),
        grad_stats=None,  # the axis reads final perplexities; per-layer gradients would cost time and space
        fig7_after_warmup=(1, 51),
    )


# The budget axis on a GPU: 24 × 64, the cheapest shape the committed gradient-mismatch table
# puts at the top (Pre-LN's layer-0 ÷ last fc2 ratio 2.18; about 1.35M parameters with its 2,048-token
# BPE), and 12 × 128 beside it
SCALES["24x64-gpu"] = _gpu_axis("24x64-gpu", "tiny", {"n_layer": 24})
SCALES["12x128-gpu"] = _gpu_axis("12x128-gpu", "small", {})
PUBLIC_SCALES = ("tiny", "small", "125M", "24x64-gpu", "12x128-gpu")

# the Scale fields a run's TrainConfig takes as they are
SCALE_TRAIN_FIELDS = ("batch_size", "seq_len", "grad_accum", "lr", "log_interval", "eval_interval")
SCALE_TRAIN_FIELDS += ("eval_samples", "ckpt_interval", "calibration_steps", "dtype")
SCALE_TRAIN_FIELDS += ("grad_stats",)  # Figures 3 and 7 read what the runs record while they train
