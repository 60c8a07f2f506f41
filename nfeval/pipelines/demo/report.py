"""What the demo says about its runs: the equal-time table (each run read at the end of its own schedule,
never mid-schedule), the curves' equal-time clock, the paragraphs under the leaderboard's title (how the
runs were compared, that the LRs are untuned, what one demo run can and cannot show) and the closing
summary. Every number comes from the run's own files."""

from __future__ import annotations

import math
from typing import Any

from ...report import time_clock
from ...report.compare_table import fraction_text
from ...report.leaderboard_render import format_compute
from ..report_text import PAPER_OVERHEAD, ratio_text
from .training import ARCHES, BASELINE, WARMUP

EQUAL_TIME = "equal_time"  # the curves' second clock: steps × the run's paired step-time ratio


def equal_time_text(comparison: dict[str, Any], ratio: dict[str, Any], budget: dict[str, Any]) -> str:
    """Returns the demo's comparison: the protocol in words, then one row per run read at its own end."""
    base_steps = int(budget["max_steps"])
    rows = {r["name"]: r for r in comparison["runs"]}
    cand = ARCHES[1]
    lines = [
        "Equal time, fixed before training (nfeval reproduce's protocol; the paper compares at equal GPU "
        "time):",
        f"  NormFormer's step time over Pre-LN's, measured paired: {ratio_text(ratio)}, "
        f"{ratio.get('pairs')} pairs × {ratio.get('burst')} steps (the paper's overhead: {PAPER_OVERHEAD}).",
        f"  Pre-LN: {base_steps} steps ({budget['how']}); NormFormer: {base_steps} ÷ {ratio['ratio']:.3f} = "
        f"{rows[cand]['total_steps']} steps.",
        f"  Each run completes its own schedule ({WARMUP:.0%} warm-up, linear decay to 0) in the same time "
        "and is read at its end.",
        "",
    ]
    header = ["run", "lr", "steps", "tokens", "FLOPs", "val points", "ppl at equal time", "best ppl"]
    header += ["time to Pre-LN's best", "FLOPs to Pre-LN's best"]
    table = [header]
    for arch in ARCHES:
        r = rows[arch]
        table.append(
            [
                arch,
                f"{r['lr']['lr']:g}" if r.get("lr") else "–",
                str(r["steps"]),
                format_compute(r["tokens"], "tokens"),
                format_compute(r["flops"], "flops"),
                str(len(r["val"])),
                _ppl(r["final_val_ppl"]),
                _ppl(r["best_val_ppl"]),
                fraction_text(r, "wall_s"),
                fraction_text(r, "flops"),
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    lines += [
        "",
        f"'to Pre-LN's best': the fraction of Pre-LN's compute to its best val ppl "
        f"({comparison['target_val_ppl']:.2f}) each run needed to reach it; "
        f"{time_clock.DEFINITIONS[comparison['time_clock']]}.",
    ]
    return "\n".join(lines)


def _ppl(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.2f}"


def equal_time_curves(comparison: dict[str, Any], base_steps: int) -> dict[str, Any]:
    """Returns ``comparison`` with each val point's time on the equal-time clock (steps × the run's
    paired ratio from its record, ``compare``'s ``step_ratio``: in Pre-LN steps) and that clock's budget
    (Pre-LN's S), for ``plot_curves``."""
    runs = []
    for row in comparison["runs"]:
        r = row["step_ratio"]
        runs.append({**row, "val": [{**p, EQUAL_TIME: p["step"] * r} for p in row["val"]]})
    return {**comparison, "runs": runs, "budget": {**comparison["budget"], EQUAL_TIME: base_steps}}


TIME_AXIS = {
    "key": EQUAL_TIME,
    "label": "training time, in Pre-LN steps (steps × the paired step-time ratio)",
    "budget_label": "equal time: both schedules end",
}


def cannot_show(facts: dict[str, Any]) -> str:
    """Returns the caveat that goes wherever the two runs' numbers stand side by side (under the
    leaderboard's title and at the end of the closing summary): what one demo run cannot show, and why."""
    half = 100 * 1.959964 * math.sqrt(0.25 / facts["items"]) if facts.get("items") else None
    slices = (
        f"{facts['items']} items per public task (a 95% interval of ±{half:.0f} points at 50% accuracy)"
        if half
        else "small task slices"
    )
    near, cells = facts["near_chance"]
    return (
        f"What it cannot show: whether NormFormer beats Pre-LN. One seed, untuned learning rates, a model "
        f"{facts['gpt3_ratio']:,.0f}× smaller than GPT-3 Small and {slices}: chance lies inside the 95% "
        f"interval of {near} of the {cells} public zero-shot scores here, and a difference between the rows "
        "is no evidence either way. For that, run nfeval reproduce (tuned LRs, several seeds, paired "
        "tests) at the largest scale your hardware allows."
    )


def about(cfg, facts: dict[str, Any]) -> list[str]:
    """Returns the paragraphs under the leaderboard's title: what was run, how it was compared, that the
    LRs are untuned, and what one demo run can and cannot show (``cannot_show``)."""
    glue = (
        f" GLUE: {facts['glue_tasks']} dev ({facts['glue_dev_rows']} rows), each model's best of "
        f"{facts['glue_lrs']} fine-tuning learning rates, picked on the same dev rows it is reported on, "
        "as a GLUE sweep summary does (an optimistic pick)."
        if facts.get("glue_dev_rows")
        else ""
    )
    return [
        f"One run of nfeval demo: a Pre-LN and a NormFormer of {facts['parameters']:,} parameters "
        f"({facts['shape']}), trained on CPython's own documentation (the embedded corpus): Pre-LN on "
        f"{facts['tokens'][BASELINE]} tokens, NormFormer on {facts['tokens'][ARCHES[1]]}; then scored by the "
        f"same code as every nfeval result.{glue}",
        f"Compared as nfeval reproduce compares: NormFormer's step time over Pre-LN's was measured paired "
        f"before training ({facts['ratio']}); Pre-LN got {facts['steps'][BASELINE]} steps and NormFormer "
        f"{facts['steps'][ARCHES[1]]}, so each completed its own learning-rate schedule in the same time. "
        "Every reading below is at the end of a schedule.",
        f"Learning rates are untuned: both runs use {cfg.lr:g}. The paper's claim is against well-tuned "
        "baselines; nfeval tune tunes one, and nfeval reproduce and nfeval bakeoff tune before they "
        "compare.",
        "What one demo run can show: that every stage runs offline and what each artifact holds; the two "
        "learning curves at equal time; where each score sits against chance and the GPT-3 rows.",
        cannot_show(facts),
    ]


def headline(summary: dict[str, Any]) -> list[str]:
    """Returns one line per run of the closing summary: ppl at equal time, zero-shot, GLUE."""
    lines = []
    for arch, m in summary["models"].items():
        parts = [
            f"{arch:<11} {m['steps']} steps, val ppl {_ppl(m.get('val_ppl_at_equal_time'))} at equal time"
        ]
        zs = m.get("zeroshot", {})
        cloze = zs.get("corpus_cloze", {})
        if "acc_per_token" in cloze:
            parts.append(f"corpus cloze {100 * cloze['acc_per_token']:.1f}% (chance 25%)")
        public = {t: zs[t].get(m["metrics"].get(t, "acc"), math.nan) for t in zs if t != "corpus_cloze"}
        if public:
            parts.append("public tasks " + ", ".join(f"{t} {100 * v:.1f}%" for t, v in public.items()))
        for task, g in m.get("glue", {}).items():
            scores = {k: v for k, v in g.items() if isinstance(v, float) and k != "best_lr"}
            shown = ", ".join(f"{k} {v:.3f}" for k, v in scores.items())
            parts.append(f"{task} {shown} @ lr {g['best_lr']:g}")
        lines.append("  " + " | ".join(parts))
    return lines
