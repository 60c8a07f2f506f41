"""The runs of ``nfeval reproduce`` as run specs (``pipelines.runner.RunSpec``), which the pipelines' one
runner trains: each run lives in ``<out>/runs/<key>/seed<k>/`` (a band LR's in
``<out>/runs/<key>/lr=<lr>/seed<k>/``) and is finished when that folder's ``.json`` record exists.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from ...base.jsonio import load_json
from ...engine.training.train_config import TrainConfig
from ...tune.results import with_tuned_lr
from .. import context, lr_band, runner, runs
from .plan import EQUAL_UPDATES, LR_BAND_CLAIMS, RUNS, TABLE5_SETTINGS
from .run_overrides import apply_setting, run_model  # Table 4's width control, Table 5's settings


@dataclass(kw_only=True)
class Context(context.RunContext):
    """The run context (``context.RunContext``), with the GLUE tasks and the tunes by objective."""

    pipeline = "reproduce"
    glue_dir: str | None = None
    glue_tasks: tuple[str, ...] = ("rte",)
    tune_files: dict[str, str] = field(default_factory=dict)  # objective -> tune.json of `nfeval tune`

    def budget_text(self) -> str:
        """Returns the per-run budget in words, e.g. "60 s of training per run", or with equal-time
        step budgets "1000 steps for each baseline, the other runs the same time (paired step-time
        ratio)"."""
        words = {"max_seconds": "s of training", "max_steps": "steps", "max_tokens": "tokens"}
        text = " and ".join(f"{v:g} {words.get(k, k)}" for k, v in self.budget.items())
        if self.step_ratios and "max_steps" in self.budget:
            return text + " for each baseline, the other runs the same time (paired step-time ratio)"
        return text + " per run"


log = functools.partial(context.log, Context.pipeline)


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


def train_config(ctx: Context, key: str, seed: int, lr: float | None = None) -> TrainConfig:
    """Returns the TrainConfig of run ``key`` at ``seed``: the scale's recipe, the row's overrides, its
    equal-time step budget (``run_budget``), and the preset's tuned LR when ``ctx`` has a tune.json for
    the objective, or ``lr``, another LR of the tune's band (``band_lrs``)."""
    spec, s = RUNS[key], ctx.scale
    cfg = context.scale_train_config(
        ctx,
        preset=preset_name(ctx, key),
        model=run_model(s, key),
        objective=spec.objective,
        warmup=s.warmup if spec.warmup is None else spec.warmup,
        seed=seed,
        budget=run_budget(ctx, key),
    )
    if spec.objective in ctx.tune_files:  # the preset's tuned LR, and the record of where it came from
        cfg = with_tuned_lr(cfg, ctx.tune_files[spec.objective], deviations=recipe_deviations(ctx, key))
    return apply_setting(context.at_band_lr(cfg, lr), key, s)


def _band_entry(ctx: Context, key: str) -> dict | None:
    """Returns the tune entry of run ``key``'s preset when ``key`` is a side of a claim checked across
    the LR band (``plan.LR_BAND_CLAIMS``) and its objective was tuned; else None."""
    spec = RUNS[key]
    if spec.objective not in ctx.tune_files or not any(key in pair for pair in LR_BAND_CLAIMS.values()):
        return None
    return load_json(ctx.tune_files[spec.objective])["presets"][preset_name(ctx, key)]


def band_lrs(ctx: Context, key: str) -> list[float]:
    """Returns the other LRs of run ``key``'s band (``lr_band.entry_band``), when ``key`` is a side of a
    claim checked across the band; else []."""
    entry = _band_entry(ctx, key)
    return [] if entry is None else lr_band.entry_band(entry, ctx.unigram_ppl)


def band_outside(ctx: Context, key: str) -> dict[float, str]:
    """Returns the neighbours of run ``key``'s best LR that are not in its band, and why
    (``lr_band.failed_neighbours``), when ``key`` is a side of a claim checked across the band; else {}."""
    entry = _band_entry(ctx, key)
    return {} if entry is None else lr_band.failed_neighbours(entry, ctx.unigram_ppl)


def table_section(
    title: str, columns: list[str], rows: list, claims: list, figures: list, notes: list, data: dict
) -> dict[str, Any]:
    """Returns the parts of a report section with one table: tables, claims, figures, notes, data."""
    table = {"title": title, "columns": columns, "rows": rows}
    return {"tables": [table], "claims": claims, "figures": figures, "notes": notes, "data": data}


def run_dir(ctx: Context, key: str, seed: int, lr: float | None = None) -> str:
    """Returns the folder of run ``key`` at ``seed``: at its tuned LR, or at ``lr`` of its band."""
    return context.run_dir(ctx.out, key, seed, lr)


def run_spec(ctx: Context, key: str, seed: int, lr: float | None = None) -> runner.RunSpec:
    """Returns the spec of run ``key`` at ``seed`` (at ``lr`` of its band, or its tuned LR): its
    TrainConfig (``train_config``), folder, and the record's key, seed, budget and the equal-time record
    ``step_ratio`` its budget came from."""
    record = {
        "key": key,
        "seed": seed,
        "budget": run_budget(ctx, key),
        "step_ratio": ctx.step_ratios.get(key),
    }
    return runner.RunSpec(
        name=key,
        seed=seed,
        config=train_config(ctx, key, seed, lr),
        directory=run_dir(ctx, key, seed, lr),
        record=record,
        role=runner.JUDGED if lr is None else runner.BAND,
        lr=lr,
    )


def run_specs(ctx: Context, keys: list[str]) -> list[runner.RunSpec]:
    """Returns the specs of every seed of ``keys``, at the tuned LR and at every other LR of its band
    (``band_lrs``)."""
    return [
        run_spec(ctx, k, s, lr) for k in keys for lr in (None, *band_lrs(ctx, k)) for s in ctx.seed_values
    ]


def ensure_run(ctx: Context, key: str, seed: int, lr: float | None = None) -> dict[str, Any]:
    """Returns the record of run ``key`` at ``seed`` (``runner.ensure_in``), trained first unless it is
    finished (nothing is trained under ``--reread``)."""
    return runner.ensure_in(ctx, run_spec(ctx, key, seed, lr))


def ensure_runs(ctx: Context, keys: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """Returns {key: [record per seed]} after training whatever is not finished yet."""
    return {key: [ensure_run(ctx, key, seed) for seed in ctx.seed_values] for key in keys}


def train_all(ctx: Context, keys: list[str]) -> str | None:
    """Trains the unfinished runs of ``keys`` (``run_specs``) through the one runner
    (``runner.train_in``); returns None once every run is finished, else what to do."""
    return runner.train_in(ctx, run_specs(ctx, keys))
