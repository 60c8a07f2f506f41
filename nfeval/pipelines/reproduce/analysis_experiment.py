"""Figures 3–5: ``nfeval analyze`` (grads, gains, stability) on the runs of ``nfeval reproduce``.

Each analysis is the command itself, run through its own parser, writing its PNG and JSON under
``<out>/experiments/fig3-5/``; a finished analysis (its PNG, written after its JSON) is not redone.
Gradients are measured on each finished run at the end of its budget (the paper averages updates
950–1000 of a long run; ``nfeval train --grad-stats`` records such a window when a run is that long);
the stability test trains its own short runs from each preset's initialisation, as the command does.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from ...engine.config import load_json
from . import verdict
from .plan import RUNS
from .runner import Context, log, run_dir

ARCH_LABELS = {"postnorm": "Post-LN", "prenorm": "Pre-LN", "normformer": "NormFormer"}
KIND = "fc2"  # the paper's Figure 3 parameter: the second FFN weight


def available() -> bool:
    """Returns whether this build has ``nfeval analyze`` (nfeval.analysis)."""
    import importlib.util

    return importlib.util.find_spec("nfeval.analysis") is not None


def analyze(argv: list[str], png: str) -> dict[str, Any]:
    """Runs ``nfeval analyze ARGV --out PNG`` unless PNG exists; returns the JSON it wrote beside it."""
    from ...commands import analyze as cli

    if not os.path.isfile(png):
        parser = argparse.ArgumentParser(prog="nfeval analyze")
        cli.add_arguments(parser)
        log(f"nfeval analyze {' '.join(argv)}")
        cli.run(parser.parse_args([*argv, "--output", png]))
    return load_json(os.path.splitext(png)[0] + ".json")


def _named_links(ctx: Context, keys: tuple[str, ...], seed: int) -> list[str]:
    """Returns links named by run key to the finished runs of ``seed`` (analyze names models by folder)."""
    folder = os.path.join(ctx.out, "experiments", "fig3-5", "models", f"seed{seed}")
    os.makedirs(folder, exist_ok=True)
    links = []
    for key in keys:
        link, target = os.path.join(folder, key), os.path.abspath(run_dir(ctx, key, seed))
        if os.path.isfile(os.path.join(target, "model.safetensors")):
            if not os.path.lexists(link):
                os.symlink(target, link)
            links.append(link)
    return links


def grads(ctx: Context, keys: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    """Returns {run key: [per-layer mean |grad| of fc2, one list per seed]} (Figure 3), per seed."""
    folder = os.path.join(ctx.out, "experiments", "fig3-5")
    s = ctx.scale
    out: dict[str, list[list[float]]] = {k: [] for k in keys}
    for seed in ctx.seed_values:
        links = _named_links(ctx, keys, seed)
        if not links:
            continue
        argv = ["grads", *(a for link in links for a in ("--ckpt", link)), "--kind", KIND]
        argv += ["--batches", str(s.grad_batches), "--batch-size", str(s.batch_size)]
        argv += ["--seq-len", str(s.seq_len), "--seed", str(seed)]
        if "clm-prenorm" in {os.path.basename(x) for x in links}:
            argv += ["--baseline", "clm-prenorm"]
        result = analyze(argv, os.path.join(folder, f"fig3_grads_seed{seed}.png"))
        for model in result["models"]:
            out[model["name"]].append(model["values"][KIND])
    return out


def _first_over_last(values: list[float]) -> float:
    return math.log(values[0] / values[-1])


def grad_claims(per_run: dict[str, list[list[float]]]) -> tuple[list[dict], list[list[str]]]:
    """Returns (claims, table rows) for Figure 3 from each run's per-seed fc2 values by layer."""
    rows = []
    for key, seeds in per_run.items():
        layers = list(zip(*seeds)) if seeds else []
        rows.append(
            [RUNS[key].label, *(verdict.fmt_mean_std([1e3 * v for v in layer], 3) for layer in layers)]
        )
    ratio = {k: [_first_over_last(v) for v in seeds] for k, seeds in per_run.items()}
    claims = []
    if ratio.get("clm-prenorm"):
        claims.append(
            {
                "claim": "Pre-LN: the first layer's fc2 gets a larger gradient than the last layer's",
                "measured": f"log(first/last) {verdict.fmt_mean_std(ratio['clm-prenorm'], 3)}",
                **verdict.decide(ratio["clm-prenorm"]),
            }
        )
    if ratio.get("clm-postnorm"):
        post = [-r for r in ratio["clm-postnorm"]]
        claims.append(
            {
                "claim": "Post-LN: the last layer's fc2 gets a larger gradient than the first layer's",
                "measured": f"log(last/first) {verdict.fmt_mean_std(post, 3)}",
                **verdict.decide(post),
            }
        )
    if ratio.get("clm-prenorm") and ratio.get("clm-normformer"):
        gap = [abs(p) - abs(n) for p, n in zip(ratio["clm-prenorm"], ratio["clm-normformer"])]
        claims.append(
            {
                "claim": "NormFormer's first and last layers' fc2 gradients are closer than Pre-LN's",
                "measured": f"|log(first/last)| Pre-LN minus NormFormer {verdict.fmt_mean_std(gap, 3)}",
                **verdict.decide(gap),
            }
        )
    return claims, rows


def stability(ctx: Context, keys: tuple[str, ...]) -> dict[str, Any]:
    """Runs the increasing-LR stability test (Figure 5) on the presets of ``keys``; returns its JSON."""
    s = ctx.scale
    presets = [f"{RUNS[k].arch}-{s.size}" for k in keys]
    argv = ["stability", *(a for p in presets for a in ("--preset", p)), "--seeds", str(ctx.seeds)]
    argv += ["--updates", str(s.stability_updates), "--batch-size", str(s.stability_batch[0])]
    argv += ["--seq-len", str(s.stability_batch[1])]
    return analyze(
        argv, os.path.join(ctx.out, "experiments", "fig3-5", f"fig5_stability_seeds{ctx.seeds}.png")
    )


def stability_parts(
    result: dict[str, Any], keys: tuple[str, ...], size: str
) -> tuple[list[dict], list[list]]:
    """Returns (claims, table rows) of the stability test."""
    name = {k: f"{RUNS[k].arch}-{size}" for k in keys}
    rows = [
        [
            r["preset"],
            f"{r['survived_mean']:.1f} ± {r['survived_std']:.1f}",
            f"{r['survived_all']} of {r['seeds']}",
            "–" if r["lr_at_divergence_mean"] is None else f"{r['lr_at_divergence_mean']:.3g}",
            "–" if r["attn_logit_max"] is None else f"{r['attn_logit_max']:.3g}",
            str(r["fp16_overflow_seeds"]),
        ]
        for r in result["summary"]
    ]
    survived = {k: [run["survived"] for run in result["runs"][name[k]]] for k in keys}
    updates = result["settings"]["updates"]
    claims = []
    for other in ("clm-prenorm", "clm-postnorm"):
        if other in keys and "clm-normformer" in keys:
            diffs = [n - o for n, o in zip(survived["clm-normformer"], survived[other])]
            claims.append(
                {
                    "claim": "NormFormer survives more updates of the rising LR than "
                    f"{ARCH_LABELS[RUNS[other].arch]}",
                    "measured": f"{verdict.fmt_mean_std(survived['clm-normformer'], 1)} vs "
                    f"{verdict.fmt_mean_std(survived[other], 1)} of {updates} updates",
                    **verdict.decide(diffs),
                }
            )
    return claims, rows


def figures_3_to_5(ctx: Context, keys: tuple[str, ...]) -> dict[str, Any]:
    """Figures 3–5: returns the section parts (gradient table, gains, stability table, claims, PNGs)."""
    if not available():
        return {
            "status": "not available in this build",
            "notes": ["`nfeval analyze` is not part of this build."],
        }
    folder = os.path.join(ctx.out, "experiments", "fig3-5")
    per_run = grads(ctx, keys)
    claims, grad_rows = grad_claims(per_run)
    n_layer = max((len(v[0]) for v in per_run.values() if v), default=0)
    tables = [
        {
            "title": "Figure 3: mean |∂L/∂W| of fc2 by layer (×1e-3), end of training, mean ± std over seeds",
            "columns": ["run", *(f"layer {i}" for i in range(n_layer))],
            "rows": grad_rows,
        }
    ]
    figures = [os.path.join(folder, f"fig3_grads_seed{ctx.seed_values[0]}.png")]
    gains_table = _gains_table(ctx, os.path.join(folder, "fig4_gains.png"), n_layer)
    if gains_table:
        tables.append(gains_table)
        figures.append(os.path.join(folder, "fig4_gains.png"))
    result = stability(ctx, keys)
    stab_claims, stab_rows = stability_parts(result, keys, ctx.scale.size)
    claims += stab_claims
    columns = [
        "preset",
        "updates survived",
        "survived all",
        "LR at divergence",
        "max |q·k|/√d",
        "fp16 overflow (seeds)",
    ]
    tables.append(
        {
            "title": f"Figure 5: LR rising geometrically from {result['settings']['lr_start']:g} to "
            f"{result['settings']['lr_end']:g} over {result['settings']['updates']} updates",
            "columns": columns,
            "rows": stab_rows,
        }
    )
    figures.append(os.path.join(folder, f"fig5_stability_seeds{ctx.seeds}.png"))
    notes = ["Figure 4's gains are reported without a verdict: the paper describes them, it states no test."]
    return {
        "tables": tables,
        "claims": claims,
        "figures": figures,
        "notes": notes,
        "data": {"grads": per_run, "stability": result["summary"]},
    }


def _gains_table(ctx: Context, png: str, n_layer: int) -> dict[str, Any] | None:
    """Returns Figure 4's table (NormFormer's learned gains by layer, first seed; plotted to ``png``), or
    None when there is no NormFormer run."""
    nf = _named_links(ctx, ("clm-normformer",), ctx.seed_values[0])
    if not nf:
        return None
    gains = analyze(["gains", nf[0]], png)["models"][0]["gains"]
    rows = [
        [name, *(f"{v:.3f}" for v in values)]
        for name, values in (
            ("FFN LN γ (mean)", gains["ffn_ln_mean"]),
            ("post-attn LN γ (mean)", gains["attn_ln_mean"]),
            ("HeadScale γ (mean over heads)", [sum(h) / len(h) for h in gains["head_gain"] or []]),
        )
        if values
    ]
    return {
        "title": "Figure 4: NormFormer's learned gains by layer (seed 1)",
        "columns": ["gain", *(f"layer {i}" for i in range(n_layer))],
        "rows": rows,
    }
