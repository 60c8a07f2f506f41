"""Figures 3 and 7 of Shleifer et al. 2021 from the gradient statistics the comparison runs record
while they train (``TrainConfig.grad_stats``, the scale's ``grad_stats`` window from update 1).

- Figure 3 (§4): mean |∂L/∂W| of fc2 by layer at the beginning of training: averaged over the
  scale's ``fig3_window`` (the first updates, warm-up included; the report states the window), and at
  initialisation (update 1) on its own. Claims: Pre-LN's early layers get larger gradients than its
  late ones (early: a primary claim; at init), NormFormer evens them out, Post-LN the reverse of Pre-LN
  (the figure's third panel). The window decides some of these (at update 1 alone NormFormer's slope
  can be steeper than Pre-LN's): the table shows both.
- Figure 7 (appendix): every parameter kind (q, k, v, out_proj, fc1, fc2; q/k/v are the row blocks of
  the fused qkv weight) averaged over a window at the paper's phase of training, a fixed number of
  updates past the end of warm-up with the LR near its peak (``Scale.fig7_after_warmup``; the paper's
  950–1000 lie 200–250 updates past a 750-update warm-up), the same update numbers for every run
  (``fig7_window``: a run too short for it, or that did not record it, is refused, not clipped); each
  layer's value over the baseline's mean of the same kind across layers, so 2.0 is twice the baseline.
  Claims, each a pattern across layers: NormFormer raises the gradients of the later (second half) FC
  layers (the mean log ratio over them), and lowers every attention parameter's gradient at all layers
  (the mean log ratio over all layers; the table and the "lower at k of L layers" count show whether it
  holds layer by layer).

The depth statistic of a run is the least-squares slope of log |∂L/∂W| over the layer index, times
(L − 1): the fitted log(first / last) across the depth (one noisy layer moves it less than a ratio).
"""

from __future__ import annotations

import math
import os
import statistics
from typing import Any

from ...analysis.figures import plot_fig3_curves, plot_fig7
from ...analysis.grads import relative_by_kind
from ...base.jsonio import load_json
from ...engine.training.grad_stats import average_rows, read_grad_stats
from ...engine.training.train_config import clip_window
from ...report import verdict
from ..runs import grad_stats_path
from ..trained_gate import gate_claim, is_trained, recipe_words
from .fig7_window import Schedule, fig7_window, run_schedule, window_text
from .plan import RUNS
from .run_specs import Context, ensure_run, run_dir

FIG3_KIND = "fc2"
ATTENTION_KINDS = ("q", "k", "v", "out_proj")
FC_KINDS = ("fc1", "fc2")
FIG7_KINDS = ATTENTION_KINDS + FC_KINDS
BASELINE = "clm-prenorm"


def window_values(rows: list[dict[str, Any]], window: tuple[int, int]) -> dict[str, list[float]]:
    """Returns {kind: per-layer mean over the updates of ``window`` (inclusive)}."""
    return average_rows([r for r in rows if window[0] <= r["update"] <= window[1]])


POSTNORM = "clm-postnorm"
# the runs each claim reads (every other claim: the baseline against NormFormer); the trained-run gate
# leaves a seed out of a claim only when one of *its* runs did not train
CLAIM_RUNS = {
    "fig3/prenorm-init": (BASELINE,),
    "fig3/prenorm-early": (BASELINE,),
    "fig3/postnorm-reverse": (POSTNORM,),
}


def claim_runs(claim_id: str) -> tuple[str, ...]:
    """Returns the run keys whose seeds the claim ``claim_id`` pairs (``CLAIM_RUNS``)."""
    return CLAIM_RUNS.get(claim_id, (BASELINE, "clm-normformer"))


def trained_seeds(ctx: Context, keys: tuple[str, ...]) -> tuple[list[int], list[int]]:
    """Returns (the seeds at which every run of ``keys`` trained, the others): a claim pairs its runs by
    seed, so a seed with one of them that did not train (``trained_gate``) is left out of it."""
    ok = {s: all(is_trained(ensure_run(ctx, key, s)) for key in keys) for s in ctx.seed_values}
    return [s for s in ok if ok[s]], [s for s in ok if not ok[s]]


def recorded(
    ctx: Context, keys: tuple[str, ...], seeds: list[int]
) -> dict[str, list[tuple[list[dict[str, Any]], int]]]:
    """Returns {run key: [(grad_stats rows, the run's scheduled updates) of each of ``seeds`` that
    recorded them]}."""
    out: dict[str, list[tuple[list[dict[str, Any]], int]]] = {}
    for key in keys:
        out[key] = []
        for seed in seeds:
            directory = run_dir(ctx, key, seed)
            path = grad_stats_path(directory)
            if path is not None:
                total = load_json(os.path.join(directory, "config.json"))["train"]["total_steps"]
                out[key].append((read_grad_stats(path), int(total)))
    return out


def schedules(
    ctx: Context, key: str, rows: list[tuple[list[dict[str, Any]], int]], seeds: list[int]
) -> list[Schedule]:
    """Returns the LR schedule and recorded updates of run ``key``'s ``seeds``, in ``recorded``'s order."""
    seeds = [s for s in seeds if grad_stats_path(run_dir(ctx, key, s)) is not None]
    return [
        run_schedule(run_dir(ctx, key, seed), f"{RUNS[key].label} seed {seed}", seed_rows)
        for seed, (seed_rows, _) in zip(seeds, rows)
    ]


def depth_log_ratio(values: list[float]) -> float:
    """Returns the fitted log(first / last layer) of per-layer values (see the module docstring)."""
    n = len(values)
    if n < 2:
        return math.nan
    xs, ys = range(n), [math.log(v) for v in values]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return -slope * (n - 1)


def _claim(claim_id: str, text: str, measured: str, diffs: list[float]) -> dict[str, Any]:
    decided = verdict.decide([d for d in diffs if math.isfinite(d)])
    return {"id": claim_id, "claim": text, "measured": measured, **decided}


def fig3_claims(init: dict[str, list[list[float]]], early: dict[str, list[list[float]]]) -> list[dict]:
    """Returns Figure 3's claims from {run key: [per-seed fc2 values by layer]} at init and early."""
    ratio = {
        (when, k): [depth_log_ratio(v) for v in seeds]
        for when, per_run in (("init", init), ("early", early))
        for k, seeds in per_run.items()
    }
    claims = []
    for when in ("init", "early"):
        if ratio.get((when, "clm-prenorm")):
            r = ratio[(when, "clm-prenorm")]
            claims.append(
                _claim(
                    f"fig3/prenorm-{when}",
                    f"Pre-LN ({when}): early layers' fc2 get larger gradients than late layers'",
                    f"fitted log(first/last) {verdict.fmt_mean_std(r, 3)}",
                    r,
                )
            )
    pre, nf, post = (ratio.get(("early", k)) for k in ("clm-prenorm", "clm-normformer", "clm-postnorm"))
    if pre and nf:
        gap = [abs(p) - abs(n) for p, n in zip(pre, nf)]
        claims.append(
            _claim(
                "fig3/normformer-evens",
                "NormFormer (early): its fc2 gradients vary less with depth than Pre-LN's",
                f"|fitted log(first/last)| Pre-LN minus NormFormer {verdict.fmt_mean_std(gap, 3)}",
                gap,
            )
        )
    if post:
        flipped = [-r for r in post]
        claims.append(
            _claim(
                "fig3/postnorm-reverse",
                "Post-LN (early): late layers' fc2 get larger gradients than early layers'",
                f"fitted log(last/first) {verdict.fmt_mean_std(flipped, 3)}",
                flipped,
            )
        )
    return claims


def fig7_log_ratios(base: list[dict[str, list[float]]], nf: list[dict[str, list[float]]], kind: str):
    """Returns per seed the per-layer log(NormFormer / baseline) of ``kind`` (Figure 7's two series)."""
    return [[math.log(n / b) for n, b in zip(s_nf[kind], s_b[kind])] for s_b, s_nf in zip(base, nf)]


def fig7_claims(base: list[dict[str, list[float]]], nf: list[dict[str, list[float]]]) -> list[dict]:
    """Returns Figure 7's claims, each a pattern across layers: later FC gradients raised (the mean log
    ratio over the second half of the layers, per FC kind) and attention gradients lowered at all layers
    (minus the mean log ratio over every layer, with the count of layers where it is lower)."""
    claims = []
    for kind in FC_KINDS:
        per_seed = fig7_log_ratios(base, nf, kind)
        later = [statistics.fmean(layers[len(layers) // 2 :]) for layers in per_seed]
        claims.append(
            _claim(
                f"fig7/{kind}",
                f"NormFormer raises the gradients of the later {kind} layers over Pre-LN's",
                "mean log(NormFormer/Pre-LN) over the second half of the layers "
                + verdict.fmt_mean_std(later, 3),
                later,
            )
        )
    for kind in ATTENTION_KINDS:
        per_seed = fig7_log_ratios(base, nf, kind)
        lowered = [-statistics.fmean(layers) for layers in per_seed]
        below = [sum(x < 0 for x in layers) for layers in per_seed]
        claims.append(
            _claim(
                f"fig7/{kind}",
                f"NormFormer lowers the {kind} gradients across the layers",
                f"minus the mean log(NormFormer/Pre-LN) over layers {verdict.fmt_mean_std(lowered, 3)}; "
                f"lower at {verdict.fmt_mean_std(below, 1)} of {len(per_seed[0])} layers",
                lowered,
            )
        )
    return claims


def _layer_rows(per_run: dict[str, list[list[float]]], label: str) -> list[list[str]]:
    return [
        [
            f"{RUNS[k].label} ({label})",
            *(verdict.fmt_mean_std([1e3 * v for v in layer], 3) for layer in zip(*seeds)),
        ]
        for k, seeds in per_run.items()
        if seeds
    ]


def _gated_claims(ctx: Context, keys: tuple[str, ...], stated: list[dict]) -> list[dict]:
    """Returns the claims ``stated`` (measured over every seed) read through the trained-run gate: each
    decided again over the seeds where every run it reads trained (``claim_runs``); with none, stated
    and not readable."""
    words = recipe_words([ensure_run(ctx, keys[0], ctx.seed_values[0])])
    out = []
    for group in dict.fromkeys(claim_runs(c["id"]) for c in stated):
        kept, dropped = trained_seeds(ctx, group)
        mine = [c for c in stated if claim_runs(c["id"]) == group]
        if kept and dropped:  # measured again on the seeds this claim may read
            again = {c["id"]: c for c in _measured(ctx, keys, kept, None)["claims"]}
            mine = [again[c["id"]] for c in mine]
        out += [gate_claim(c if kept else {**c, "n": 0}, len(dropped), words) for c in mine]
    order = [c["id"] for c in stated]
    return sorted(out, key=lambda c: order.index(c["id"]))


def _left_out_notes(ctx: Context, keys: tuple[str, ...]) -> list[str]:
    notes = []
    for key in keys:
        _, dropped = trained_seeds(ctx, (key,))
        if dropped:
            notes.append(
                f"{RUNS[key].label} did not train at seed(s) {', '.join(map(str, dropped))}: its rows are "
                "shown, and every claim that reads it leaves those seeds out (none left: not readable)."
            )
    return notes


def gradient_parts(ctx: Context, keys: tuple[str, ...], folder: str) -> dict[str, Any]:
    """Figures 3 and 7: returns {tables, claims, figures, notes, data} from the runs' recorded rows; the
    tables and figures show every seed, each claim reads the seeds where its own runs trained."""
    parts = _measured(ctx, keys, list(ctx.seed_values), folder)
    if not parts["claims"] and not parts["tables"]:
        return parts
    parts["claims"] = _gated_claims(ctx, keys, parts["claims"])
    parts["notes"] = _left_out_notes(ctx, keys) + parts["notes"]
    return parts


def _measured(ctx: Context, keys: tuple[str, ...], seeds: list[int], folder: str | None) -> dict[str, Any]:
    """Figures 3 and 7 over ``seeds``: {tables, claims (not gated), figures (none without ``folder``),
    notes, data}."""
    rows = recorded(ctx, keys, seeds)
    fig3 = ctx.scale.fig3_window
    init = {k: [window_values(r, (1, 1)).get(FIG3_KIND, []) for r, _ in seeds] for k, seeds in rows.items()}
    beginning = {k: [window_values(r, clip_window(fig3, n)) for r, n in seeds] for k, seeds in rows.items()}
    early_fc2 = {k: [v.get(FIG3_KIND, []) for v in seeds] for k, seeds in beginning.items()}
    if not any(rows.values()):
        return {"tables": [], "claims": [], "figures": [], "notes": ["no run recorded --grad-stats"]}
    n_layer = max(len(v) for seeds in early_fc2.values() for v in seeds)
    layers = [f"layer {i}" for i in range(n_layer)]
    tables = [
        {
            "title": f"Figure 3: mean |∂L/∂W| of fc2 by layer (×1e-3), at update 1 (init) and over updates "
            f"{fig3[0]}–{fig3[1]} (early: the beginning of training), mean ± std over seeds",
            "columns": ["run", *layers],
            "rows": _layer_rows(init, "init") + _layer_rows(early_fc2, "early"),
        }
    ]
    figures = []
    first = {k: seeds[0][0] for k, seeds in rows.items() if seeds}
    if first and folder:
        figures.append(plot_fig3_curves(first, FIG3_KIND, os.path.join(folder, "fig3_grads_by_update.png")))
    data: dict[str, Any] = {"fig3_init": init, "fig3_early": early_fc2, "fig3_window": list(fig3)}
    fig7 = fig7_part(ctx, rows, layers, folder, seeds)
    notes = [
        f"Gradients recorded during training (TrainConfig.grad_stats {ctx.scale.grad_stats}), before "
        f"clipping, of the mean token cross-entropy. Figure 3 reads updates {fig3[0]}–{fig3[1]} (the "
        f"beginning of training; warm-up is {ctx.scale.warmup:g} of the run) and update 1 alone.",
        fig7["note"],
    ]
    return {
        "tables": tables + fig7["tables"],
        "claims": fig3_claims(init, early_fc2) + fig7["claims"],
        "figures": figures + fig7["figures"],
        "notes": notes,
        "data": data | fig7["data"],
    }


def fig7_part(
    ctx: Context, rows: dict[str, list], layers: list[str], folder: str | None, seeds: list[int]
) -> dict[str, Any]:
    """Figure 7: returns {tables, claims, figures, note, data} over one window (``fig7_window``) shared
    by every seed (of ``seeds``, ``recorded``'s) of the baseline and NormFormer; nothing but the note
    and data when it cannot be read."""
    cand = "clm-normformer"
    out: dict[str, Any] = {"tables": [], "claims": [], "figures": [], "data": {}}
    if not (rows.get(BASELINE) and rows.get(cand)):
        out["note"] = "Figure 7 not read: the baseline or NormFormer recorded no gradients."
        return out
    runs = {k: schedules(ctx, k, rows[k], seeds) for k in (BASELINE, cand)}
    found = fig7_window(ctx.scale.fig7_after_warmup, runs[BASELINE] + runs[cand])
    out["note"] = window_text(found, (RUNS[BASELINE].label, RUNS[cand].label))
    window = found["window"]
    # one window for both architectures, recorded per run so the report shows they match
    out["data"] = {
        "fig7_window": {
            "updates": list(window) if window else None,
            "after_warmup": list(found["after_warmup"]),
            "warmup_end": found["warmup_end"],
            "refused": found["refused"],
            "by_run": {s.name: list(window) if window else None for s in runs[BASELINE] + runs[cand]},
            "lr_fraction": {name: list(pair) for name, pair in found.get("lr", {}).items()},
        }
    }
    if window is None:
        return out
    base, nf = ([window_values(r, window) for r, _ in rows[k]] for k in (BASELINE, cand))
    relative = [relative_by_kind(n, b) for b, n in zip(base, nf)]
    baseline_own = [relative_by_kind(b, b) for b in base]
    out["tables"].append(
        {
            "title": f"Figure 7: gradient ÷ Pre-LN's mean over layers of the same parameter, updates "
            f"{window[0]}–{window[1]} ({found['after_warmup'][0]}–{found['after_warmup'][1]} past warm-up) "
            "for both, mean ± std over seeds (1.0 = the baseline's average)",
            "columns": ["parameter", "run", *layers],
            "rows": [
                [kind, name, *(verdict.fmt_mean_std(list(v), 2) for v in zip(*(r[kind] for r in rel)))]
                for kind in FIG7_KINDS
                for name, rel in (("Pre-LN", baseline_own), ("NormFormer", relative))
            ],
        }
    )
    out["claims"] = fig7_claims(base, nf)
    if folder:
        out["figures"].append(
            plot_fig7(baseline_own[0], relative[0], FIG7_KINDS, os.path.join(folder, "fig7_grads.png"))
        )
    out["data"]["fig7_relative"] = relative
    return out
