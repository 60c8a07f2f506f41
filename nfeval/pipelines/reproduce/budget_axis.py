"""The token budget as an axis: Figure 2's primary comparison (tuned Pre-LN vs tuned NormFormer at equal
time) repeated at several token budgets, each in its own ``nfeval reproduce`` folder
``<out>/tokens=<T>/`` with its own LR tune (so each budget's LRs are re-tuned), and the gain fitted
against tokens.

The gain of a seed is log PPL(Pre-LN) − log PPL(NormFormer) at the end of both schedules (equal time
under paired step budgets; positive: NormFormer better). The fit is ordinary least squares of every
(budget, seed) gain on log2(tokens), so its slope is the change of the gain per doubling of the
budget, with a Student-t 95% interval (n − 2 degrees of freedom). It says whether the fitted line
changes sign inside the measured range; it does not extrapolate: a line fitted over one decade of
tokens says nothing about a run a million times longer.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from typing import Any

from ... import __version__
from ...base.artifacts import (
    atomic_write_json,
    atomic_write_text,
    git_hash,
    hardware,
    hardware_key,
    provenance,
)
from ...base.errors import ConfigError
from ...base.jsonio import load_json, reading
from ...report import verdict
from .. import archive, judging, runs
from ..perplexity import final_ppl, log_ratio
from ..scales import SCALES
from ..trained_gate import is_trained, mark
from . import sections
from .budget_report import PAIR, plot, render, tokens_text
from .run_specs import log

EXPERIMENT = "fig2-clm"
CLAIM = "fig2-clm/equal-time"
LANDED = (
    "the report.json that nfeval reproduce writes in a token budget's folder (rerun it to rewrite the file)"
)
MIN_BUDGETS = 2
SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}


def parse_token_budgets(text: str) -> tuple[int, ...]:
    """Returns the token counts of ``--token-budgets`` ("0.5M,2M,8M"; suffixes k, M, B), ascending;
    ConfigError on a malformed value, a repeat or fewer than two budgets."""
    values = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMbB]?)", part)
        if not match:
            raise ConfigError(f"--token-budgets {text!r}: {part!r} is not a token count such as 500k or 2M")
        values.append(int(float(match[1]) * SUFFIXES[match[2].lower()]))
    if len(values) < MIN_BUDGETS or len(set(values)) != len(values):
        raise ConfigError(f"--token-budgets {text!r}: expected at least {MIN_BUDGETS} different token counts")
    return tuple(sorted(values))


def budget_steps(scale_name: str, tokens: int) -> int:
    """Returns the baseline's updates that hold ``tokens`` at the scale's batch (sequences × tokens ×
    accumulation); ConfigError when that is less than one update."""
    s = SCALES[scale_name]
    steps = tokens // (s.batch_size * s.seq_len * s.grad_accum)
    if steps < 1:
        raise ConfigError(f"--token-budgets: {tokens} tokens is less than one update of the {s.name} batch")
    return steps


def run_budget_axis(cfg) -> dict[str, Any]:
    """Runs (or resumes) Figure 2 at each of ``cfg.token_budgets`` into ``cfg.out/tokens=<T>/`` and writes
    ``cfg.out/report.{json,md}`` with the fit; returns {"report": path, ...} or {"pending": ...}."""
    from . import run_reproduce  # the package's entry point, which imports this module

    if cfg.only not in (None, (EXPERIMENT,)) or cfg.minutes is not None or cfg.steps is not None:
        raise ConfigError(
            "--token-budgets runs Figure 2 alone, its steps from the tokens: drop --only/--minutes/--steps"
        )
    start = time.time()
    folders = {}
    for tokens in cfg.token_budgets:
        steps = budget_steps(cfg.scale, tokens)
        folder = os.path.join(cfg.out, f"tokens={tokens}")
        folders[tokens] = folder
        if os.path.isdir(folder):
            archive.unpack(folder)  # a committed budget keeps its records in records.tar.xz
        if landed(folder, steps) and not cfg.reread:
            log(f"token budget {tokens_text(tokens)}: finished in {folder} (its report and run records)")
            continue
        log(f"token budget {tokens_text(tokens)}: {steps} updates for Pre-LN → {folder}")
        sub = dataclasses.replace(cfg, out=folder, steps=steps, only=(EXPERIMENT,), token_budgets=None)
        result = run_reproduce(sub)
        if "pending" in result:
            return result
    if cfg.tune_only:
        return {"tuned": f"every budget's LR tune is finished in {cfg.out}; rerun without --tune-only"}
    report = assemble(cfg, folders, start)
    path = write(cfg.out, report)
    log(f"report: {path}")
    return {"report": path, "budget_axis": report}


def landed(folder: str, steps: int) -> bool:
    """Returns whether the budget in ``folder`` is finished for good: its report holds a finished Figure 2
    at ``steps``, every judged run's record is there and the Figure 2 section was computed from them. Such
    a folder is read, never re-run: a committed one keeps its reports and run records but not its run
    folders (checkpoints), which a rerun of its sections would need."""
    path = os.path.join(folder, "report.json")
    settings = os.path.join(folder, "reproduce.json")
    if not (os.path.isfile(path) and os.path.isfile(settings)):
        return False
    if load_json(settings).get("budget") != {"max_steps": steps}:
        return False
    report = load_json(path)
    with reading(path, LANDED):
        done = any(s["name"] == EXPERIMENT and s["status"] == "done" for s in report["sections"])
        seeds = list(report["header"].get("eval_seeds") or [])
    section = os.path.join(folder, "experiments", EXPERIMENT, "section.json")
    if not (done and bool(seeds) and all(len(_records(folder, k, seeds)) == len(seeds) for k in PAIR)):
        return False
    # a run trained again since (its record changed), a section read under older rules or a deleted
    # section: the budget's report is redone
    if not os.path.isfile(section) or load_json(section).get("rules") != verdict.RULES:
        return False
    return sections.read_from(load_json(section), sections.run_records(folder, PAIR))


def budget_row(tokens: int, folder: str) -> dict[str, Any]:
    """Returns one budget's row from its reproduce folder: steps, tuned LRs, per-seed PPLs (on the judging
    set where the runs were read there) and gains over the seeds its primary claim reads (both runs
    trained, ``trained_gate``), the seeds left out and why, the claim's verdict (with its LR sensitivity
    and whether its realised time was off plan)."""
    path = os.path.join(folder, "report.json")
    report = load_json(path)
    with reading(path, LANDED):
        (section,) = [s for s in report["sections"] if s["name"] == EXPERIMENT]
        (claim,) = [c for c in section["claims"] if c["id"] == CLAIM]
        eval_seeds = [int(s) for s in report["header"]["eval_seeds"]]
        unigram = report["header"].get("unigram_ppl")
        verdict = {"verdict": claim["verdict"], "p_holm": claim.get("p_holm")}
        verdict["off_plan"] = bool(claim.get("off_plan"))
        verdict["measurement_se"] = claim.get("measurement_se")
        verdict["lr_sensitivity"] = claim.get("lr_sensitivity")
    records = {k: _records(folder, k, eval_seeds) for k in PAIR}
    trained = {k: {r["seed"] for r in rs if is_trained(mark(r, unigram))} for k, rs in records.items()}
    ppl = {k: dict(zip((r["seed"] for r in rs), final_ppl(rs))) for k, rs in records.items()}
    seeds = sorted(trained[PAIR[0]] & trained[PAIR[1]])  # the claim's pairs
    gains = [log_ratio(ppl[PAIR[0]][s], ppl[PAIR[1]][s]) for s in seeds]
    return {
        "tokens": tokens,
        "steps": {k: rs[0].get("steps") for k, rs in records.items() if rs},
        "lr": {k: rs[0]["lr"] for k, rs in records.items() if rs},
        "seeds": seeds,
        "left_out": {"did not train": sorted(set(eval_seeds) - (trained[PAIR[0]] & trained[PAIR[1]]))},
        "judged": all(judging.judged(r) for rs in records.values() for r in rs),
        "ppl": {k: [ppl[k][s] for s in seeds] for k in PAIR},
        "gains": gains,
        **verdict,
        "tune_seeds": report["header"].get("tune_seeds"),
        "folder": os.path.basename(folder),
    }


def _records(folder: str, key: str, seeds: list[int]) -> list[dict[str, Any]]:
    done = [runs.finished(os.path.join(folder, "runs", key, f"seed{s}")) for s in seeds]
    return [r for r in done if r is not None]


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Returns the least-squares line of every finite (budget, seed) gain on log2(tokens): slope (per
    doubling) and intercept with 95% t-intervals, the fitted gain at the smallest and largest budget with
    their intervals, and whether the line (or its interval at an end) changes sign inside the range."""
    from scipy import stats

    xs = [math.log2(r["tokens"]) for r in rows for g in r["gains"] if math.isfinite(g)]
    ys = [g for r in rows for g in r["gains"] if math.isfinite(g)]
    n = len(xs)
    if n < 3 or len(set(xs)) < 2:
        return {"n": n, "slope": None, "why": "fewer than 3 finite gains over 2 budgets: no fit"}
    result = stats.linregress(xs, ys)  # numpy scalars: made plain floats, so report.json holds numbers
    slope, intercept, stderr = float(result.slope), float(result.intercept), float(result.stderr)
    t = float(stats.t(n - 2).ppf(0.975))
    residual = math.sqrt(sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys)) / (n - 2))
    mean_x = sum(xs) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)

    def at(x: float) -> dict[str, float]:
        value = intercept + slope * x
        half = t * residual * math.sqrt(1 / n + (x - mean_x) ** 2 / sxx)
        return {"log2_tokens": x, "gain": value, "low": value - half, "high": value + half}

    curve = [at(min(xs) + (max(xs) - min(xs)) * i / 20) for i in range(21)]
    ends = [curve[0], curve[-1]]
    crossing = -intercept / slope if slope else None
    return {
        "n": n,
        "slope": slope,
        "slope_low": slope - t * stderr,
        "slope_high": slope + t * stderr,
        "slope_p": float(result.pvalue),
        "intercept": intercept,
        "ends": ends,
        "curve": curve,
        "sign_change": (ends[0]["gain"] > 0) != (ends[1]["gain"] > 0),
        "zero_at_tokens": 2**crossing if crossing is not None and -60 < crossing < 80 else None,
        "rule": "ordinary least squares of each (budget, seed) gain on log2(tokens); 95% Student-t "
        "intervals with n − 2 degrees of freedom; the fitted gain's interval at an end is the line's "
        "(mean response), not a new seed's",
    }


def assemble(cfg, folders: dict[int, str], start: float) -> dict[str, Any]:
    """Returns report.json's content: the header, one row per budget and the fit."""
    rows = [budget_row(t, f) for t, f in folders.items()]
    headers = [load_json(os.path.join(f, "report.json"))["header"] for f in folders.values()]
    first = headers[0]
    return {
        "nfeval": {"provenance": provenance()},
        "header": {
            "version": __version__,
            "git": git_hash(),
            "command": cfg.command,
            "scale": cfg.scale,
            # the first budget whose run folders are kept states the shape (an older one keeps records only)
            "facts": next((h["facts"] for h in headers if h.get("facts")), None),
            "recipes": first.get("recipes"),
            "seeds": first.get("seeds"),
            "eval_seeds": first.get("eval_seeds"),
            "tune_seeds": first.get("tune_seeds"),
            "hardware": hardware_key(hardware()),
            "cpu_count": os.cpu_count(),
            "jobs": first.get("jobs", cfg.jobs),  # --runs-per-gpu resolved
            "compute_paths": sorted({p for h in headers for p in h.get("compute_paths") or []}),
            "train_hours": sum(h.get("train_hours", 0) for h in headers),
            "wall_min": (time.time() - start) / 60,
        },
        "token_budgets": list(folders),
        "budgets": rows,
        "fit": fit(rows),
    }


def write(out: str, report: dict[str, Any]) -> str:
    """Writes ``out/report.json``, ``out/budget_gain.png`` and ``out/report.md``; returns the markdown
    path."""
    atomic_write_json(os.path.join(out, "report.json"), report)
    plot(report, os.path.join(out, "budget_gain.png"))
    path = os.path.join(out, "report.md")
    atomic_write_text(path, render(report) + "\n")
    return path
