"""The experiments that score trained models: Table 2 (zero-shot, with the GPT-3 reference rows) and
Table 3 (the GLUE seven-learning-rate sweep on the masked LMs). Each returns the parts of its report
section, as ``training_experiments`` does."""

from __future__ import annotations

import math
import os
import statistics
from typing import Any

from ...base.plots import plot_bars
from ...base.sweep_points import point_dir
from ...engine.checkpoints.checkpoint import read_config
from ...glue import predictions as glue_predictions
from ...glue.config import DEFAULT_LRS, GlueConfig
from ...glue.metrics import MAIN_METRIC
from ...glue.points import SWEEP
from ...glue.recipe import Recipe
from ...glue.sweep import sweep
from ...model_adapters.config import ScoringConfig
from ...report import verdict
from ...report.leaderboard import load_reference
from ...tasks import canonical_name, judged_metric
from ...zeroshot.config import ZeroShotConfig
from ...zeroshot.evaluate import evaluate
from ..stages import zeroshot_data
from . import glue_halves
from .plan import RUNS
from .run_specs import Context, log, run_dir, table_section

# Small CPU models want larger fine-tuning learning rates than the base-model default grid.
SMALL_MODEL_GLUE_LRS = (1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 3e-3)


def zeroshot_scores(ctx: Context, key: str, seed: int, data_dir: str, tasks: list[str]) -> dict[str, Any]:
    """Scores one run zero-shot (cached by model fingerprint); returns {task: (value, stderr)}."""
    folder = os.path.join(ctx.out, "experiments", "table2")
    device = None if ctx.device == "auto" else ctx.device
    common = {"data_dir": data_dir, "scoring": ScoringConfig(device=device, progress=ctx.progress)}
    output = os.path.join(folder, f"{key}-seed{seed}_cloze.json")
    cfg = ZeroShotConfig(tasks=tasks[:1], output=output, **common)
    results = evaluate(run_dir(ctx, key, seed), cfg)["results"]
    if len(tasks) > 1:
        output = os.path.join(folder, f"{key}-seed{seed}.json")
        cfg = ZeroShotConfig(tasks=tasks[1:], limit=ctx.scale.zeroshot_limit, output=output, **common)
        results |= evaluate(run_dir(ctx, key, seed), cfg)["results"]
    out = {}
    for task, r in results.items():
        m = judged_metric(task)
        out[task] = (r[f"{m},none"], r.get(f"{m}_stderr,none"))
    return out


def zeroshot(ctx: Context, keys: tuple[str, ...]) -> dict[str, Any]:
    """Table 2: each model's zero-shot accuracy (mean ± std over seeds) and the GPT-3 reference rows."""
    data_dir, tasks = zeroshot_data(ctx.out, ctx.data_dir, ctx.scale.cloze_items, 1, log)
    scores = {k: [zeroshot_scores(ctx, k, s, data_dir, tasks) for s in ctx.seed_values] for k in keys}
    names = sorted(scores[keys[0]][0], key=lambda t: tasks.index(t) if t in tasks else len(tasks))
    rows = [
        [RUNS[k].label] + [verdict.fmt_mean_std([100 * s[t][0] for s in scores[k]], 1) for t in names]
        for k in keys
    ]
    reference = load_reference("gpt3")
    for model in reference["models"][:2]:
        row = [f"{model['name']} (reference)"]
        row += [
            f"{100 * model['scores'][c]:.1f}" if (c := canonical_name(t)) in model["scores"] else "–"
            for t in names
        ]
        rows.append(row)
    base, cand = keys
    claims = [_zeroshot_claim(scores, base, cand, t) for t in names]
    columns = ["model"] + [f"{t} ({judged_metric(t)}, %)" for t in names]
    means = [
        (RUNS[k].label, [verdict.mean_std([100 * s[t][0] for s in scores[k]])[0] for t in names])
        for k in keys
    ]
    figures = [
        plot_bars(
            names,
            means,
            os.path.join(ctx.out, "table2_zeroshot.png"),
            "Table 2: zero-shot accuracy",
            "accuracy (%)",
        )
    ]
    notes = [
        "corpus_cloze: a held-out cloze task from the training corpus's validation text (chance 25%); "
        "it stands in for the public tasks when their data is absent or the models are too small.",
        f"GPT-3 rows: {reference['citation']} (125M/350M models trained on 300B tokens; context only).",
    ]
    if len(tasks) == 1:
        notes.append("public tasks skipped: no --data-dir")
    return table_section("zero-shot", columns, rows, claims, figures, notes, {"scores": scores})


def _zeroshot_claim(scores: dict[str, list[dict]], base: str, cand: str, t: str) -> dict[str, Any]:
    """Returns the claim that ``cand`` beats ``base`` on task ``t``, decided over seeds (percentage points)
    with the items' standard error as the measurement error."""
    pairs = list(zip(scores[base], scores[cand]))
    diffs = [100 * (c[t][0] - b[t][0]) for b, c in pairs]
    item_se = 100 * statistics.fmean(math.hypot(b[t][1] or 0.0, c[t][1] or 0.0) for b, c in pairs)
    return {
        "claim": f"{RUNS[cand].label} scores higher than {RUNS[base].label} on {t} ({judged_metric(t)})",
        "measured": f"{verdict.fmt_mean_std([100 * c[t][0] for c in scores[cand]], 1)}% vs "
        f"{verdict.fmt_mean_std([100 * b[t][0] for b in scores[base]], 1)}%; "
        f"difference {verdict.fmt_mean_std(diffs, 1)} points, item SE {item_se:.1f} points",
        **verdict.decide(diffs, measurement_se=item_se),
    }


def glue(ctx: Context, keys: tuple[str, ...]) -> dict[str, Any]:
    """Table 3: each masked LM (pre-training seed 1) fine-tuned on every task of ``ctx.glue_tasks`` at
    every LR of the grid and ``Scale.glue_seeds`` fine-tuning seeds; the LR chosen on one half of dev,
    scores reported on the other (``glue_halves``); returns the section parts."""
    if not ctx.glue_dir:
        return {"notes": ["GLUE skipped: no --glue-dir (pass the GLUE TSV folder, e.g. ../shared/data/glue)"]}
    s = ctx.scale
    lrs = list(s.glue_lrs or (DEFAULT_LRS if s.size not in ("tiny", "small") else SMALL_MODEL_GLUE_LRS))
    seeds = list(range(s.glue_seeds))  # nfeval glue numbers fine-tuning seeds from 0
    tasks = list(ctx.glue_tasks)
    chosen, sizes = {}, {}
    for key in keys:
        chosen[key], sizes = _sweep_halves(ctx, key, tasks, lrs, seeds)
    base, cand = keys
    rows = [
        [RUNS[k].label]
        + [f"{verdict.fmt_mean_std(chosen[k][t]['report'], 4)} @ lr {chosen[k][t]['lr']:g}" for t in tasks]
        + [verdict.fmt_mean_std(_average(chosen[k], tasks), 4)]
        for k in keys
    ]
    claims = [
        _task_claim(
            t, MAIN_METRIC[t], base, cand, chosen[base][t]["report"], chosen[cand][t]["report"], sizes[t]
        )
        for t in tasks
    ]
    if len(tasks) > 1:
        diffs = [y - x for x, y in zip(_average(chosen[base], tasks), _average(chosen[cand], tasks))]
        claims.append(
            {
                "claim": f"{RUNS[cand].label} has the higher GLUE average ({len(tasks)} tasks)",
                "measured": f"average difference {verdict.fmt_mean_std(diffs, 4)}",
                **verdict.decide(diffs),
            }
        )
    columns = ["masked LM (pre-training seed 1)"] + [f"{t} ({MAIN_METRIC[t]})" for t in tasks] + ["average"]
    notes = [
        f"GLUE: {len(lrs)} LRs × {len(seeds)} fine-tuning seeds, {s.glue_epochs} epoch(s), the last epoch "
        "scored; the LR is chosen on the even dev rows (mean over seeds) and scores are the odd rows', "
        "mean ± std over seeds, so the reported score is not the one that chose the LR.",
    ]
    return {
        "tables": [
            {"title": f"GLUE, {len(lrs)}-LR sweep, report half of dev", "columns": columns, "rows": rows}
        ],
        "claims": claims,
        "notes": notes,
        "data": {"glue": chosen},
    }


def _task_claim(
    task: str, metric: str, base: str, cand: str, b: list[float], c: list[float], size: int
) -> dict[str, Any]:
    """Returns the claim that ``cand`` fine-tunes better on ``task`` than ``base`` (report-half scores
    ``c`` vs ``b``, one per fine-tuning seed; ``size`` the report half's row count)."""
    se = 0.0
    if metric == "accuracy":  # the report half's binomial SE of an accuracy difference
        pb, pc = statistics.fmean(b), statistics.fmean(c)
        se = math.sqrt((pb * (1 - pb) + pc * (1 - pc)) / size)
    return {
        "claim": f"{RUNS[cand].label} fine-tunes better on {task} than {RUNS[base].label} (LR chosen "
        "on the other half of dev)",
        "measured": f"{verdict.fmt_mean_std(c, 4)} vs {verdict.fmt_mean_std(b, 4)} over "
        f"{len(b)} fine-tuning seeds" + (f"; binomial SE of the difference {se:.4f}" if se else ""),
        **verdict.decide([y - x for x, y in zip(b, c)], measurement_se=se),
    }


def _sweep_halves(
    ctx: Context, key: str, tasks: list[str], lrs: list[float], seeds: list[int]
) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Runs (or resumes) run ``key``'s GLUE sweep; returns ({task: glue_halves.choose(...)}, {task:
    report-half size})."""
    s = ctx.scale
    directory = run_dir(ctx, key, ctx.seed_values[0])
    fingerprint = read_config(directory)[1]["fingerprint"]
    out = os.path.join(ctx.out, "experiments", "fig2-mlm", "glue", f"{key}-{fingerprint[:12]}")
    log(f"GLUE {key}: {', '.join(tasks)} × {len(lrs)} learning rates × {len(seeds)} seeds")
    sweep(
        directory,
        GlueConfig(
            tasks=tasks,
            lrs=lrs,
            seeds=len(seeds),
            out_dir=out,
            glue_dir=ctx.glue_dir,
            recipe=Recipe(epochs=s.glue_epochs, max_len=s.seq_len, select="last_epoch"),
            device=None if ctx.device == "auto" else ctx.device,
            progress=ctx.progress,
        ),
    )
    chosen = {t: glue_halves.choose(glue_halves.point_scores(out, t, lrs, seeds)) for t in tasks}
    sizes = {
        t: glue_halves.report_size(
            glue_predictions.read(point_dir(out, SWEEP, t, lrs[0], seeds[0]))["splits"]
        )
        for t in tasks
    }
    return chosen, sizes


def _average(per_task: dict[str, dict[str, Any]], tasks: list[str]) -> list[float]:
    """Returns each seed's mean report-half score over ``tasks``."""
    return [statistics.fmean(scores) for scores in zip(*(per_task[t]["report"] for t in tasks))]
