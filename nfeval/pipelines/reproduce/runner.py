"""Training the runs of ``nfeval reproduce``, resumably.

Each run lives in ``<out>/runs/<key>/seed<k>/`` (an ``nfeval train`` run dir) and is finished when
``<out>/runs/<key>/seed<k>.json`` exists: that record is written last, after training returned or
diverged, so a rerun skips the run without calling ``train`` and a killed one is resumed by
``train(..., resume=True)`` from its newest checkpoint.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from ...base.artifacts import atomic_write_json
from ...base.jsonio import load_json
from ...engine.step_ratio import equal_time_steps
from ...engine.train import train
from ...engine.train_config import TrainConfig
from ...engine.trainer import TrainingDiverged
from ...launch.options import LaunchOptions
from ...tune.results import with_tuned_lr
from .plan import RUNS, Scale
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
    data_dir: str | None = None
    glue_dir: str | None = None
    glue_tasks: tuple[str, ...] = ("rte",)
    device: str = "auto"
    progress: bool = True
    tune_files: dict[str, str] = field(default_factory=dict)  # objective -> tune.json of `nfeval tune`
    step_ratios: dict[str, dict] = field(default_factory=dict)  # run key -> its equal_time record
    launch: LaunchOptions | None = None  # --launcher slurm: the runs (and the tune) as Slurm jobs

    @property
    def seed_values(self) -> list[int]:
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
    """Returns the TrainConfig budget of run ``key``: the scale's S steps ÷ its paired step-time ratio
    to its baseline once measured (``equal_time``) and when the budget is in steps, else the folder's
    budget as it is."""
    record = ctx.step_ratios.get(key)
    if record is None or "max_steps" not in ctx.budget:
        return dict(ctx.budget)
    return {**ctx.budget, "max_steps": equal_time_steps(int(ctx.budget["max_steps"]), record["ratio"])}


# the Scale fields a run's TrainConfig takes as they are
SCALE_TRAIN_FIELDS = ("batch_size", "seq_len", "grad_accum", "lr", "log_interval", "eval_interval")
SCALE_TRAIN_FIELDS += ("eval_samples", "ckpt_interval", "calibration_steps", "dtype")
SCALE_TRAIN_FIELDS += ("grad_stats",)  # Figures 3 and 7 read what the runs record while they train


def train_config(ctx: Context, key: str, seed: int) -> TrainConfig:
    """Returns the TrainConfig of run ``key`` at ``seed``: the scale's recipe, the row's overrides, its
    equal-time step budget (``run_budget``), and the preset's tuned LR when ``ctx`` has a tune.json for
    the objective."""
    spec, s = RUNS[key], ctx.scale
    preset = preset_name(ctx, key)
    cfg = TrainConfig(
        preset=preset,
        model=run_model(s, key),
        objective=spec.objective,
        tokenizer=ctx.tokenizer,
        **{name: getattr(s, name) for name in SCALE_TRAIN_FIELDS},
        warmup=s.warmup if spec.warmup is None else spec.warmup,
        device=ctx.device,
        seed=seed,
        progress=ctx.progress,
        **run_budget(ctx, key),
    )
    if spec.objective in ctx.tune_files:  # the preset's tuned LR, and the record of where it came from
        cfg = with_tuned_lr(cfg, ctx.tune_files[spec.objective])
    return apply_setting(cfg, key, s)


def table_section(
    title: str, columns: list[str], rows: list, claims: list, figures: list, notes: list, data: dict
) -> dict[str, Any]:
    """Returns the parts of a report section with one table: tables, claims, figures, notes, data."""
    table = {"title": title, "columns": columns, "rows": rows}
    return {"tables": [table], "claims": claims, "figures": figures, "notes": notes, "data": data}


def run_dir(ctx: Context, key: str, seed: int) -> str:
    return os.path.join(ctx.out, "runs", key, f"seed{seed}")


def ensure_run(ctx: Context, key: str, seed: int) -> dict[str, Any]:
    """Trains run ``key`` at ``seed`` unless its record exists; returns the record
    {key, seed, dir, status: finished|diverged, diverged_at, val_ppl, steps, lr, lr_from, warmup,
    budget, step_ratio}: ``step_ratio`` is the equal-time record its budget came from (None: none)."""
    directory = run_dir(ctx, key, seed)
    marker = directory + ".json"
    if os.path.isfile(marker):
        return load_json(marker) | {"dir": directory}  # where the run is now (the folder may have moved)
    cfg = train_config(ctx, key, seed)
    log(f"training {key} seed {seed} ({cfg.preset}, {RUNS[key].objective}) → {directory}")
    record: dict[str, Any] = {
        "key": key,
        "seed": seed,
        "dir": directory,
        "lr": cfg.lr,
        "lr_from": cfg.lr_from,
        "warmup": cfg.warmup,
        "budget": run_budget(ctx, key),
        "step_ratio": ctx.step_ratios.get(key),
    }
    try:
        summary = train(cfg, directory, resume=True)
        record.update(status="finished", diverged_at=None, val_ppl=summary["val_ppl"], steps=summary["step"])
    except TrainingDiverged as e:
        log(f"{key} seed {seed} diverged: {e}")
        record.update(status="diverged", diverged_at=e.step, val_ppl=None, message=str(e))
    atomic_write_json(marker, record)
    return record


def ensure_runs(ctx: Context, keys: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """Returns {key: [record per seed]} after training whatever is not finished yet."""
    return {key: [ensure_run(ctx, key, seed) for seed in ctx.seed_values] for key in keys}


def train_on_cluster(ctx: Context, keys: list[str]) -> str | None:
    """Trains the unfinished runs of ``keys`` (every seed) as one array of Slurm jobs (``ctx.launch``),
    each ``ensure_run`` in its own job; returns None once every run is finished, else what to do (with
    ``--no-wait``, or when a job failed: a rerun submits what is missing)."""
    from ...launch import cluster
    from ...launch.jobs import LaunchPoint

    runs = [(k, s) for k in keys for s in ctx.seed_values]
    todo = [(k, s) for k, s in runs if not os.path.isfile(run_dir(ctx, k, s) + ".json")]
    points = [LaunchPoint(f"{k}/seed{s}", ensure_run, (ctx, k, s), run_dir(ctx, k, s)) for k, s in todo]
    cluster.run_points(points, ctx.out, ctx.launch, "reproduce", ctx.progress)
    missing = [f"{k}/seed{s}" for k, s in todo if not os.path.isfile(run_dir(ctx, k, s) + ".json")]
    if not missing:
        return None
    return f"{len(missing)} training run(s) not finished yet: rerun the same command to collect them"
