"""One report section per experiment: run (or load) it, and stamp it with the paper's finding, seeds,
budget and hardware. A section is finished when ``<out>/experiments/<name>/section.json`` exists (written
last); a finished section made with other seeds, under other rules (``verdict.RULES``), or from run
records that have changed since (a run trained again), is recomputed, reusing every finished run; under
``--reread`` every section is."""

from __future__ import annotations

import glob
import os
from typing import Any

from ...base.artifacts import atomic_write_json, hardware, hardware_key
from ...base.jsonio import file_sha256, load_json
from ...report import verdict
from ..runs import NotTrained
from . import ablation_experiment, analysis_experiment, eval_experiments, training_experiments
from .plan import PRIMARY_CLAIMS, Experiment
from .run_specs import Context, ensure_runs, log


def measure(ctx: Context, exp: Experiment) -> dict[str, Any]:
    """Trains what ``exp`` needs, then measures it; returns the section parts (tables, claims, ...)."""
    records = ensure_runs(ctx, exp.runs)
    if exp.name == "fig2-clm":
        return training_experiments.equal_compute(ctx, exp.name, *exp.runs, 0.60, records)
    if exp.name == "fig2-mlm":
        parts = training_experiments.equal_compute(ctx, exp.name, *exp.runs, 0.57, records)
        table3 = eval_experiments.glue(ctx, exp.runs)
        for field in ("tables", "claims", "figures", "notes"):
            parts[field] = parts.get(field, []) + table3.get(field, [])
        parts["data"]["glue"] = table3.get("data", {}).get("glue")
        return parts
    if exp.name == "table2":
        return eval_experiments.zeroshot(ctx, exp.runs)
    if exp.name == "table4":
        return ablation_experiment.table4(ctx, records)
    if exp.name == "table5":
        return ablation_experiment.table5(ctx, records)
    if exp.name == "fig6":
        return analysis_experiment.figure_6(ctx, exp.runs)
    if exp.name == "xiong":
        return training_experiments.warmup(ctx, records)
    if exp.name == "fig3-5":
        return analysis_experiment.figures_3_to_5(ctx, exp.runs)
    raise ValueError(f"unknown experiment {exp.name!r}")


def _family(claim_id: str) -> str:
    return verdict.PRIMARY if claim_id in PRIMARY_CLAIMS else verdict.SECONDARY


def section_path(ctx: Context, name: str) -> str:
    return os.path.join(ctx.out, "experiments", name, "section.json")


def run_records(out: str, keys: tuple[str, ...]) -> dict[str, str]:
    """Returns {path under ``out``: SHA-256} of every run record of the runs ``keys`` that lies in the
    folder now (each seed, each LR of a band). A record holds the run's budget, step ratio, LR and final
    PPL, so a run trained again under other inputs changes its record."""
    found = {}
    for key in keys:
        for path in glob.glob(
            os.path.join(glob.escape(out), "runs", glob.escape(key), "**", "seed*.json"), recursive=True
        ):
            found[os.path.relpath(path, out)] = file_sha256(path)
    return found


def read_from(stored: dict[str, Any], records: dict[str, str]) -> bool:
    """Returns whether ``stored`` was computed from the run records lying in the folder now: every record
    here is one it read. Records it read that are absent (a committed report keeps no runs) do not count
    against it; a section from before sections named their records is taken as it is."""
    read = stored.get("run_records")
    return read is None or all(read.get(path) == digest for path, digest in records.items())


def run_section(ctx: Context, exp: Experiment) -> dict[str, Any]:
    """Returns the finished section of ``exp``, computing it unless an up-to-date one is stored."""
    path = section_path(ctx, exp.name)
    if os.path.isfile(path):
        stored = load_json(path)
        fresh = stored.get("seeds") == ctx.seeds and stored["status"] == "done"  # else: retry (a newer build)
        fresh = fresh and stored.get("rules") == verdict.RULES and not ctx.reread
        if fresh and read_from(stored, run_records(ctx.out, exp.runs)):
            return stored
    log(f"experiment {exp.name}: {exp.title}")
    try:
        parts = measure(ctx, exp)
    except NotTrained as e:
        if not ctx.reread:
            raise
        return stub(exp, f"{NOT_READ} ({e})")
    claims = [
        {**c, "id": c.get("id") or f"{exp.name}/{i}"} | {"family": _family(c.get("id") or "")}
        for i, c in enumerate(parts.get("claims", []), 1)
    ]
    section = {
        "name": exp.name,
        "title": exp.title,
        "reference": exp.reference,
        "finding": exp.finding,
        "protocol": exp.protocol,
        "status": parts.pop("status", "done"),
        "seeds": ctx.seeds,
        "rules": verdict.RULES,
        "seed_values": ctx.seed_values,
        "budget": ctx.budget_text(),
        "scale": ctx.scale.name,
        "hardware": hardware_key(hardware()),
        "runs": list(exp.runs),
        "tables": parts.get("tables", []),
        "claims": claims if ctx.tune_files else verdict.mark_untuned(claims),
        "figures": [os.path.relpath(f, ctx.out) for f in parts.get("figures", [])],
        "notes": parts.get("notes", []),
    }
    if "windows" in parts:  # the updates a figure was read over, per run (Figure 7)
        section["windows"] = parts["windows"]
    section["run_records"] = run_records(ctx.out, exp.runs)
    atomic_write_json(os.path.join(ctx.out, "experiments", exp.name, "data.json"), parts.get("data", {}))
    atomic_write_json(path, section)
    return section


LEFT_OUT = "not run (left out by --only)"
NOT_READ = "not read again: a run it needs is not trained yet"
PENDING = "pending (the invocation writing this report has not reached it yet)"


def stub(exp: Experiment, status: str) -> dict[str, Any]:
    """Returns a section without results, saying why (``status``)."""
    return {
        "name": exp.name,
        "title": exp.title,
        "reference": exp.reference,
        "finding": exp.finding,
        "protocol": exp.protocol,
        "status": status,
        "claims": [],
        "tables": [],
        "figures": [],
        "notes": [],
    }


def section(ctx: Context, exp: Experiment, only: set[str] | None) -> dict[str, Any]:
    """Returns the section of ``exp``: run when selected by ``only`` (None: all), else as stored."""
    path = section_path(ctx, exp.name)
    if only is None or exp.name in only:
        found = run_section(ctx, exp)
    else:
        found = load_json(path) if os.path.isfile(path) else stub(exp, LEFT_OUT)
    return {k: v for k, v in found.items() if k != "run_records"}  # which files it read: section.json's own
