"""Table 4 (ablations, controls, width control) and Table 5 (NormFormer vs Pre-LN under other
hyperparameters) of Shleifer et al. 2021, each claim decided per seed on log-PPL differences.

Table 4 is read under the paper's protocol, a fixed number of updates (every variant trains the
baseline's steps: the ``@updates`` runs); the same variants at equal time are shown beside it, untested.
Table 5 is read at equal time, as Figure 2; its settings are nfeval's reconstructions of the three kinds
the paper names."""

from __future__ import annotations

import math
import os
from typing import Any

from ...base.plots import plot_bars
from ...engine.checkpoints.checkpoint import read_config
from ...report import verdict
from ..perplexity import final_ppl, log_ratio
from ..trained_gate import gated_decide, is_trained, recipe_words
from .plan import (
    ABLATIONS,
    CONTROLS,
    LOG_PPL_MARGIN,
    PAPER_WIDTH_CONTROL,
    RUNS,
    TABLE4,
    TABLE5,
    TABLE5_SETTINGS,
    WIDTH_CONTROLS,
    at_equal_updates,
)
from .run_overrides import paper_widening, paper_width_control, parameter_count, run_model_config
from .run_specs import BASELINES, Context, run_dir, table_section

FULL = "clm-normformer"


def _params(ctx: Context, key: str) -> int | None:
    """Returns the parameter count of run ``key``'s first seed, from its config.json (None before it)."""
    directory = run_dir(ctx, key, ctx.seed_values[0])
    if not os.path.isfile(os.path.join(directory, "config.json")):
        return None
    return parameter_count(read_config(directory)[0])


def _params_cells(ctx: Context, key: str) -> list[str]:
    """Returns run ``key``'s parameter count and its excess over the Pre-LN baseline's, as table cells."""
    count, base = _params(ctx, key), _params(ctx, BASELINES["clm"])
    if count is None:
        return ["–", "–"]
    share = "" if key == BASELINES["clm"] or base is None else f"{(count - base) / base:+.2%}"
    return [f"{count / 1e6:.3f}M", share]


class Finals:
    """The runs of a table, read for its claims: each run key's per-seed final PPL (``ppl``), whether each
    seed's run trained (``trained``, the gate's reading) and the recipe words a gated claim names."""

    def __init__(self, records: dict[str, list[dict[str, Any]]]) -> None:
        self.ppl = {k: final_ppl(rs) for k, rs in records.items()}
        self.trained = {k: [is_trained(r) for r in rs] for k, rs in records.items()}
        self.words = recipe_words(r for rs in records.values() for r in rs)


def higher_than(runs: Finals, key: str, ref: str, text: str, claim_id: str) -> dict[str, Any]:
    """Returns the claim that run ``key`` ends with a higher PPL than ``ref`` (per-seed log ratio), over
    the seeds where both runs trained (``trained_gate.gated_decide``: not readable with fewer than two)."""
    ppl = runs.ppl
    pairs = list(zip(ppl[key], ppl[ref], runs.trained[key], runs.trained[ref]))
    diffs = [log_ratio(a, b) for a, b, ok_a, ok_b in pairs if ok_a and ok_b]
    dropped = sum(not (ok_a and ok_b) for _, _, ok_a, ok_b in pairs)
    return {
        "id": claim_id,
        "claim": text,
        "measured": f"PPL {verdict.fmt_mean_std(ppl[key], 2, 'diverged')} vs "
        f"{verdict.fmt_mean_std(ppl[ref], 2, 'diverged')} ({RUNS[ref].label})",
        **gated_decide([d for d in diffs if not math.isnan(d)], dropped, runs.words, margin=LOG_PPL_MARGIN),
    }


def _hurts_most(runs: Finals, full: str) -> dict[str, Any]:
    ppl = runs.ppl
    no_heads = at_equal_updates("clm-no-headscale")
    removals = [at_equal_updates(k) for k in ABLATIONS]
    means = {k: verdict.mean_std([log_ratio(a, b) for a, b in zip(ppl[k], ppl[full])])[0] for k in removals}
    ranked = sorted(removals, key=lambda k: -math.inf if means[k] is None else means[k], reverse=True)
    runner_up = next(k for k in ranked if k != no_heads)
    claim = higher_than(
        runs,
        no_heads,
        runner_up,
        f"removing HeadScale hurts most (vs the next most harmful removal, {RUNS[runner_up].label})",
        "table4/headscale-most",
    )
    claim["measured"] = f"largest mean log-PPL increase: {RUNS[ranked[0]].label}; " + claim["measured"]
    return claim


def table4(ctx: Context, records: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Table 4: every variant's parameters and final PPL at the paper's fixed number of updates (the
    claims) and at equal time (a column, untested)."""
    runs = Finals(records)
    keys = [at_equal_updates(k) for k in TABLE4]
    figures = [
        plot_bars(
            [RUNS[k].label for k in keys],
            [("final val PPL, equal updates", [verdict.mean_std(runs.ppl[k])[0] for k in keys])],
            os.path.join(ctx.out, "table4_ppl.png"),
            "Table 4: ablations and controls (the baseline's number of updates)",
            "validation PPL",
        )
    ]
    columns = ["variant", "parameters", "parameters vs Pre-LN", "PPL, equal updates"]
    columns += ["log-PPL change vs NormFormer, equal updates"]
    columns += ["PPL, equal time (untested)", "log-PPL change, equal time (untested)"]
    rows, claims = _table4_rows(ctx, runs), _table4_claims(runs)
    return table_section("variants", columns, rows, claims, figures, _table4_notes(ctx), {"records": records})


def _table4_rows(ctx: Context, runs: Finals) -> list[list[str]]:
    """Returns Table 4's rows: parameters, PPL and log-PPL change against NormFormer at equal updates and
    at equal time, per variant."""
    ppl, full, rows = runs.ppl, at_equal_updates(FULL), []
    for k in TABLE4:
        u = at_equal_updates(k)
        change = [log_ratio(a, b) for a, b in zip(ppl[u], ppl[full])]
        timed = [log_ratio(a, b) for a, b in zip(ppl[k], ppl[FULL])]
        rows.append(
            [
                RUNS[k].label,
                *_params_cells(ctx, k),
                verdict.fmt_mean_std(ppl[u], 2, "diverged"),
                "" if k == FULL else verdict.fmt_mean_std(change, 4, "no evidence"),
                verdict.fmt_mean_std(ppl[k], 2, "diverged"),
                "" if k == FULL else verdict.fmt_mean_std(timed, 4, "no evidence"),
            ]
        )
    return rows


def _table4_claims(runs: Finals) -> list[dict[str, Any]]:
    """Returns Table 4's claims, each at the paper's fixed number of updates against NormFormer: every
    removal hurts, the paper's HeadScale placement, which removal hurts most, the controls and the width
    control do not improve on it, and the baseline is behind it."""
    full = at_equal_updates(FULL)

    def behind(key: str, text: str, claim_id: str, than: str = full) -> dict[str, Any]:
        return higher_than(runs, key, than, text, claim_id)

    claims = [
        behind(at_equal_updates(k), f"{RUNS[k].label} has higher PPL than NormFormer", f"table4/{k}")
        for k in ABLATIONS
    ]
    claims.append(
        behind(
            at_equal_updates("clm-no-headscale"),
            "− HeadScale has higher PPL than NormFormer with the paper's HeadScale placement",
            "table4/no-headscale-vs-before",
            than=at_equal_updates("clm-headscale-before"),
        )
    )
    claims.append(_hurts_most(runs, full))
    claims += [
        behind(
            at_equal_updates(k), f"{RUNS[k].label} (a control) does not improve on NormFormer", f"table4/{k}"
        )
        for k in CONTROLS
    ]
    wider = "the baseline with its hidden size widened as the paper's width control stays behind NormFormer"
    claims.append(behind(at_equal_updates("clm-prenorm-wider"), wider, "table4/wider"))
    wide = "the baseline with its FFN widened to NormFormer's parameter count stays behind NormFormer"
    claims.append(behind(at_equal_updates("clm-prenorm-wide"), wide, "table4/wide"))
    claims.append(behind("clm-prenorm", "Pre-LN baseline has higher PPL than NormFormer", "table4/baseline"))
    return claims


def _table4_notes(ctx: Context) -> list[str]:
    return [
        f"Equal updates (the paper's protocol, the claims): every variant trains the baseline's "
        f"{ctx.budget.get('max_steps', '–')} steps. Equal time (shown, not tested): each variant trains "
        "the baseline's steps ÷ its paired step-time ratio. The PPL is each run's final validation PPL.",
        "NormFormer's HeadScale follows fairseq (after out_proj, where the next LayerNorm cancels the "
        "gains' common scale); the paper's formula scales before out_proj (its own row).",
        "+ ResScale is listed for reference; the paper's ablation claim concerns the removals.",
        *width_notes(ctx),
    ]


def width_notes(ctx: Context) -> list[str]:
    """Returns the notes that state the width rules of Table 4's controls with the widths they give at
    ``ctx``'s scale (from the plan; the parameters column counts each run's own model)."""
    base = run_model_config(ctx.scale, BASELINES["clm"])
    wider, wide, glu = (run_model_config(ctx.scale, k) for k in (*WIDTH_CONTROLS, "clm-ffn-glu-matched"))
    paper, paper_wide = paper_width_control()
    return [
        f"{RUNS[WIDTH_CONTROLS[0]].label}: the paper widened its {PAPER_WIDTH_CONTROL['scale']} baseline's "
        f"hidden size {paper.d_model} → {paper_wide.d_model} (its FFN taken to widen with it, "
        f"{paper.d_ffn} → {paper_wide.d_ffn}), {float(paper_widening()):+.2%} parameters by nfeval's count "
        "(embeddings included); here the "
        f"smallest d_model above {base.d_model} that its {base.n_head} heads divide and that adds at least "
        f"as large a share: d_model {base.d_model} → {wider.d_model}, FFN {base.d_ffn} → {wider.d_ffn}.",
        f"{RUNS[WIDTH_CONTROLS[1]].label}: the FFN widened to the smallest width whose parameters reach "
        f"NormFormer's, {base.d_ffn} → {wide.d_ffn}.",
        f"{RUNS['clm-ffn-glu-matched'].label}: GeGLU's fc1 has two halves, so its FFN is narrowed to the "
        f"width whose parameters come nearest the Pre-LN baseline's, {base.d_ffn} → {glu.d_ffn}.",
    ]


def table5(ctx: Context, records: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Table 5: Pre-LN and NormFormer final PPL under the recipe (Figure 2's runs, for reference, not
    tested again) and under each setting (a claim each)."""
    runs = Finals(records)
    ppl = runs.ppl
    pairs = {"recipe": ("clm-prenorm", "clm-normformer"), **TABLE5}
    rows, claims = [], []
    for name, (pre, nf) in pairs.items():
        setting = (
            "the recipe (Figure 2's runs; tested there)" if name == "recipe" else TABLE5_SETTINGS[name][0]
        )
        gain = [log_ratio(a, b) for a, b in zip(ppl[pre], ppl[nf])]
        lr = records[pre][0]["lr"] if records[pre] else None
        rows.append(
            [
                setting,
                "–" if lr is None else f"{lr:.3g}",
                verdict.fmt_mean_std(ppl[pre], 2, "diverged"),
                verdict.fmt_mean_std(ppl[nf], 2, "diverged"),
                verdict.fmt_mean_std(gain, 4, "no evidence"),
            ]
        )
        if name != "recipe":
            text = f"NormFormer has lower PPL than Pre-LN under nfeval's reconstruction of {setting}"
            claims.append(higher_than(runs, pre, nf, text, f"table5/{name}"))
    columns = ["setting", "Pre-LN LR", "Pre-LN PPL", "NormFormer PPL", "log-PPL gain of NormFormer"]
    notes = [
        "Each setting changes the recipe of both architectures the same way (plan.TABLE5_SETTINGS), at "
        "equal time: nfeval's reconstructions of the three kinds of setting the paper names (longer "
        "warm-up, GPT-3's settings, gradient clipping); the paper's exact values were not at hand."
    ]
    return table_section("settings", columns, rows, claims, [], notes, {"records": records})
