"""``nfeval reproduce``: the NormFormer paper's tables and figures from one command, at the scale the
hardware allows, into ``--out``: ``report.md`` + ``report.json`` + PNGs, one section per experiment.

Before any comparison run: the LR of every architecture is tuned (``tuning``; ``--no-tune``: one LR,
every verdict marked untuned) and every run's paired step-time ratio to its baseline fixes its equal-time
step budget (``equal_time``). Built from the library functions behind ``nfeval tune``, ``train``,
``compare``, ``zeroshot`` and ``glue`` (``plan`` lists the experiments and runs as data; ``run_specs``
declares the runs, ``pipelines.runner`` trains them; ``training_experiments`` and ``eval_experiments``
measure; ``verdict`` holds the one decision rule; ``report`` renders). Resumable: every run and every
section has a record written last, so a rerun with the same ``--out`` skips what finished and a killed
invocation resumes inside the run it was training. The folder may be moved or copied (to another path or
machine) and resumed there: nothing in it is keyed by where it lies (its tune points and runs compare the
tokenizer it holds by content, its settings the corpus by what it holds; its links are relative).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import torch

from ... import __version__
from ...base.artifacts import atomic_write_json, git_hash, hardware, hardware_key
from ...base.errors import ConfigError
from ...base.jsonio import load_json
from ...base.sweep_lock import folder_locked
from ...engine.training import recipe
from ...engine.training.train_config import TrainConfig
from ...tune import results as tune_results
from .. import archive, context, init_sensitivity, lr_band, runs, scale_facts, trained_gate
from ..scales import SCALES, Scale
from ..stages import shared_tokenizer
from . import commands, report, run_specs, sections
from .budget_axis import run_budget_axis
from .config import ReproduceConfig
from .equal_time import equal_time_rows, measure_ratios, measure_ratios_as_job, model_key
from .glue_halves import present_tasks
from .plan import EXPERIMENTS, PRIMARY_CLAIMS, RUNS
from .run_specs import Context, log, train_all
from .tuning import run_tune, tuning_rows

SETTINGS = "reproduce.json"  # the folder's settings, checked on a rerun (``context.check_settings``)
# the records its archive leaves out: the band's runs' gradient records (Figures 3 and 7 read the runs at
# the tuned LRs only), and every gradient record where Figures 3-7 are not run (a token-budget axis)
ARCHIVE_SKIP = ("runs/*/lr=*/*/grad_stats.jsonl",)
NO_GRADIENTS = ("runs/*/grad_stats.jsonl",)


def archive_skip(only: set[str] | None) -> tuple[str, ...]:
    """Returns the records the folder's archive leaves out, by the experiments it runs (``--only``)."""
    return ARCHIVE_SKIP if only is None or "fig3-5" in only else NO_GRADIENTS


# what a rerun refused for other settings is told
ADVICE = "rerun with the same --scale and --minutes, or use a new --out"


def settings(cfg: ReproduceConfig, budget: dict[str, float]) -> dict[str, Any]:
    """Returns what every run of one output folder must share (checked on a rerun)."""
    steps = "max_steps" in budget
    corpus = [cfg.train_data, cfg.valid_data] if cfg.train_data else None  # None: the embedded corpus
    return {
        "scale": cfg.scale,
        "budget": budget,
        "tune": cfg.tune,
        **({"tune_lrs": list(cfg.lrs)} if cfg.lrs else {}),
        **({"tune_seeds": lr_band.tune_seed_values(cfg.tune_seeds)} if cfg.tune else {}),
        "equal_time": "paired" if steps else None,
        **({"corpus": corpus} if corpus else {}),
    }


@folder_locked(lambda cfg: cfg.out)  # one writer per output folder
def run_reproduce(cfg: ReproduceConfig) -> dict[str, Any]:
    """Runs (or resumes) the selected experiments into ``cfg.out`` and writes the report; returns
    {"report": report.md, "sections": [...]}, {"commands": script} (a GPU scale, no GPUs here),
    {"tuned": what was tuned} (``--tune-only``), or {"pending": what to do} (``cfg.launch``'s Slurm jobs
    are not all finished)."""
    cfg.validate()
    if cfg.token_budgets:
        return run_budget_axis(cfg)
    scale = effective_scale(cfg)
    budget = {"max_seconds": cfg.minutes * 60} if cfg.minutes else dict(scale.budget)
    os.makedirs(cfg.out, exist_ok=True)
    archive.unpack(cfg.out)  # a committed folder keeps its records in records.tar.xz
    current = context.with_corpus_fingerprint(settings(cfg, budget))
    context.check_settings(os.path.join(cfg.out, SETTINGS), current, ADVICE)
    start = time.time()
    only = set(cfg.only) if cfg.only else None
    ctx = Context.from_config(
        cfg,
        scale=scale,
        budget=budget,
        seeds=cfg.seeds or scale.seeds,
        tokenizer="",
        glue_tasks=_glue_tasks(cfg),
    )
    if scale.needs_gpu and not torch.cuda.is_available() and not (cfg.launch and cfg.launch.on_cluster):
        context.keep_settings(os.path.join(cfg.out, SETTINGS), current)
        record_seeds(cfg.out, ctx.seeds)
        script = commands.write_commands(ctx, only)
        log(f"--scale {scale.name} needs GPUs and none is present: the training commands are in {script}")
        return {"commands": script}
    ctx.with_jobs_here(cfg.runs_per_gpu)
    ctx.tokenizer = shared_tokenizer(cfg.out, scale.vocab_size, cfg.train_data, cfg.valid_data)
    context.keep_settings(os.path.join(cfg.out, SETTINGS), current)
    seed_history = record_seeds(cfg.out, ctx.seeds)
    ctx.unigram_ppl = trained_gate.corpus_unigram_ppl(run_specs.train_config(ctx, "clm-prenorm", 1))
    keys = list(dict.fromkeys(k for e in EXPERIMENTS if only is None or e.name in only for k in e.runs))
    ctx.sensitivity = init_sensitivity.measure(cfg.out, _distinct_models(ctx, keys), log)
    if cfg.tune_only:
        files = run_tune(ctx, keys, ctx.jobs)
        archive.pack(cfg.out, archive_skip(only))
        return {"tuned": f"tuned ({', '.join(files.values())}); rerun without --tune-only to train the runs"}
    pending = _before_sections(cfg, ctx, keys)
    if pending:
        return {"pending": pending}
    done: list[dict[str, Any]] = []
    for exp in EXPERIMENTS:  # the report is rewritten after every section, so a long run shows progress
        if only is None or exp.name in only:
            train_all(ctx, list(exp.runs))  # --jobs at a time (on a cluster they were trained above)
        done.append(sections.section(ctx, exp, only))
        pending = [sections.stub(e, sections.PENDING) for e in EXPERIMENTS[len(done) :]]
        path = report.write(cfg.out, _header(cfg, ctx, start, seed_history), done + pending)
    archive.pack(cfg.out, archive_skip(only))
    log(f"report: {path}")
    return {"report": path, "sections": report.adjusted(done)}


def _distinct_models(ctx: Context, keys: list[str]) -> dict[str, TrainConfig]:
    """Returns {run key: its TrainConfig} of the first run of each distinct model among ``keys`` (a row
    that changes only the recipe draws the same model at initialisation)."""
    first: dict[str, str] = {}
    for key in keys:
        first.setdefault(model_key(ctx, key), key)
    return {key: run_specs.train_config(ctx, key, 1) for key in first.values()}


def effective_scale(cfg: ReproduceConfig) -> Scale:
    """Returns ``cfg.scale``'s Scale with ``--steps`` as its budget (a tune at the scale's full run length
    follows it: each tune point trains a whole run) and ``--lrs`` as its tune grid."""
    scale = SCALES[cfg.scale]
    if cfg.steps:
        full_length = scale.tune_budget == f"steps={scale.budget.get('max_steps')}"
        tune_budget = f"steps={cfg.steps}" if full_length else scale.tune_budget
        scale = dataclasses.replace(scale, budget={"max_steps": cfg.steps}, tune_budget=tune_budget)
    return dataclasses.replace(scale, tune_lrs=tuple(cfg.lrs)) if cfg.lrs else scale


def _before_sections(cfg: ReproduceConfig, ctx: Context, keys: list[str]) -> str | None:
    """Tunes, fixes the equal-time step budgets and, with ``--launcher slurm``, trains every run as
    Slurm jobs (each phase's jobs on the jobs' hardware, in turn); returns what to do when jobs are not
    finished yet (``--no-wait``, a failed job), else None."""
    on_cluster = bool(cfg.launch and cfg.launch.on_cluster)
    if cfg.tune:
        ctx.tune_files = run_tune(ctx, keys, ctx.jobs)
        if on_cluster and any(load_json(f)["missing"] for f in ctx.tune_files.values()):
            return "the LR tune's jobs are not all finished: rerun the same command to collect them"
    if "max_steps" in ctx.budget:
        if on_cluster and not measure_ratios_as_job(ctx, keys):
            return "the step-time ratio job is not finished: rerun the same command to collect it"
        ctx.step_ratios = measure_ratios(ctx, keys)
    log(
        f"output folder {os.path.abspath(cfg.out)}; scale {ctx.scale.name}; {ctx.budget_text()}; "
        f"{ctx.seeds} seed(s)"
    )
    return train_all(ctx, keys) if on_cluster else None


def _glue_tasks(cfg: ReproduceConfig) -> tuple[str, ...]:
    """Returns the GLUE tasks to run: the given ones, else every task whose files are in --glue-dir."""
    return cfg.glue_tasks or (present_tasks(cfg.glue_dir) if cfg.glue_dir else ())


SEED_HISTORY = "seed_history.json"


def record_seeds(out: str, seeds: int) -> list[dict[str, Any]]:
    """Appends this invocation's seed count to ``<out>/seed_history.json`` (with whether a report with
    verdicts had been written before it, so results were readable) when it differs from the last one;
    returns the history."""
    path = os.path.join(out, SEED_HISTORY)
    history: list[dict[str, Any]] = load_json(path)["history"] if os.path.isfile(path) else []
    if not history or history[-1]["seeds"] != seeds:
        seen = os.path.isfile(os.path.join(out, "report.json"))
        history.append({"seeds": seeds, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "after_a_report": seen})
        atomic_write_json(path, {"history": history})
    return history


def _header(cfg: ReproduceConfig, ctx: Context, start: float, seed_history: list[dict]) -> dict[str, Any]:
    tune_rows, tune_warnings = tuning_rows(ctx)
    finished = [
        trained_gate.mark(r, ctx.unigram_ppl)
        for r in (runs.finished(run_specs.run_dir(ctx, k, s)) for k in RUNS for s in ctx.seed_values)
        if r
    ]
    base = scale_facts.baseline_dir(ctx.out, "runs", "clm-prenorm") or scale_facts.baseline_dir(
        ctx.out, "runs", "mlm-prenorm"
    )
    return {
        "version": __version__,
        "git": git_hash(),
        "command": cfg.command,
        "scale": ctx.scale.name,
        "facts": scale_facts.facts(base) if base else _stored_facts(ctx.out),
        "paper_facts": scale_facts.paper_facts(),
        "recipes": recipes(ctx, finished),
        "train_hours": sum(runs.train_seconds(r["dir"]) for r in finished) / 3600,
        "compute_paths": runs.compute_paths(finished),
        "seeds": ctx.seeds,
        "eval_seeds": ctx.seed_values,
        "tune_seeds": lr_band.tune_seed_values(ctx.tune_seeds) if ctx.tune_files else [],
        "lr_band_rule": lr_band.RULE,
        "band_rule": tune_results.BAND_RULE,
        "seed_history": seed_history,
        "primary_claims": list(PRIMARY_CLAIMS),
        "budget": ctx.budget_text(),
        "lr": lr_text(ctx),
        "hardware": hardware_key(hardware()),
        "cpu_count": os.cpu_count(),
        "jobs": ctx.jobs,
        "wall_min": (time.time() - start) / 60,
        # a shared machine slows every run; time budgets then buy fewer steps (see each run's steps)
        "load_average": round(os.getloadavg()[0], 1),
        "tuned": bool(ctx.tune_files),
        "tuning": tune_rows,
        "equal_time": equal_time_rows(ctx),
        "step_ratios": ctx.step_ratios,
        "warnings": tune_warnings,
        "unigram_ppl": ctx.unigram_ppl,
        "token_sensitivity": ctx.sensitivity,
        "trained_factor": trained_gate.FACTOR,
        "trained": {f"{r['key']}/seed{r['seed']}": trained_gate.is_trained(r) for r in finished},
    }


def _stored_facts(out: str) -> dict[str, Any] | None:
    """Returns the scale facts the folder's report stated when its run folders were there (an older
    committed report keeps each run's record only), or None."""
    path = os.path.join(out, "report.json")
    return (load_json(path).get("header") or {}).get("facts") if os.path.isfile(path) else None


def recipes(ctx: Context, finished: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Returns {objective: the recipe its runs share}, checking every finished run's recorded recipe
    against its objective's baseline's, except the fields its row changes on purpose; raises
    ConfigError naming the run and field that differ, or the runs whose recipe cannot be told."""
    out: dict[str, dict[str, Any]] = {}
    for objective, base in run_specs.BASELINES.items():
        mine = [r for r in finished if RUNS[r["key"]].objective == objective]
        reference = next((r for r in mine if r["key"] == base), None)
        if reference is None:
            continue
        unknown = [f"{r['key']}/seed{r['seed']}" for r in mine if r.get("recipe") is None]
        if unknown:
            raise ConfigError(
                f"{ctx.out}: the recipe of {', '.join(unknown)} cannot be told (trained before nfeval "
                "recorded recipes): delete those run folders and rerun, so one recipe holds for the report"
            )
        for r in mine:
            allowed = run_specs.recipe_deviations(ctx, r["key"])
            differ = [
                d
                for d in recipe.differences(reference["recipe"], r["recipe"])
                if d.split(":")[0] not in allowed
            ]
            if differ:
                raise ConfigError(
                    f"{r['dir']}: trained under another recipe than {base} ({'; '.join(differ)}); "
                    "a report puts one recipe side by side: rerun it in a new --out"
                )
        out[objective] = reference["recipe"]
    return out


def lr_text(ctx: Context) -> str:
    """Returns where the runs' learning rates came from, in words."""
    if not ctx.tune_files:
        return f"{ctx.scale.lr:g} for every run (untuned: --no-tune; every verdict is marked untuned)"
    best = [
        f"{objective} {preset} {s['best_lr']:g}"
        for objective, path in ctx.tune_files.items()
        for preset, s in load_json(path)["presets"].items()
        if s["best_lr"] is not None
    ]
    return "tuned per preset by nfeval tune (grid below): " + ", ".join(best)
