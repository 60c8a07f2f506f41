"""``report.md`` + ``report.json`` + PNGs of ``nfeval bakeoff``: its scale beside the paper's, the one
recipe, the command to reproduce it, the ranking with each architecture's gradient mismatch by depth,
significance against the baseline (perplexity, zero-shot, stability; Holm-adjusted), compute
fractions, the tuned LRs with their grids and the step-time ratios. ``render`` reads ``report.json``
alone (``nfeval bakeoff --out DIR --render-only`` regenerates a committed report)."""

from __future__ import annotations

import os
from typing import Any

from ...base.artifacts import atomic_write_json, atomic_write_text
from ...base.jsonio import load_json, reading
from ...engine.training import recipe
from ...report import verdict
from .. import init_sensitivity, realised_time, scale_facts, trained_gate
from ..lr_band import describe, tune_seed_lines
from ..report_text import compute_path_lines, markdown_table, ratio_text
from .plots import plots
from .results import VERDICTS


def _ci(interval: dict[str, Any] | None, digits: int = 2) -> str:
    if interval is None:
        return "–"
    if interval["std"] is None:
        return f"{interval['mean']:.{digits}f}"
    return f"{interval['mean']:.{digits}f} [{interval['low']:.{digits}f}, {interval['high']:.{digits}f}]"


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "–" if x is None else format(x, fmt)


def ranking_table(r: dict[str, Any]) -> list[str]:
    depth = {d["name"]: d for d in r.get("depth_ratios", [])}
    cols = ["rank", "architecture", "final val PPL, mean [95% CI]", "per seed", "diverged", "lr", "steps"]
    cols += ["fc2 layer-0 ÷ last-layer gradient, early (mean ± std)"]
    rows = [
        [
            i + 1 if row.get("ranked", True) else "not ranked",
            row["spec"],
            _ci(row["interval"]),
            ", ".join(
                _num(p, ".2f") + ("" if ok else " ✗")
                for p, ok in zip(row["ppl"], row.get("trained") or [True] * len(row["ppl"]))
            ),
            f"{row['diverged']} of {len(row['ppl'])}",
            f"{row['lr']:g}",
            "/".join(map(str, sorted(set(row["steps"]), key=str))),
            verdict.fmt_mean_std(depth[row["name"]]["per_seed"], 2) if row["name"] in depth else "–",
        ]
        for i, row in enumerate(r["ranking"])
    ]
    return markdown_table(cols, rows)


def ppl_table(r: dict[str, Any]) -> list[str]:
    cols = [
        "candidate",
        "log-PPL gain vs baseline [95% CI]",
        "paired t p",
        "Holm p",
        "verdict",
        "MDE",
        "seeds needed",
        "why",
    ]
    rows = [
        [
            t["name"],
            _ci(t["interval"], 4),
            _num(t["p"]),
            _num(t.get("p_holm")),
            f"**{t['verdict']}**" + (f" {t['under']}" if t.get("under") else ""),
            _num(t["mde"]),
            t["seeds_needed"] or "–",
            t["why"],
        ]
        for t in r["ppl_tests"]
    ]
    return markdown_table(cols, rows)


def zeroshot_table(r: dict[str, Any]) -> list[str]:
    cols = [
        "candidate",
        "task (metric)",
        "per seed: cand − base, points [item 95% CI], McNemar p",
        "Holm p",
        "verdict",
        "MDE (points)",
        "why",
    ]
    rows = []
    for t in r["zeroshot_tests"]:
        seeds = "; ".join(
            f"s{s['seed']}: {100 * s['difference']:+.1f} [{100 * s['low']:+.1f}, {100 * s['high']:+.1f}]"
            + (f", p {s['mcnemar_p']:.2g}" if s["mcnemar_p"] is not None else "")
            + ("*" if s["significant"] else "")
            for s in t["per_seed"]
        )
        rows.append(
            [
                t["name"],
                f"{t['task']} ({t['metric']})",
                seeds,
                _num(t.get("p_holm")),
                f"**{t['verdict']}**",
                _num(t["mde"]),
                t["why"],
            ]
        )
    return markdown_table(cols, rows)


def fraction_table(r: dict[str, Any]) -> list[str]:
    def cell(s: dict[str, Any]) -> str:
        return _ci(s["interval"], 3) if s["interval"] else f"reached in {s['reached']} of {s['n']} seeds"

    cols = ["candidate", "time fraction, mean [95% CI]", "FLOPs fraction, mean [95% CI]", "per seed (time)"]
    rows = [
        [f["name"], cell(f["time"]), cell(f["flops"]), ", ".join(_num(s["time"]) for s in f["per_seed"])]
        for f in r["compute_fractions"]
    ]
    return markdown_table(cols, rows)


def stability_table(r: dict[str, Any]) -> list[str]:
    cols = [
        "architecture",
        "updates survived (per seed)",
        "LR at divergence",
        "max attn logit",
        "vs baseline",
        "MDE",
    ]
    rows = [
        [
            s["name"],
            f"{verdict.fmt_mean_std(s['survived'], 1)} of {s['updates']} "
            f"({', '.join(map(str, s['survived']))})",
            _num(s["lr_at_divergence_mean"]),
            _num(s["attn_logit_max"], ".4g"),
            f"**{s['verdict']}** ({s['why']}; Holm p {_num(s.get('p_holm'))})"
            if "verdict" in s
            else "baseline",
            _num(s.get("mde")),
        ]
        for s in r["stability"]
    ]
    return markdown_table(cols, rows)


def tuning_table(r: dict[str, Any]) -> list[str]:
    cols = ["architecture", "final PPL per LR (best *)", "best LR", "budget", "warning"]
    return markdown_table(cols, r["tuning"])


def ratio_table(r: dict[str, Any]) -> list[str]:
    cols = ["architecture", "step-time ratio to the baseline [95% CI]", "steps", "how"]
    realised = r.get("realised")  # absent from reports written before the realised-ratio check
    if realised is not None:
        cols.append("realised per seed: wall-time ratio (step-time ratio, vs the CI)")
    rows = []
    for name, rec in r["step_ratios"].items():
        how = (
            rec.get("method", "")
            if "pairs" not in rec
            else f"{rec['pairs']} pairs × {rec['burst']} steps, load {rec['load_average']}"
        )
        row = [name, ratio_text(rec), r["steps"].get(name, "time budget"), how]
        if realised is not None:
            seeds = (realised.get(name) or {}).get("seeds", [])
            row.append("; ".join(f"seed {s['seed']} {realised_time.seed_text(s)}" for s in seeds) or "–")
        rows.append(row)
    return markdown_table(cols, rows)


def _widened_text(h: dict[str, Any]) -> str:
    """Returns what the tunes added past the grid's edges (a best LR on an edge), or ""."""
    widened = h.get("widened") or {}
    if not widened:
        return ""
    parts = "; ".join(f"{name} +{', '.join(f'{lr:g}' for lr in lrs)}" for name, lrs in widened.items())
    return f" (widened where a best LR lay on an edge: {parts})"


def _sensitivity_lines(r: dict[str, Any]) -> list[str]:
    """Returns each perplexity test re-read across both tunes' LR bands (``lr_band``), when any was."""
    lines = [
        f"- {t['name']}: {text}"
        for t in r["ppl_tests"]
        if (text := describe(t.get("lr_sensitivity"), (r["baseline"], t["name"]), VERDICTS))
    ]
    if not lines:
        return []
    return [f"LR sensitivity ({r['header'].get('lr_band_rule', '')}):", "", *lines, ""]


def _seeds_text(h: dict[str, Any]) -> str:
    """Returns the header's seed count, with the seed plan's further seeds where it gave any."""
    plan = h.get("seed_plan") or {}
    text = f"{h['seeds']} seeds"
    if h.get("tune_seeds"):
        text += f" (judged; LRs tuned on seeds {', '.join(map(str, h['tune_seeds']))}, none judged)"
    if plan.get("counts"):
        names = ", ".join(plan["counts"])
        text += (
            f" ({plan['close_seeds']} for {names}: within one MDE, {plan['mde']:.3g} log-PPL, of the best "
            f"({plan['best']}) at {plan['from_seeds']} seeds, the baseline with them)"
        )
    elif plan:
        text += f" (no candidate within one MDE of the best at {plan['from_seeds']} seeds: none got more)"
    return text


def render(r: dict[str, Any]) -> str:
    """Returns report.md's text."""
    return "\n".join(_header_lines(r) + _body_lines(r))


def _header_lines(r: dict[str, Any]) -> list[str]:
    """Returns the title, scale caveat, command, settings, provenance, recipe, gate and scale lines."""
    h = r["header"]
    facts = h.get("facts")
    lines = ["# nfeval bakeoff", ""]
    if facts:
        lines += [scale_facts.caveat(facts, h["paper_facts"]), ""]
    return lines + [
        f"Reproduce: `{h['command']}`",
        "",
        f"Baseline **{r['baseline']}** · size {h['size']} · {h['budget']} · {_seeds_text(h)} · LR grid "
        f"{h['lrs']}{_widened_text(h)} at {h['tune_budget']} per point · corpus {h['corpus']} · "
        f"zero-shot tasks {', '.join(h['tasks'])}",
        "",
        f"nfeval {h['version']} (git {h['git']}) · {h['hardware']}, {h.get('jobs', 1)} run(s) at a time on "
        f"{h.get('cpu_count', '?')} cores · load average {h['load_average']} · training time of every run "
        f"{h.get('train_hours', 0):.2f} h · this invocation's wall time {h['wall_min']:.1f} min",
        "",
        *compute_path_lines(h),
        *(
            [f"**Recipe, shared by every run:** {recipe.describe(h['recipe'])}.", ""]
            if h.get("recipe")
            else []
        ),
        *_scheme_lines(h),
        *_own_recipe_lines(h),
        *_gate_lines(r),
        *_scale_lines(h),
    ]


def _body_lines(r: dict[str, Any]) -> list[str]:
    """Returns the sections: ranking, the tests, compute fractions, stability, tuning, ratios, how to read."""
    no_zeroshot = ["no zero-shot comparison (no finished pair of runs)"]
    return [
        "## Ranking (final validation perplexity)",
        "",
        *ranking_table(r),
        "",
        *_untrainable_lines(r),
        "## Perplexity vs the baseline (seed-paired t-test)",
        "",
        *ppl_table(r),
        "",
        *_sensitivity_lines(r),
        "## Zero-shot vs the baseline (paired over items per seed; verdict over seeds)",
        "",
        *(zeroshot_table(r) if r["zeroshot_tests"] else no_zeroshot),
        "",
        "## Compute fraction to reach the baseline's best perplexity",
        "",
        *fraction_table(r),
        "",
        "## Rising-LR stability test",
        "",
        *stability_table(r),
        "",
        "## Tuned learning rates",
        "",
        *tuning_table(r),
        "",
        *tune_seed_lines(r["header"]),
        "## Paired step-time ratios (equal-time budgets)",
        "",
        *ratio_table(r),
        "",
        *[f"![{f}]({f})" for f in r["figures"]],
        "",
        "## How to read it",
        "",
        *[f"- {n}" for n in r["notes"]],
        "- Verdict rule (reproduce's; the claim's direction is here the candidate's advantage, so "
        f"*{verdict.AGREES}* reads *better* and *{verdict.DISAGREES}* *worse*; the perplexity tests are the "
        f"primary family): {verdict.RULE}.",
        "",
    ]


def _scheme_lines(h: dict[str, Any]) -> list[str]:
    """Returns the header's line on the recipe fields a scheme carries (nGPT's), none when no run has any."""
    schemes = h.get("schemes") or {}
    if not schemes:
        return []
    parts = "; ".join(f"{name}: {recipe.scheme_text({'scheme': fields})}" for name, fields in schemes.items())
    return [f"**Recipe fields a scheme carries** (every other field is the shared recipe's): {parts}.", ""]


def _own_recipe_lines(h: dict[str, Any]) -> list[str]:
    """Returns the header's lines on the candidates tried again under their scheme's own recipe (none in a
    report where every scheme trained under the shared one)."""
    own, pending = h.get("own_recipes") or {}, h.get("own_recipe_pending") or []
    waiting = (
        [
            f"**Not yet tried under their own recipe:** {', '.join(pending)} trained at no LR of the grid "
            "under the shared recipe, and this folder has not tuned them under their paper's recipe yet (it "
            "was read again without training); until it has, they are listed as failing under this recipe "
            "only.",
            "",
        ]
        if pending
        else []
    )
    if not own:
        return waiting
    lines = [
        "**Under their own recipe** (a scheme that trained at no LR of its grid under the shared recipe is "
        "tuned and trained again under its paper's; its rows, named `+own`, are read against the baseline "
        "under the shared recipe, so they compare recipes as well as placements):",
        "",
    ]
    for name, entry in own.items():
        text = recipe.describe(entry["recipe"]) if entry.get("recipe") else "recipe not recorded"
        where = "; ".join(f"{field}: {source}" for field, source in entry["sources"].items())
        lines.append(f"- {name}: {text} (sources: {where})")
    return [*lines, "", *waiting]


def _gate_lines(r: dict[str, Any]) -> list[str]:
    """Returns the header's trained-run gate sentence (none for a report made before the gate)."""
    h = r["header"]
    if h.get("unigram_ppl") is None:
        return []
    gate = [trained_gate.gate_text(h["unigram_ppl"], h["trained_factor"]), ""]
    return gate + init_sensitivity.lines(h.get("token_sensitivity"))


def _untrainable_lines(r: dict[str, Any]) -> list[str]:
    """Returns the line listing the candidates that trained at no LR of their grid (not ranked)."""
    if not r.get("untrainable"):
        return []
    words = recipe.stability_text(r["header"]["recipe"])
    names = ", ".join(r["untrainable"])
    return [f"Did not train at any LR of its grid under this recipe ({words}), so not ranked: {names}.", ""]


def _scale_lines(h: dict[str, Any]) -> list[str]:
    if not h.get("facts"):
        return []
    columns, rows = scale_facts.table(h["facts"], h["paper_facts"])
    return ["## Scale", "", *markdown_table(columns, rows), ""]


def rerender(out: str) -> str:
    """Rewrites ``out/report.md`` from ``out/report.json`` alone; returns the markdown path."""
    path, stored = os.path.join(out, "report.md"), os.path.join(out, "report.json")
    with reading(stored, "the report.json that nfeval bakeoff writes (rerun it to rewrite the file)"):
        text = render(load_json(stored))
    atomic_write_text(path, text)
    return path


def write(out: str, r: dict[str, Any]) -> dict[str, Any]:
    """Writes report.json and report.md (and the PNGs) into ``out``; returns the report with its
    ``figures`` (PNG names) and ``path`` (report.md's)."""
    r = {**r, "figures": plots(out, r)}
    atomic_write_json(os.path.join(out, "report.json"), r)
    path = os.path.join(out, "report.md")
    atomic_write_text(path, render(r))
    return {**r, "path": path}
