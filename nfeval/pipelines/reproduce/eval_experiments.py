"""The experiments that score trained models: Table 2 (zero-shot, with the GPT-3 reference rows) and
Table 3 (the GLUE seven-learning-rate sweep on the masked LMs). Each returns the parts of its report
section, as ``training_experiments`` does."""

from __future__ import annotations

import math
import os
import statistics
from typing import Any

from ...base.plots import plot_bars
from ...engine.checkpoint import read_config
from ..stages import zeroshot_data
from . import verdict
from .plan import RUNS
from .runner import Context, log, run_dir, table_section

CLOZE_METRIC = "acc_per_token"
# Small CPU models want larger fine-tuning learning rates than the base-model default grid.
SMALL_MODEL_GLUE_LRS = (1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 3e-3)


def _metric(task: str) -> str:
    from ...tasks import GPT3_METRIC, canonical_name

    return GPT3_METRIC.get(canonical_name(task), CLOZE_METRIC)


def zeroshot_scores(ctx: Context, key: str, seed: int, data_dir: str, tasks: list[str]) -> dict[str, Any]:
    """Scores one run zero-shot (cached by model fingerprint); returns {task: (value, stderr)}."""
    from ...zeroshot.evaluate import evaluate

    folder = os.path.join(ctx.out, "experiments", "table2")
    device = None if ctx.device == "auto" else ctx.device
    results = evaluate(
        run_dir(ctx, key, seed),
        tasks=tasks[:1],
        data_dir=data_dir,
        device=device,
        output=os.path.join(folder, f"{key}-seed{seed}_cloze.json"),
    )["results"]
    if len(tasks) > 1:
        results |= evaluate(
            run_dir(ctx, key, seed),
            tasks=tasks[1:],
            data_dir=data_dir,
            device=device,
            limit=ctx.scale.zeroshot_limit,
            output=os.path.join(folder, f"{key}-seed{seed}.json"),
        )["results"]
    out = {}
    for task, r in results.items():
        m = _metric(task)
        out[task] = (r[f"{m},none"], r.get(f"{m}_stderr,none"))
    return out


def zeroshot(ctx: Context, keys: tuple[str, ...]) -> dict[str, Any]:
    """Table 2: each model's zero-shot accuracy (mean ± std over seeds) and the GPT-3 reference rows."""
    from ...report.leaderboard import load_reference
    from ...tasks import canonical_name

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
    columns = ["model"] + [f"{t} ({_metric(t)}, %)" for t in names]
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
        "claim": f"{RUNS[cand].label} scores higher than {RUNS[base].label} on {t} ({_metric(t)})",
        "measured": f"{verdict.fmt_mean_std([100 * c[t][0] for c in scores[cand]], 1)}% vs "
        f"{verdict.fmt_mean_std([100 * b[t][0] for b in scores[base]], 1)}%; "
        f"difference {verdict.fmt_mean_std(diffs, 1)} points, item SE {item_se:.1f} points",
        **verdict.decide(diffs, measurement_se=item_se),
    }


def glue(ctx: Context, keys: tuple[str, ...]) -> dict[str, Any]:
    """Table 3: the GLUE seven-learning-rate sweep on each masked LM (seed 1); returns section parts."""
    from ...glue import data as glue_data
    from ...glue.metrics import MAIN_METRIC
    from ...glue.sweep import DEFAULT_LRS, Recipe, sweep

    if not ctx.glue_dir:
        return {"notes": ["GLUE skipped: no --glue-dir (pass the GLUE TSV folder, e.g. ../shared/data/glue)"]}
    lrs = DEFAULT_LRS if ctx.scale.size not in ("tiny", "small") else SMALL_MODEL_GLUE_LRS
    seed = ctx.seed_values[0]
    results = {}
    for key in keys:
        directory = run_dir(ctx, key, seed)
        fingerprint = read_config(directory)[1]["fingerprint"]
        out = os.path.join(ctx.out, "experiments", "fig2-mlm", "glue", f"{key}-{fingerprint[:12]}")
        log(f"GLUE {key}: {', '.join(ctx.glue_tasks)} × {len(lrs)} learning rates")
        recipe = Recipe(epochs=ctx.scale.glue_epochs, max_len=ctx.scale.seq_len)
        device = None if ctx.device == "auto" else ctx.device
        results[key] = sweep(
            directory,
            tasks=list(ctx.glue_tasks),
            lrs=list(lrs),
            out_dir=out,
            glue_dir=ctx.glue_dir,
            recipe=recipe,
            device=device,
            progress=ctx.progress,
        )
    base, cand = keys
    rows, claims = [], []
    for key in keys:
        tasks = results[key]["tasks"]
        rows.append(
            [RUNS[key].label]
            + [f"{tasks[t]['score']:.4f} @ lr {tasks[t]['best_lr']:g}" for t in ctx.glue_tasks]
        )
    for t in ctx.glue_tasks:
        b, c = (results[k]["tasks"][t]["score"] for k in keys)
        se = 0.0
        if MAIN_METRIC[t] == "accuracy":  # binomial SE of a dev-set accuracy difference
            n = min(len(s) for s in glue_data.load(t, ctx.glue_dir).dev.values())
            se = math.sqrt((b * (1 - b) + c * (1 - c)) / n)
        claims.append(
            {
                "claim": f"{RUNS[cand].label} fine-tunes better on {t} than {RUNS[base].label} "
                f"(best of {len(lrs)} LRs)",
                "measured": f"{c:.4f} vs {b:.4f}"
                + (f"; binomial SE of the difference {se:.4f}" if se else ""),
                **verdict.decide([c - b], measurement_se=se),
            }
        )
    columns = ["masked LM (seed 1)"] + [f"{t} ({MAIN_METRIC[t]})" for t in ctx.glue_tasks]
    return {
        "tables": [{"title": f"GLUE, {len(lrs)}-LR sweep", "columns": columns, "rows": rows}],
        "claims": claims,
        "data": {"glue": results},
    }
