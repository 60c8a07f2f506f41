"""Training the runs of ``nfeval reproduce``, resumably, through the pipelines' one run mechanism
(``pipelines.runs``): each run lives in ``<out>/runs/<key>/seed<k>/`` and is finished when
``<out>/runs/<key>/seed<k>.json`` exists.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ...engine.training.train_config import TrainConfig
from ...launch.options import LaunchOptions
from ...tune.results import lr_key, with_tuned_lr
from .. import lr_band, runs, trained_gate
from .plan import EQUAL_UPDATES, LR_BAND_CLAIMS, RUNS, TABLE5_SETTINGS, Scale
from .run_overrides import apply_setting, run_model  # Table 4's width control, Table 5's settings


def log(message: str) -> None:
    print(f"[reproduce {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Context:
    """Everything the experiments share: where, how big, how long, which data."""

    out: str
    scale: Scale
    budget: dict[str, float]
    seeds: int
    tokenizer: str
    train_data: str | None = None  # the corpus (None: the embedded default)
    valid_data: str | None = None
    data_dir: str | None = None
    glue_dir: str | None = None
    glue_tasks: tuple[str, ...] = ("rte",)
    device: str = "auto"
    progress: bool = True
    tune_files: dict[str, str] = field(default_factory=dict)  # objective -> tune.json of `nfeval tune`
    step_ratios: dict[str, dict] = field(default_factory=dict)  # run key -> its equal_time record
    launch: LaunchOptions | None = None  # --launcher slurm: the runs (and the tune) as Slurm jobs
    jobs: int = 1  # runs and tune points trained at a time here
    tune_seeds: int = lr_band.DEFAULT_TUNE_SEEDS  # seeds per tune point, disjoint from ``seed_values``
    unigram_ppl: float | None = None  # the corpus's (trained_gate): records are marked trained or not

    @property
    def seed_values(self) -> list[int]:
        """Returns the judged seeds, 1 … ``seeds`` (the tune's are ``lr_band.tune_seed_values``)."""
        return list(range(1, self.seeds + 1))

    def budget_text(self) -> str:
        """Returns the per-run budget in words, e.g. "60 s of training per run", or with equal-time
        step budgets "1000 steps for each baseline, the other runs the same time (paired step-time
        ratio)"."""
        words = {"max_seconds": "s of training", "max_steps": "steps", "max_tokens": "tokens"}
        text = " and ".join(f"{v:g} {words.get(k, k)}" for k, v in self.budget.items())
        if self.step_ratios and "max_steps" in self.budget:
            return text + " for each baseline, the other runs the same time (paired step-time ratio)"
        return text + " per run"


def preset_name(ctx: Context, key: str) -> str:
    return f"{RUNS[key].arch}-{ctx.scale.size}"


# the run every other run of its objective is timed against (equal_time)
BASELINES = {"clm": "clm-prenorm", "mlm": "mlm-prenorm"}


def run_budget(ctx: Context, key: str) -> dict[str, float]:
    """Returns the TrainConfig budget of run ``key``: the folder's budget for an equal-updates run, else
    its equal-time budget (``runs.equal_time_budget``) once its step-time ratio is measured."""
    if RUNS[key].protocol == EQUAL_UPDATES:
        return dict(ctx.budget)
    return runs.equal_time_budget(ctx.budget, ctx.step_ratios.get(key))


# where a TrainConfig field of a Table 5 setting sits in the recipe record (engine.training.recipe)
SETTING_FIELDS = {
    "warmup": "schedule.warmup",
    "beta2": "optimizer.betas",
    "clip_grad": "optimizer.clip_grad",
    "weight_decay": "optimizer.weight_decay",
}


def recipe_deviations(ctx: Context, key: str) -> tuple[str, ...]:
    """Returns the dotted recipe fields (``engine.training.recipe``) that run ``key``'s row changes on purpose
    against its objective's recipe: warm-up off (Xiong et al.), a Table 5 setting's fields."""
    spec = RUNS[key]
    fields = ["schedule.warmup"] if spec.warmup is not None else []
    if spec.setting:
        changes = TABLE5_SETTINGS[spec.setting][1](ctx.scale)
        fields += [SETTING_FIELDS[name] for name in changes if name in SETTING_FIELDS]
    return tuple(fields)


# the Scale fields a run's TrainConfig takes as they are
SCALE_TRAIN_FIELDS = ("batch_size", "seq_len", "grad_accum", "lr", "log_interval", "eval_interval")
SCALE_TRAIN_FIELDS += ("eval_samples", "ckpt_interval", "calibration_steps", "dtype")
SCALE_TRAIN_FIELDS += ("grad_stats",)  # Figures 3 and 7 read what the runs record while they train


def train_config(ctx: Context, key: str, seed: int, lr: float | None = None) -> TrainConfig:
    """Returns the TrainConfig of run ``key`` at ``seed``: the scale's recipe, the row's overrides, its
    equal-time step budget (``run_budget``), and the preset's tuned LR when ``ctx`` has a tune.json for
    the objective, or ``lr``, another LR of the tune's band (``band_lrs``)."""
    spec, s = RUNS[key], ctx.scale
    preset = preset_name(ctx, key)
    cfg = TrainConfig(
        preset=preset,
        model=run_model(s, key),
        objective=spec.objective,
        tokenizer=ctx.tokenizer,
        train_data=ctx.train_data,
        valid_data=ctx.valid_data,
        **{name: getattr(s, name) for name in SCALE_TRAIN_FIELDS},
        warmup=s.warmup if spec.warmup is None else spec.warmup,
        device=ctx.device,
        seed=seed,
        progress=ctx.progress,
        **run_budget(ctx, key),
    )
    if spec.objective in ctx.tune_files:  # the preset's tuned LR, and the record of where it came from
        cfg = with_tuned_lr(cfg, ctx.tune_files[spec.objective], deviations=recipe_deviations(ctx, key))
    if lr is not None and cfg.lr_from is not None:
        cfg = dataclasses.replace(cfg, lr=lr, lr_from={**cfg.lr_from, "lr": lr, "band_of": cfg.lr_from["lr"]})
    return apply_setting(cfg, key, s)


def band_lrs(ctx: Context, key: str) -> list[float]:
    """Returns the LRs other than the best that run ``key``'s tune cannot tell from its best, when ``key``
    is a side of a claim checked across the band (``plan.LR_BAND_CLAIMS``); else []."""
    spec = RUNS[key]
    if spec.objective not in ctx.tune_files or not any(key in pair for pair in LR_BAND_CLAIMS.values()):
        return []
    return lr_band.band_of(ctx.tune_files[spec.objective], preset_name(ctx, key))


def table_section(
    title: str, columns: list[str], rows: list, claims: list, figures: list, notes: list, data: dict
) -> dict[str, Any]:
    """Returns the parts of a report section with one table: tables, claims, figures, notes, data."""
    table = {"title": title, "columns": columns, "rows": rows}
    return {"tables": [table], "claims": claims, "figures": figures, "notes": notes, "data": data}


def run_dir(ctx: Context, key: str, seed: int, lr: float | None = None) -> str:
    """Returns the folder of run ``key`` at ``seed``: at its tuned LR, or at ``lr`` of its band."""
    band = () if lr is None else (f"lr={lr_key(lr)}",)
    return os.path.join(ctx.out, "runs", key, *band, f"seed{seed}")


def ensure_run(ctx: Context, key: str, seed: int, lr: float | None = None) -> dict[str, Any]:
    """Trains run ``key`` at ``seed`` (at ``lr`` of its band, or its tuned LR) unless it is finished;
    returns its record (``runs.ensure_run``'s, with key, seed, budget, the equal-time record
    ``step_ratio`` its budget came from and, once the corpus's unigram PPL is known, ``trained``: the
    gate every verdict reads, applied here where every experiment loads its runs)."""
    record = {
        "key": key,
        "seed": seed,
        "budget": run_budget(ctx, key),
        "step_ratio": ctx.step_ratios.get(key),
    }
    cfg = train_config(ctx, key, seed, lr)
    done = runs.ensure_run(cfg, run_dir(ctx, key, seed, lr), record, log)
    return trained_gate.mark(done, ctx.unigram_ppl)


def ensure_runs(ctx: Context, keys: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """Returns {key: [record per seed]} after training whatever is not finished yet."""
    return {key: [ensure_run(ctx, key, seed) for seed in ctx.seed_values] for key in keys}


def train_all(ctx: Context, keys: list[str]) -> str | None:
    """Trains the unfinished runs of ``keys`` (every seed, and every LR of their band: ``band_lrs``):
    ``ctx.jobs`` at a time here, or as Slurm jobs (``ctx.launch``); returns None once every run is
    finished, else what to do."""
    variants = [(k, k, lr, s) for k in keys for lr in (None, *band_lrs(ctx, k)) for s in ctx.seed_values]
    points = runs.paired_points(ctx, variants, ensure_run, run_dir)
    desc, launch = "reproduce", ctx.launch
    return runs.train_points(
        points, ctx.out, launch, ctx.jobs, desc, ctx.progress, ctx.scale.threads, ctx.device
    )
