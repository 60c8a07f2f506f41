"""``nfeval reproduce`` tunes the LR of every architecture before the comparison runs (``nfeval tune``),
so that every comparison is between tuned runs, as in the paper (its Table 1 LRs were chosen per
architecture and size).

One sweep per objective over the presets the selected experiments train (Pre-LN, NormFormer, Post-LN;
the ablations share NormFormer's preset), the scale's LR grid (``Scale.tune_lrs``) and budget
(``Scale.tune_budget``), into ``<out>/tune/<objective>/``. It is run once per output folder: ``nfeval
tune`` resumes point by point, so a rerun, every seed and every section reuse the finished points, and
a later ``--only`` that needs another preset trains just that preset's points. Cost: presets × LRs
runs (tiny: 3 presets × 7 LRs × 1000 steps, about 16 min on one quiet core).
"""

from __future__ import annotations

import os
from typing import Any

from ...base.jsonio import load_json
from ...tune.points import POINTS
from ...tune.results import grid_cells, lr_key, tried, warnings_for
from ...tune.sweep import tune
from .. import lr_band, trained_gate
from ..lr_band import TUNE_SEED_BASE, tune_seed_values
from .plan import RUNS
from .run_specs import Context, log, preset_name, train_config


def run_tune(ctx: Context, keys: list[str], jobs: int = 1) -> dict[str, str]:
    """Tunes the LR of every preset the runs ``keys`` train over the grid and each best LR's band
    neighbours (``lr_band.tune_band``), ``jobs`` points at a time (none under ``--reread``: the finished
    points are summarised); returns {objective: tune.json path}."""
    files = {}
    for objective in dict.fromkeys(RUNS[k].objective for k in keys):
        runs = [k for k in keys if RUNS[k].objective == objective]
        out = os.path.join(ctx.out, "tune", objective)
        grid = {
            "lrs": ctx.scale.tune_lrs,
            "seeds": tune_seed_values(ctx.tune_seeds),
            "budget": ctx.scale.tune_budget,
        }
        presets = tuned_presets(out, [preset_name(ctx, k) for k in runs], grid)
        # the scale's recipe; tune sets preset, lr, budget and the seeds TUNE_SEED_BASE … (never judged)
        base = train_config(ctx, runs[0], seed=TUNE_SEED_BASE)
        log(
            f"tuning {', '.join(presets)} ({objective}) over {ctx.scale.tune_lrs}, {ctx.scale.tune_budget}, "
            f"{ctx.tune_seeds} seed(s)"
        )
        files[objective] = os.path.join(out, "tune.json")
        if ctx.reread and not os.path.isdir(os.path.join(out, POINTS)) and os.path.isfile(files[objective]):
            lr_band.restate(files[objective])  # a summary kept without its points: read as it stands
            continue
        lr_band.tune_band(
            lambda extra, presets=presets, base=base, out=out: tune(
                base,
                presets,
                list(ctx.scale.tune_lrs),
                ctx.scale.tune_budget,
                out,
                seeds=ctx.tune_seeds,
                jobs=jobs,
                progress=ctx.progress,
                launch=ctx.launch,
                extra=extra,
                report_only=ctx.reread,
            ),
            ctx.unigram_ppl,
        )
    return files


def tuned_presets(out: str, needed: list[str], grid: dict[str, Any]) -> list[str]:
    """Returns the presets to tune into ``out``: ``needed`` after every preset its ``tune.json`` already
    summarises over the same ``grid`` ({lrs, seeds, budget}: the LR list, the tune seeds, the budget
    spec), so a narrower ``--only`` rewrites that summary without dropping the presets an earlier
    invocation tuned (their points are finished: nothing retrains)."""
    path = os.path.join(out, "tune.json")
    earlier: list[str] = []
    if os.path.isfile(path):
        summary = load_json(path)
        stored = summary.get("grid") or {}
        same = (
            list(stored.get("lrs") or []) == list(grid["lrs"])
            and list(stored.get("seeds") or []) == list(grid["seeds"])
            and (summary.get("budget") or {}).get("spec") == grid["budget"]
        )
        earlier = list(stored.get("presets") or []) if same else []
    return list(dict.fromkeys([*earlier, *needed]))


def tuning_rows(ctx: Context) -> tuple[list[list[str]], list[str]]:
    """Returns the report's tuning table (objective, preset, final PPL per LR of the grid with the best
    marked *, best LR, budget) and its warnings (a best LR on the grid's edge, no usable LR)."""
    rows, warnings = [], []
    for objective, path in ctx.tune_files.items():
        summary: dict[str, Any] = load_json(path)
        for preset, s in summary["presets"].items():
            best = "–" if s["best_lr"] is None else lr_key(s["best_lr"])
            rows.append([objective, preset, grid_cells(s), best, summary["budget"]["spec"]])
        warnings += [f"LR tune ({objective}): {w}" for w in warnings_for(summary["presets"])]
        if ctx.unigram_ppl is not None and objective == "clm":  # the gate reads causal-LM perplexities
            warnings += [
                f"LR tune ({objective}): {preset} did not train at any LR of its grid under this recipe "
                f"(every mean final PPL at or above the gate's {trained_gate.threshold(ctx.unigram_ppl):.1f})"
                for preset, s in summary["presets"].items()
                if len(trained_gate.failed_lrs(s, ctx.unigram_ppl)) == sum(map(tried, s["per_lr"].values()))
            ]
    return rows, warnings
