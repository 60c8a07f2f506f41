"""``nfeval bakeoff``: rank normalisation placements (or any preset architectures and variants) on one
corpus and compute budget, against a chosen baseline, into ``--out``: ``report.md`` + ``report.json`` +
PNGs.

The protocol is ``nfeval reproduce``'s: each candidate's LR is tuned first (``nfeval tune`` over the
grid at the short tune budget); the baseline gets S steps and each other candidate S ÷ its paired
step-time ratio to the baseline (measured before training, interleaved in one process, so machine load
cancels), each on its complete LR schedule; every candidate trains N seeds; each run is scored on
validation perplexity and zero-shot (the corpus cloze task; the public tasks found under
``--data-dir``); each architecture's initialisation goes through the rising-LR stability test.
``results`` holds the statistics and ``report`` renders them. Resumable: every stage writes its record
last (``runs``), so a rerun with the same ``--out`` redoes nothing finished.
"""

from __future__ import annotations

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
from ...engine.training.own_recipes import OWN_RECIPES
from ...tune import results as tune_results
from ...tune.results import grid_cells, lr_key, warnings_for
from .. import archive, context, init_sensitivity, lr_band, scale_facts, trained_gate
from ..runs import compute_paths, train_seconds
from ..scales import SCALES
from ..stages import shared_tokenizer, zeroshot_data
from ..trained_gate import corpus_unigram_ppl
from . import collapse, results, runs
from .candidates import OWN, parse_candidates
from .config import RECIPES, BakeoffConfig
from .report import write
from .runs import Context, log, run_budget, run_dir, tune_file

SETTINGS = "bakeoff.json"  # the folder's settings, checked on a rerun (``context.check_settings``)
# the records its archive leaves out: the gradient records, which each run summarises as it finishes
# (fc2_depth.json, the gradient ratio by depth the report reads)
ARCHIVE_SKIP = ("runs/*/grad_stats.jsonl",)  # fnmatch's * crosses folders: every run's
ADVICE = "use a new --out"  # what a rerun refused for other settings is told


def settings(cfg: BakeoffConfig, ctx: Context) -> dict[str, Any]:
    """Returns what every run of one output folder must share (checked on a rerun): one folder is one
    recipe, so clipping is part of it (only when on: a folder made before the option has none)."""
    return {
        "archs": [c.spec() for c in ctx.candidates],
        "size": cfg.size,
        "budget": ctx.budget,
        "lrs": list(ctx.lrs),
        "tune_budget": ctx.tune_budget,
        "tune_seeds": lr_band.tune_seed_values(ctx.tune_seeds),
        "corpus": [cfg.train_data, cfg.valid_data],
        **({"clip_grad": ctx.clip_grad} if ctx.clip_grad else {}),
    }


def make_context(cfg: BakeoffConfig) -> Context:
    """Returns the bakeoff's Context after checking every option (nothing trained yet)."""
    cfg.validate()
    scale = SCALES[RECIPES[cfg.size]]
    candidates = parse_candidates(list(cfg.archs), cfg.baseline, scale.size, scale.model)
    if cfg.minutes:
        budget = {"max_seconds": cfg.minutes * 60}
    else:
        budget = {"max_steps": cfg.steps or scale.budget["max_steps"]}
    return Context.from_config(
        cfg,
        scale=scale,
        candidates=candidates,
        budget=budget,
        lrs=tuple(cfg.lrs or scale.tune_lrs),
        tune_budget=cfg.tune_budget or scale.tune_budget,
        tokenizer="",
    ).with_jobs_here(cfg.runs_per_gpu)


@folder_locked(lambda cfg: cfg.out)  # one writer per output folder
def run_bakeoff(cfg: BakeoffConfig) -> dict[str, Any]:
    """Runs (or resumes) the bakeoff into ``cfg.out``; returns the report dict with its ``path``, or
    {"pending": what to do} while ``--launcher slurm``'s jobs are not all finished."""
    ctx = make_context(cfg)
    on_cluster = ctx.launch is not None and ctx.launch.on_cluster
    if ctx.scale.needs_gpu and not torch.cuda.is_available() and not on_cluster:
        raise ConfigError(f"--size {cfg.size}: needs a GPU and none is present; use tiny or small on a CPU")
    os.makedirs(cfg.out, exist_ok=True)
    archive.unpack(cfg.out)  # a committed folder keeps its records in records.tar.xz
    current = context.with_corpus_fingerprint(settings(cfg, ctx))
    context.check_settings(os.path.join(cfg.out, SETTINGS), current, ADVICE)
    start = time.time()
    ctx.tokenizer = shared_tokenizer(cfg.out, ctx.scale.vocab_size, cfg.train_data, cfg.valid_data)
    context.keep_settings(os.path.join(cfg.out, SETTINGS), current)
    ctx.unigram_ppl = corpus_unigram_ppl(runs.train_config(ctx, ctx.baseline, 1, tuned=False))
    models = {c.name: runs.train_config(ctx, c, 1, tuned=False) for c in ctx.candidates}
    ctx.sensitivity = init_sensitivity.measure(cfg.out, models, log)
    ctx.zeroshot = zeroshot_data(cfg.out, cfg.data_dir, ctx.scale.cloze_items, 1, log)  # scored per run
    pending = runs.run_on_cluster(ctx) if on_cluster else None
    if pending:
        return {"pending": pending}
    runs.run_tunes(ctx)
    if runs.add_own_recipes(ctx):
        runs.run_tunes(ctx)  # the finished tunes are read, the schemes tried again are tuned
    ctx.step_ratios = runs.measure_ratios(ctx)
    runs.train_all(ctx)
    plan = seed_plan(cfg, ctx)
    ctx.seed_counts = plan["counts"]
    pending = runs.train_all(ctx)  # the close candidates' further seeds
    if pending:
        return {"pending": pending}
    records = {c.name: [runs.ensure_run(ctx, c, s) for s in ctx.seeds_of(c)] for c in ctx.candidates}
    data, tasks = ctx.zeroshot
    files = {
        c.name: {
            r["seed"]: runs.zeroshot_files(ctx, c, r["seed"], tasks, data)
            for r in rs
            if trained_gate.is_trained(r)  # no zero-shot claim is read from a run that did not train
        }
        for c, rs in zip(ctx.candidates, records.values())
    }
    stability = {c.name: runs.stability(ctx, c) for c in ctx.candidates}
    report = _assemble(cfg, ctx, records, files, stability, tasks, plan, start)

    report = write(cfg.out, report)
    archive.pack(cfg.out, ARCHIVE_SKIP)
    log(f"report: {report['path']}")
    return report


def seed_plan(cfg: BakeoffConfig, ctx: Context) -> dict[str, Any]:
    """Returns ``<out>/seed_plan.json``, deciding it first (``results.plan_seeds``) from every
    candidate's finished first ``--seeds`` runs: decided once, so a rerun never changes who gets more."""
    path = os.path.join(cfg.out, "seed_plan.json")
    if os.path.isfile(path):
        return load_json(path)
    records = {c.name: [runs.ensure_run(ctx, c, s) for s in ctx.seed_values] for c in ctx.candidates}
    plan = results.plan_seeds(ctx, records, cfg.close_seeds)
    atomic_write_json(path, plan)
    extra = ", ".join(plan["counts"]) or "none"
    log(f"seed plan: {cfg.close_seeds} seeds for {extra} (MDE {plan['mde']}, best {plan['best']})")
    return plan


def _assemble(cfg, ctx, records, files, stability, tasks, plan, start) -> dict[str, Any]:
    """Returns report.json's content: the header, the ranking, every test and the tables' data."""
    every = [r for rs in records.values() for r in rs]
    own = {c.name for c in ctx.candidates if c.own_recipe}  # tried again under their scheme's own recipe
    recipes = {f"{r['name']}/seed{r['seed']}": r.get("recipe") for r in every if r["name"] not in own}
    shared = recipe.check_same(recipes, cfg.out, schemes_may_differ=True)  # nGPT carries its own fields
    header = _header(cfg, ctx, every, shared, tasks, plan, start)
    header["own_recipes"] = {
        name: {
            "recipe": records[name][0].get("recipe"),
            "sources": OWN_RECIPES[name.removesuffix(OWN)].sources,
        }
        for name in sorted(own)
        if records.get(name)
    }
    header["schemes"] = {
        r["name"]: r["recipe"]["scheme"] for r in every if (r.get("recipe") or {}).get("scheme")
    }
    failed = runs.failed_lrs(ctx, ctx.unigram_ppl)
    untrainable = runs.untrainable(ctx, failed)
    names = {c.name for c in ctx.candidates}
    header["own_recipe_pending"] = [  # --reread: schemes whose own recipe this folder has not tried yet
        c.name
        for c in ctx.candidates
        if c.name in untrainable and c.arch in OWN_RECIPES and not c.own_recipe and c.name + OWN not in names
    ]
    realised = results.realised_checks(ctx, records)
    ppl, zeroshot = results.ppl_tests(ctx, records, realised), results.zeroshot_tests(ctx, files)
    stable = results.stability_tests(ctx, stability)
    results.add_lr_sensitivity(ctx, records, ppl)
    results.settle(ppl, zeroshot, stable)
    collapse.qualify_worse(ppl, records, failed, recipe.stability_text(shared))
    return {
        "header": header,
        "baseline": ctx.baseline.name,
        "ranking": results.ranking(ctx, records, untrainable),
        "untrainable": sorted(untrainable),
        "depth_ratios": results.depth_ratios(ctx),
        "ppl_tests": ppl,
        "zeroshot_tests": zeroshot,
        "compute_fractions": results.compute_fractions(ctx, records),
        "curves_seed1": results.curves(ctx, records),
        "stability": stable,
        "tuning": _tuning_rows(ctx),
        "step_ratios": ctx.step_ratios,
        "realised": realised,  # each seed's realised ratio against the planned one (realised_time)
        "steps": {c.name: run_budget(ctx, c).get("max_steps", "time budget") for c in ctx.candidates},
        "records": records,
        "notes": _notes(ctx) + [_gate_note(shared)],
    }


def _header(cfg, ctx, every, shared, tasks, plan, start) -> dict[str, Any]:
    """Returns the report header: provenance, scale, recipe, seeds, grids, corpus, machine and the gate."""
    return {
        "version": __version__,
        "git": git_hash(),
        "command": cfg.command,
        "size": cfg.size,
        "facts": scale_facts.facts(run_dir(ctx, ctx.baseline, ctx.seed_values[0])),
        "paper_facts": scale_facts.paper_facts(),
        "recipe": shared,
        "train_hours": sum(train_seconds(r["dir"]) for r in every) / 3600,
        "compute_paths": compute_paths(every),
        "cpu_count": os.cpu_count(),
        "jobs": ctx.jobs,
        "seeds": ctx.seeds,
        "seed_plan": plan,
        "budget": _budget_text(ctx),
        "lrs": list(ctx.lrs),
        "widened": _widened(ctx),
        "tune_budget": ctx.tune_budget,
        "tune_seeds": lr_band.tune_seed_values(ctx.tune_seeds),
        "eval_seeds": sorted({s for c in ctx.candidates for s in ctx.seeds_of(c)}),
        "lr_band_rule": lr_band.RULE,
        "band_rule": tune_results.BAND_RULE,
        "corpus": f"{cfg.train_data} / {cfg.valid_data or '5% split'}"
        if cfg.train_data
        else "the embedded default corpus",
        "tasks": tasks,
        "hardware": hardware_key(hardware()),
        "load_average": round(os.getloadavg()[0], 1),
        "wall_min": (time.time() - start) / 60,
        "unigram_ppl": ctx.unigram_ppl,
        "token_sensitivity": ctx.sensitivity,
        "trained_factor": trained_gate.FACTOR,
    }


def _gate_note(shared: dict[str, Any]) -> str:
    return (
        "Trained-run gate (see the header): a run that did not train is marked ✗ beside its PPL, its seed's "
        "pairs are left out of every test, and a test left with fewer than two pairs is not readable; a "
        "candidate whose every tune point failed the gate did not train at any LR of its grid under this "
        f"recipe ({recipe.stability_text(shared)}) and is listed, not ranked. A *worse* verdict on a "
        "candidate that did not train somewhere says under which recipe it holds."
    )


def _budget_text(ctx: Context) -> str:
    if "max_steps" in ctx.budget:
        steps = ctx.budget["max_steps"]
        return f"{steps:g} steps for the baseline, the others the same time (paired step-time ratio)"
    return f"{ctx.budget['max_seconds']:g} s of training per run (each run calibrates its own step count)"


def _widened(ctx: Context) -> dict[str, list[float]]:
    """Returns {name: the LRs its tune added past an edge of ``ctx.lrs``} for the candidates it widened."""
    grids = {c.name: load_json(tune_file(ctx, c))["grid"]["lrs"] for c in ctx.candidates}
    added = {name: [lr for lr in lrs if lr not in ctx.lrs] for name, lrs in grids.items()}
    return {name: lrs for name, lrs in added.items() if lrs}


def _tuning_rows(ctx: Context) -> list[list[str]]:
    """Returns one row per candidate: final PPL per LR of the grid (best *), best LR, budget, warnings."""
    rows = []
    for c in ctx.candidates:
        summary = load_json(tune_file(ctx, c))
        for s in summary["presets"].values():
            best = "–" if s["best_lr"] is None else lr_key(s["best_lr"])
            rows.append(
                [
                    c.name,
                    grid_cells(s),
                    best,
                    summary["budget"]["spec"],
                    "; ".join(warnings_for(summary["presets"])),
                ]
            )
    return rows


def _notes(ctx: Context) -> list[str]:
    return [
        "Ranking: mean final validation PPL over seeds with a Student-t 95% interval; a candidate with a "
        "diverged seed ranks after every candidate without one.",
        "Perplexity test: per seed, log PPL(baseline) − log PPL(candidate) (positive: the candidate is "
        "better), seed k of each paired (same data order and initialisation seed); p from a one-sample "
        "t-test, Holm-adjusted over the candidates (the primary family); zero-shot and stability tests are "
        "the secondary family, Holm-adjusted together. An inconclusive row says nothing about direction.",
        "Realised equal time: a seed whose realised step-time ratio (the candidate's training seconds per "
        "step ÷ the baseline's) lies outside the planned ratio's interval, widened by the runs' own "
        "timing noise (each architecture's seconds per step across seeds, robust), did not train at the "
        "planned equal time: it is left out of the perplexity test (the step-ratio table shows each seed); "
        "with fewer than 2 seeds left, or a mean realised ratio whose interval misses the planned one, the "
        "test is not readable.",
        "Zero-shot test: per seed, nfeval compare-scores' paired bootstrap over items (candidate − baseline, "
        "* when its 95% interval excludes 0) and McNemar's exact test; the verdict is over seeds, the items' "
        "standard error counted as each seed's measurement error.",
        "Compute fraction (time): the step at which the candidate first reaches the baseline's best "
        "validation PPL × its step-time ratio ÷ the baseline's step there; (FLOPs): nfeval compare's.",
        "Gradient mismatch by depth: fc2's mean |gradient| of layer 0 ÷ the last layer's, averaged over "
        f"updates {ctx.scale.fig3_window[0]}–{ctx.scale.fig3_window[1]} of each run (the beginning of "
        "training, Shleifer et al. 2021 Figure 3): above 1, the early layers get the larger gradients.",
        "Stability: nfeval analyze stability on each architecture's initialisation (updates survived of a "
        "learning rate rising geometrically from 1e-5 to 1), same batches and seeds for all; divergence: "
        "a non-finite loss or gradient, or a running median loss above the first updates' mean + a "
        "multiple of their std (the batch noise; nfeval.analysis.divergence).",
        "Curves (first seed): validation PPL vs FLOPs and vs each run's measured wall-clock; on a "
        "shared machine the latter carries the load of the moment, which is why equal time is fixed "
        "in steps from the paired step-time ratio instead.",
        "A best LR on the edge of the grid (see the tuning table's warnings) means the grid should be "
        "widened before the ranking is trusted.",
    ]
