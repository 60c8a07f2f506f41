"""``report.md`` and ``budget_gain.png`` of ``nfeval reproduce --token-budgets``, from its report.json alone
(``--render-only`` regenerates a committed one). Every sentence is built from the report's numbers."""

from __future__ import annotations

import math
import os
from typing import Any

from ...base.artifacts import atomic_write_text
from ...base.jsonio import load_json, reading
from ...base.plots import save_png
from ...engine.training import recipe as recipes
from ...report import significance, verdict
from .. import scale_facts
from ..lr_band import describe
from ..report_text import compute_path_lines, markdown_table

PAIR = ("clm-prenorm", "clm-normformer")  # Figure 2's baseline and candidate runs


def tokens_text(tokens: int) -> str:
    """Returns a token count in words, to 3 significant digits: 500K, 2M, 1.5M, 51.4K."""
    for suffix, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if tokens >= size:
            return f"{tokens / size:.3g}{suffix}"
    return str(tokens)


def _ci(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return "–" if not finite else f"{finite[0]:+.3f}"

    i = significance.t_interval(finite)
    return f"{i['mean']:+.3f} [{i['low']:+.3f}, {i['high']:+.3f}]"


def budget_table(report: dict[str, Any]) -> list[str]:
    """Returns the table of one row per token budget."""
    params = (report["header"].get("facts") or {}).get("parameters")
    cols = ["tokens", "tokens / parameter", "updates (Pre-LN / NormFormer)", "tuned LR (Pre-LN / NormFormer)"]
    cols += [
        "final PPL, mean (Pre-LN / NormFormer)",
        "gain per seed",
        "gain, mean [95% CI]",
        "verdict (Holm p)",
    ]
    rows = []
    for b in report["budgets"]:
        means = [verdict.fmt_mean_std(b["ppl"][k], 1) for k in PAIR]
        steps = " / ".join(str(b["steps"].get(k, "–")) for k in PAIR)
        lrs = " / ".join(f"{b['lr'][k]:g}" if k in b["lr"] else "–" for k in PAIR)
        holm = "–" if b.get("p_holm") is None else f"{b['p_holm']:.2g}"
        rows.append(
            [
                tokens_text(b["tokens"]),
                "–" if not params else f"{b['tokens'] / params:.2g}",
                steps,
                lrs,
                " / ".join(means),
                ", ".join(f"{g:+.3f}" for g in b["gains"]),
                _ci(b["gains"]),
                f"**{b['verdict']}** ({holm})",
            ]
        )
    return markdown_table(cols, rows)


def left_out_lines(report: dict[str, Any]) -> list[str]:
    """Returns one line per budget that left judged seeds out of its gains, and why."""
    lines = []
    for b in report["budgets"]:
        why = [f"{', '.join(map(str, s))} ({reason})" for reason, s in (b.get("left_out") or {}).items() if s]
        if why:
            lines.append(f"- {tokens_text(b['tokens'])}: seeds left out: {'; '.join(why)}.")
    return lines


def judging_lines(report: dict[str, Any]) -> list[str]:
    """Returns the sentence on what each budget's final PPLs were read on: the whole validation split
    (the judging set), or the runs' own last validation for budgets whose runs were not judged."""
    budgets = report["budgets"]
    judged = [tokens_text(b["tokens"]) for b in budgets if b.get("judged")]
    not_judged = [tokens_text(b["tokens"]) for b in budgets if not b.get("judged")]
    if not not_judged:
        return ["Final PPLs are read on the whole validation split (the judging set) at every budget.", ""]
    where = f"at {', '.join(judged)} on the whole validation split; " if judged else ""
    return [
        f"Final PPLs are read {where}at {', '.join(not_judged)} on the runs' own last validation (their "
        "first 64 validation sequences), their runs not yet trained again to be judged on the whole split.",
        "",
    ]


def fit_lines(report: dict[str, Any]) -> list[str]:
    """Returns the fit in sentences: slope per doubling, the fitted gain at both ends, the sign."""
    f, budgets = report["fit"], report["token_budgets"]
    low, high = tokens_text(min(budgets)), tokens_text(max(budgets))
    if f.get("slope") is None:
        return [f"No fit: {f['why']}.", ""]
    first, last = f["ends"]
    toward = "NormFormer" if f["slope"] > 0 else "Pre-LN"
    lines = [
        f"**Fit** ({f['rule']}; {f['n']} gains): the gain moves by {f['slope']:+.3f} log-PPL (toward "
        f"{toward}) per doubling of the tokens [95% CI {f['slope_low']:+.3f}, {f['slope_high']:+.3f}; "
        f"p {f['slope_p']:.2g}]. "
        f"Fitted gain at {low} tokens {first['gain']:+.3f} [{first['low']:+.3f}, {first['high']:+.3f}], "
        f"at {high} {last['gain']:+.3f} [{last['low']:+.3f}, {last['high']:+.3f}] (positive: NormFormer "
        "better).",
        "",
    ]
    resolved = [e["low"] > 0 or e["high"] < 0 for e in (first, last)]
    if f["sign_change"]:
        where = tokens_text(round(f["zero_at_tokens"])) if f.get("zero_at_tokens") else "inside the range"
        sentence = f"The fitted line changes sign inside {low}–{high} tokens, at about {where}"
        if all(resolved):
            sentence += "; the intervals at both ends exclude 0, so the change of sign is resolved."
        else:
            ends = "both ends include" if not any(resolved) else "one end includes"
            sentence += f"; the interval at {ends} 0, so the change of sign is not resolved."
    else:
        side = "NormFormer better" if first["gain"] > 0 else "Pre-LN better"
        sentence = f"The fitted line does not change sign inside {low}–{high} tokens ({side} at both ends"
        sentence += (
            "; both intervals exclude 0)." if all(resolved) else "; an interval at an end includes 0)."
        )
    return lines + [sentence, ""]


def crossing_text(zero_at: float, smallest: int) -> str:
    """Returns where a fitted line outside its range reaches 0, said as the extrapolation it is: a line
    that moves away from 0 as tokens grow reaches it only before the smallest budget, possibly at less
    than one token, where a count means nothing."""
    if zero_at < 1:
        return (
            "nowhere meaningful: the fitted line moves away from 0 as tokens grow and reaches 0 only when "
            "extrapolated back to less than one token."
        )
    where = "back, below the smallest budget" if zero_at < smallest else "forward, beyond the largest budget"
    return (
        f"the fitted line reaches 0 at about {tokens_text(round(zero_at))} tokens only when extrapolated "
        f"{where}; that is an extrapolation, not a measurement."
    )


def cannot_say(report: dict[str, Any]) -> list[str]:
    """Returns what the report cannot say, from its own numbers."""
    h, budgets, f = report["header"], report["token_budgets"], report["fit"]
    params = (h.get("facts") or {}).get("parameters")
    paper = scale_facts.paper_facts()
    lines = ["## What it cannot say", ""]
    span = max(budgets) / min(budgets)
    lines.append(
        f"- Anything beyond {tokens_text(min(budgets))}–{tokens_text(max(budgets))} tokens: the line is "
        f"fitted over a range of {span:g}× and is not extrapolated"
        + (
            f"; the paper trained {paper['tokens_per_parameter']:,.0f} tokens per parameter, this report "
            f"at most {max(budgets) / params:.2g}."
            if params
            else "."
        )
    )
    if f.get("zero_at_tokens") and not f["sign_change"]:
        lines.append(f"- Where the gain would cross zero: {crossing_text(f['zero_at_tokens'], min(budgets))}")
    lines.append(
        "- Absence of a trend: an interval on the slope that includes 0 is low power, not evidence of no "
        "trend; the log-linear form itself is an assumption the fit does not test."
    )
    return lines + [""]


def render(report: dict[str, Any]) -> str:
    """Returns report.md's text from ``report`` (report.json's content) alone."""
    h = report["header"]
    lines = ["# Figure 2 across token budgets (`nfeval reproduce --token-budgets`)", ""]
    lines += [
        f"Command: `{h['command']}`  ",
        f"Judged seeds: {', '.join(map(str, h.get('eval_seeds') or []))} · LRs re-tuned at every budget on "
        f"seeds {', '.join(map(str, h.get('tune_seeds') or [])) or '–'} (none judged) · hardware: "
        f"{h['hardware']}, {h.get('jobs', 1)} run(s) at a time on {h.get('cpu_count', '?')} cores  ",
        f"Training time of every run: {h.get('train_hours', 0):.2f} h · wall-clock of the last invocation: "
        f"{h['wall_min']:.1f} min · nfeval {h['version']} ({h['git'] or 'no git'})",
        "",
        *compute_path_lines(h),
    ]
    for objective, r in (h.get("recipes") or {}).items():
        lines += [f"**Recipe ({objective}), shared by every run:** {recipes.describe(r)}.", ""]
    lines += [
        "Each budget is its own `nfeval reproduce --only fig2-clm` folder (linked below): both LRs tuned "
        "at that budget, Pre-LN's updates from the tokens and NormFormer's from its paired step-time ratio "
        "(equal time), both on complete schedules. Gain = log PPL(Pre-LN) − log PPL(NormFormer) per judged "
        "seed (positive: NormFormer better), over the seeds that budget's primary claim reads (both runs "
        "trained; no seed is left out for its realised time); each budget's verdict is its own report's "
        "primary claim.",
        "",
        *judging_lines(report),
        *left_out_lines(report),
        "",
        *budget_table(report),
        "",
        *fit_lines(report),
        "![gain against tokens](budget_gain.png)",
        "",
    ]
    sensitivity = [
        f"- {tokens_text(b['tokens'])}: {text}"
        for b in report["budgets"]
        if (text := describe(b["lr_sensitivity"]))
    ]
    if sensitivity:
        lines += ["**LR sensitivity per budget:**", "", *sensitivity, ""]
    lines += [f"- [{tokens_text(b['tokens'])} tokens]({b['folder']}/report.md)" for b in report["budgets"]]
    lines += ["", *cannot_say(report)]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> str:
    """Draws each seed's gain and each budget's mean with its 95% interval against tokens per parameter
    (tokens when the parameters are unknown; log axis) with the fitted line and its interval, and the
    paper's tokens per parameter marked beyond the right edge; writes the PNG to ``path``."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    params = (report["header"].get("facts") or {}).get("parameters")
    per = params or 1
    fig = Figure(figsize=(6.6, 4.0), layout="constrained")
    ax = fig.subplots()
    for b in report["budgets"]:
        x = b["tokens"] / per
        finite = [g for g in b["gains"] if math.isfinite(g)]
        ax.plot([x] * len(finite), finite, "o", color="0.6", ms=4)
        if len(finite) > 1:
            i = significance.t_interval(finite)
            ax.errorbar([x], [i["mean"]], yerr=[[i["mean"] - i["low"]], [i["high"] - i["mean"]]], fmt="D",
                        color="C0", ms=7, capsize=4)  # fmt: skip
        elif finite:
            ax.plot([x], finite, "D", color="C0", ms=7)
    f = report["fit"]
    if f.get("slope") is not None:
        curve = f["curve"]
        xs = [2 ** e["log2_tokens"] / per for e in curve]
        ax.plot(xs, [e["gain"] for e in curve], "-", color="C1", label="fit")
        ax.fill_between(xs, [e["low"] for e in curve], [e["high"] for e in curve], color="C1", alpha=0.15)
    ax.axhline(0, color="k", lw=0.8)
    xs = [b["tokens"] / per for b in report["budgets"]]
    ax.set_xlim(min(xs) / 1.5, max(xs) * 1.5)
    if not any(math.isfinite(g) for b in report["budgets"] for g in b["gains"]):
        ax.text(0.5, 0.5, "no gains to draw (see the report)", transform=ax.transAxes, ha="center")
    ax.set_xscale("log")
    # labels at 1, 2 and 5 of each decade only: a range under one decade otherwise labels every minor tick
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    if params:
        paper = scale_facts.paper_facts()["tokens_per_parameter"]
        ax.annotate(f"paper: {paper:,.0f} tokens/parameter →", xy=(1.0, 0.04), xycoords="axes fraction",
                    ha="right", fontsize=8, color="C3")  # fmt: skip
        ax.set_xlabel("training tokens per parameter of the Pre-LN run (log scale)")
    else:
        ax.set_xlabel("training tokens of the Pre-LN run (log scale)")
    ax.set_ylabel("log PPL(Pre-LN) − log PPL(NormFormer)")
    ax.set_title("NormFormer's gain at equal time (grey: seeds; blue: mean, 95% CI; orange: fit)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    return save_png(fig, path)


def rerender(out: str) -> str:
    """Rewrites ``out/report.md`` from ``out/report.json``; returns its path."""
    path, stored = os.path.join(out, "report.md"), os.path.join(out, "report.json")
    with reading(
        stored, "the report.json that nfeval reproduce --token-budgets writes (rerun it to rewrite the file)"
    ):
        text = render(load_json(stored))
    atomic_write_text(path, text + "\n")
    return path
