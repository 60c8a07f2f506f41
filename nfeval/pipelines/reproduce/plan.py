"""What ``nfeval reproduce`` runs, as data: the scales (sizes and budgets), the training runs, and the
experiments (one per table or figure of Shleifer, Weston & Ott 2021, plus Xiong et al. 2020), each
with the paper's finding in one line and the runs it reads.

Runs are shared between experiments: the Pre-LN and NormFormer causal LMs of Figure 2 are also the
baseline and the full model of Table 4 and the warm-up runs of the Xiong et al. check, so every run of
one output folder has the same budget and recipe, and differs from the others only where its row says.

Budgets are in steps (the same tokens for every run), and ``nfeval compare`` matches the runs at equal
FLOPs and at equal measured wall-clock afterwards. A time budget (``--minutes``) is the paper's protocol
but fixes each run's step count from a calibration of its step time: on a machine whose load changes
(a shared CPU) that gives runs of one comparison very different step counts, so it is opt-in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Scale:
    """Model size, batch, recipe and per-run budget of one ``--scale``."""

    name: str
    size: str  # the preset size (engine.config.SIZES)
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
    grad_batches: int = 4  # batches averaged by `nfeval analyze grads` (Figure 3)
    stability_updates: int = 200  # updates of the rising-LR stability test (Figure 5) ...
    stability_batch: tuple[int, int] = (8, 128)  # ... on batches of (sequences, tokens)
    tune_lrs: tuple[float, ...] = (1e-3, 3e-3, 6e-3, 1e-2)  # --tune's grid (nfeval tune --lrs)
    tune_budget: str = "steps=300"  # --tune's budget per point (nfeval tune --budget)
    # ModelConfig overrides of every run, on top of the preset, which brings the objective's recipe
    # (engine.config.RECIPES: fairseq's LM recipe, RoBERTa's for masked LMs), so no scale can lose it.
    # A window longer than the training blocks: zero-shot items longer than them still fit.
    model: dict[str, Any] = field(default_factory=lambda: {"max_seq_len": 1024})
    dtype: str = "fp32"
    needs_gpu: bool = False
    # torch CPU threads (None: torch's default). Tiny models run fastest on one thread, by far on a
    # busy machine (measured 0.17 s vs 1.3 s a step at 2 threads with the machine's load at 6).
    threads: int | None = None


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
        grad_batches=1,
        stability_updates=6,
        stability_batch=(2, 16),
        tune_lrs=(1e-3, 3e-3),
        tune_budget="steps=4",
        model={"max_seq_len": 256},
    ),
    # 11 runs x 3 seeds x 1000 steps (one thread: ~0.015 s a step on a quiet 2-core CPU, ~0.04 s on a
    # loaded one) + start-up, evaluation and analyses: ~15 min quiet, ~35 min on a busy machine
    "tiny": Scale(
        "tiny",
        "tiny",
        budget={"max_steps": 1000},
        seeds=3,
        threads=1,
        # small batches: more updates per second, which is what a CPU can buy
        batch_size=4,
        eval_interval=50,
        eval_samples=64,
        calibration_steps=5,
        glue_epochs=1,
        stability_updates=100,
        stability_batch=(4, 64),
    ),
    # ~3 h on a quiet laptop CPU
    "small": Scale(
        "small", "small", budget={"max_steps": 1000}, seeds=3, seq_len=256, lr=2e-3, vocab_size=8192
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
    ),
}
PUBLIC_SCALES = ("tiny", "small", "125M")


@dataclass(frozen=True)
class RunSpec:
    """One training run: objective, architecture preset, model-flag overrides, warm-up override."""

    objective: str  # clm | mlm
    arch: str  # engine.config.ARCHITECTURES key
    model: dict[str, Any] = field(default_factory=dict)
    warmup: float | None = None  # None: the scale's; 0: no warm-up (the LR starts at its peak)
    label: str = ""


# Table 4's ablations are the NormFormer preset with exactly one fairseq flag changed.
RUNS: dict[str, RunSpec] = {
    "clm-prenorm": RunSpec("clm", "prenorm", label="Pre-LN baseline"),
    "clm-normformer": RunSpec("clm", "normformer", label="NormFormer"),
    "clm-no-attn-ln": RunSpec("clm", "normformer", {"scale_attn": False}, label="− post-attn LN"),
    "clm-no-ffn-ln": RunSpec("clm", "normformer", {"scale_fc": False}, label="− FFN LN"),
    "clm-no-headscale": RunSpec("clm", "normformer", {"scale_heads": False}, label="− HeadScale"),
    "clm-resscale": RunSpec("clm", "normformer", {"scale_resids": True}, label="+ ResScale"),
    "clm-postnorm": RunSpec("clm", "postnorm", label="Post-LN, warm-up"),
    "clm-postnorm-no-warmup": RunSpec("clm", "postnorm", warmup=0, label="Post-LN, no warm-up"),
    "clm-prenorm-no-warmup": RunSpec("clm", "prenorm", warmup=0, label="Pre-LN, no warm-up"),
    "mlm-prenorm": RunSpec("mlm", "prenorm", label="Pre-LN masked LM"),
    "mlm-normformer": RunSpec("mlm", "normformer", label="NormFormer masked LM"),
}
ABLATIONS = ("clm-no-attn-ln", "clm-no-ffn-ln", "clm-no-headscale")


@dataclass(frozen=True)
class Experiment:
    """One section of the report: a table or figure of the paper and the runs it reads."""

    name: str  # --only key
    title: str
    reference: str
    finding: str  # the paper's finding, one line
    runs: tuple[str, ...]


# In the paper's order: §3.1 (Figure 2, Table 2), §3.2 (Table 3), §4 (Figures 3–5), §5 (Table 4);
# then Xiong et al. 2020, whose Post-LN warm-up result the paper builds on.
EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "fig2-clm",
        "Figure 2 / CLM: Pre-LN vs NormFormer at equal compute",
        "Shleifer et al. 2021, Figure 2 and §3.1",
        "NormFormer reaches the Pre-LN baseline's best perplexity with 60% of the compute (125M CLM).",
        ("clm-prenorm", "clm-normformer"),
    ),
    Experiment(
        "table2",
        "Table 2: zero-shot accuracy of the causal LMs",
        "Shleifer et al. 2021, Table 2",
        "At equal compute NormFormer scores higher zero-shot than the Pre-LN baseline.",
        ("clm-prenorm", "clm-normformer"),
    ),
    Experiment(
        "fig2-mlm",
        "Figure 2 / MLM + Table 3: masked LMs at equal compute, then GLUE",
        "Shleifer et al. 2021, Figure 2 (MLM), Table 3 and §3.2",
        "NormFormer reaches the baseline's best MLM perplexity with 57% of the compute and fine-tunes "
        "better on GLUE.",
        ("mlm-prenorm", "mlm-normformer"),
    ),
    Experiment(
        "fig3-5",
        "Figures 3–5: gradient norms by layer, learned gains, LR stability",
        "Shleifer et al. 2021, §4, Figures 3, 4 and 5",
        "Pre-LN's early layers get larger gradients than its late ones and NormFormer evens them out; "
        "NormFormer survives a larger learning rate.",
        ("clm-postnorm", "clm-prenorm", "clm-normformer"),
    ),
    Experiment(
        "table4",
        "Table 4: ablations",
        "Shleifer et al. 2021, Table 4 and §5",
        "Removing any NormFormer op hurts perplexity, HeadScale the most.",
        ("clm-normformer", *ABLATIONS, "clm-resscale", "clm-prenorm"),
    ),
    Experiment(
        "xiong",
        "Xiong et al. 2020: Post-LN needs warm-up, Pre-LN does not",
        "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture, §3",
        "Post-LN trained without learning-rate warm-up fails or ends much worse; Pre-LN trains without it.",
        ("clm-postnorm", "clm-postnorm-no-warmup", "clm-prenorm", "clm-prenorm-no-warmup"),
    ),
)
EXPERIMENT_NAMES = tuple(e.name for e in EXPERIMENTS)
