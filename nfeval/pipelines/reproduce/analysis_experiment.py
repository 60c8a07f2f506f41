"""Figures 3–5: ``nfeval analyze`` (grads, gains, stability) on the runs of ``nfeval reproduce``.

Each analysis is the command's own library call (``analysis.runs.analyze``), writing its PNG and JSON under
``<out>/experiments/fig3-5/``; a finished analysis (its PNG, written after its JSON) is not redone.
Figures 3 and 7 read the gradients the runs recorded while training (``gradient_experiment``). The
stability test trains its own short runs from each preset's initialisation on the compared runs' own
model config (the scale's overrides) and tokenizer, in the lowest autocast precision of the device.
"""

from __future__ import annotations

import os
from typing import Any

from ...analysis import runs as analysis_runs
from ...report import verdict
from .. import analyses
from ..runs import finished
from .gradient_experiment import gradient_parts
from .run_specs import Context, log, run_dir

STABILITY_ARCHS = ("prenorm", "normformer", "normformer-resscale", "postnorm")


def _named_links(ctx: Context, keys: tuple[str, ...], seed: int) -> list[str]:
    """Returns links named by run key to the finished runs of ``seed`` (analyze names models by folder).
    The links are relative, so they hold in a moved or copied ``--out``; an older absolute one is redone."""
    folder = os.path.join(ctx.out, "experiments", "fig3-5", "models", f"seed{seed}")
    os.makedirs(folder, exist_ok=True)
    links = []
    for key in keys:
        link, target = os.path.join(folder, key), run_dir(ctx, key, seed)
        # a finished run whose weights a committed folder did not keep is still named: its stored
        # analysis is reused, and one that must run fails on the missing weights instead of dropping it
        done = finished(target)
        if (
            os.path.isfile(os.path.join(target, "model.safetensors"))
            or (done or {}).get("status") == "finished"
        ):
            relative = os.path.relpath(target, folder)
            if os.path.lexists(link) and os.readlink(link) != relative:
                os.remove(link)
            if not os.path.lexists(link):
                os.symlink(relative, link)
            links.append(link)
    return links


def stability(ctx: Context) -> dict[str, Any]:
    """Runs the increasing-LR stability test (Figure 5) on STABILITY_ARCHS at the runs' own model config
    and tokenizer, in the device's lowest autocast precision; returns its JSON."""
    s = ctx.scale
    settings = analyses.stability_settings(s, ctx.device)
    presets = [f"{arch}-{s.size}" for arch in STABILITY_ARCHS]
    options = analysis_runs.StabilityOptions(
        presets=presets,
        seeds=ctx.seeds,
        model=s.model,
        settings=settings,
        tokenizer=ctx.tokenizer,
        data=ctx.train_data or None,  # the runs' own corpus
        progress=ctx.progress,
    )
    name = f"fig5_stability_{settings.autocast}_seeds{ctx.seeds}.png"
    return analyses.analyze(options, os.path.join(ctx.out, "experiments", "fig3-5", name), log)


def _layer0(r: dict[str, Any]) -> str:
    by_layer = r["attn_logit_max_by_layer"]
    return "overflow" if not by_layer or by_layer[0] is None else f"{by_layer[0]:.4g}"


def stability_parts(result: dict[str, Any], size: str) -> tuple[list[dict], list[list]]:
    """Returns (claims, table rows) of the stability test; the Post-LN comparison is an extra."""
    name = {arch: f"{arch}-{size}" for arch in STABILITY_ARCHS}
    rows = [
        [
            r["preset"] + (" (extra)" if r["preset"] == name["postnorm"] else ""),
            f"{r['survived_mean']:.1f} ± {r['survived_std']:.1f}",
            f"{r['survived_all']} of {r['seeds']}",
            "–" if r["lr_at_divergence_mean"] is None else f"{r['lr_at_divergence_mean']:.3g}",
            _layer0(r),
            "–" if r["attn_logit_max"] is None else f"{r['attn_logit_max']:.4g}",
            str(r["fp16_overflow_seeds"]),
        ]
        for r in result["summary"]
    ]
    survived = {arch: [run["survived"] for run in result["runs"][name[arch]]] for arch in STABILITY_ARCHS}
    updates = result["settings"]["updates"]

    def more(a: str, b: str, text: str) -> dict[str, Any]:
        return {
            "id": f"fig5/{a}-vs-{b}",
            "claim": text,
            "measured": f"{verdict.fmt_mean_std(survived[a], 1)} vs {verdict.fmt_mean_std(survived[b], 1)} "
            f"of {updates} updates",
            **verdict.decide([x - y for x, y in zip(survived[a], survived[b])]),
        }

    claims = [
        more("normformer", "prenorm", "NormFormer survives more updates of the rising LR than Pre-LN"),
        more("normformer", "normformer-resscale", "λresid reduces NormFormer's stability gain"),
        more(
            "normformer",
            "postnorm",
            "extra, not the paper's claim: NormFormer survives more updates of the rising LR than Post-LN",
        ),
    ]
    return claims, rows


def figures_3_to_5(ctx: Context, keys: tuple[str, ...]) -> dict[str, Any]:
    """Figures 3, 4, 5 and 7: returns the section parts (tables, claims, PNGs, notes, data)."""
    folder = os.path.join(ctx.out, "experiments", "fig3-5")
    parts = gradient_parts(ctx, keys, folder)
    tables, claims, figures = parts["tables"], parts["claims"], parts["figures"]
    n_layer = max(
        (len(v) for seeds in parts["data"].get("fig3_early", {}).values() for v in seeds), default=0
    )
    gains = _gains_table(ctx, os.path.join(folder, "fig4_gains.png"), n_layer)
    if gains:
        tables.append(gains)
        figures.append(os.path.join(folder, "fig4_gains.png"))
    result = stability(ctx)
    stab_claims, stab_rows = stability_parts(result, ctx.scale.size)
    claims += stab_claims
    columns = ["preset", "updates survived", "survived all", "LR at divergence"]
    columns += ["layer-0 max |q·k|/√d", "max |q·k|/√d (all layers)", "above fp16's 65504 (seeds)"]
    st = result["settings"]
    tables.append(
        {
            "title": f"Figure 5: LR rising geometrically from {st['lr_start']:g} to {st['lr_end']:g} over "
            f"{st['updates']} updates, {st['autocast']} autocast on {st['device']}, the runs' model config",
            "columns": columns,
            "rows": stab_rows,
        }
    )
    figures.append(os.path.join(folder, f"fig5_stability_{st['autocast']}_seeds{ctx.seeds}.png"))
    notes = parts["notes"] + [
        "Figure 4's gains are reported without a verdict: the paper describes them, it states no test.",
        f"Figure 5 runs in {st['autocast']} autocast (the lowest precision torch runs on {st['device']}; the "
        "paper trained in fp16, where q·k overflows first in layer 0): the layer-0 column is the "
        "largest logit, to set against fp16's largest finite number 65504. The Post-LN row is an extra: "
        "the paper's Figure 5 compares Pre-LN, NormFormer and NormFormer with λresid.",
        stability_note(result),
    ]
    data = {**parts["data"], "stability": result["summary"]}
    out = {"tables": tables, "claims": claims, "figures": figures, "notes": notes, "data": data}
    if "fig7_window" in parts["data"]:  # report.json states the window every run was read over
        out["windows"] = {"fig7": parts["data"]["fig7_window"]}
    return out


def stability_note(result: dict[str, Any]) -> str:
    """Returns Figure 5's sentence on its divergence criterion and the batch noise each preset measured."""
    criterion = result.get("criterion")
    if criterion is None:
        return "Figure 5's divergence: a loss above the first update's + a fixed tolerance (an older result)."
    noise = [
        f"{r['preset']} {r['noise_std_mean']:.3f}"
        for r in result["summary"]
        if r.get("noise_std_mean") is not None
    ]
    measured = f"; the batch noise (std, nats, mean over seeds): {', '.join(noise)}" if noise else ""
    return f"Figure 5's divergence (the paper states no criterion; ours): {criterion['text']}{measured}."


def _gains_table(ctx: Context, png: str, n_layer: int) -> dict[str, Any] | None:
    """Returns Figure 4's table (NormFormer's learned gains by layer, first seed; plotted to ``png``), or
    None when there is no NormFormer run."""
    nf = _named_links(ctx, ("clm-normformer",), ctx.seed_values[0])
    if not nf:
        return None
    gains = analyses.analyze(analysis_runs.GainsOptions(targets=[nf[0]]), png, log)["models"][0]["gains"]
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


def figure_6(ctx: Context, keys: tuple[str, ...]) -> dict[str, Any]:
    """Figure 6: the ResScale runs' learned λresid by layer (first seed), with the other gains."""
    folder = os.path.join(ctx.out, "experiments", "fig6")
    per_seed = []
    for seed in ctx.seed_values:
        links = _named_links(ctx, keys, seed)
        if links:
            options = analysis_runs.GainsOptions(targets=[links[0]])
            result = analyses.analyze(options, os.path.join(folder, f"gains_seed{seed}.png"), log)
            per_seed.append(result["models"][0]["gains"]["resid_gain_mean"])
    if not per_seed:
        return {"notes": ["no finished ResScale run"]}
    n_layer = len(per_seed[0])
    rows = [["mean λresid", *(verdict.fmt_mean_std(list(v), 3) for v in zip(*per_seed))]]
    png = os.path.join(folder, f"gains_seed{ctx.seed_values[0]}.png")  # λresid, the other gains, heads
    return {
        "tables": [
            {
                "title": "Figure 6: mean λresid by layer, mean ± std over seeds",
                "columns": ["gain", *(f"layer {i}" for i in range(n_layer))],
                "rows": rows,
            }
        ],
        "claims": [],
        "figures": [png],
        "notes": ["Reported without a verdict: the paper describes Figure 6, it states no test."],
        "data": {"resid_gain_mean": per_seed},
    }
