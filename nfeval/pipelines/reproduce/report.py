"""``report.md`` and ``report.json`` of ``nfeval reproduce``: one section per experiment, in the paper's
order, each with the paper's finding, the measured numbers, seeds, budget, hardware and verdicts."""

from __future__ import annotations

import os
from typing import Any

from ...base.artifacts import atomic_write_json, atomic_write_text, provenance
from . import verdict
from .plan import POWER_NOTES


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|")


def markdown_table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    """Returns a GitHub markdown table."""
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def summary_rows(sections: list[dict[str, Any]]) -> list[list[str]]:
    """Returns one row per claim: experiment, claim, verdict, minimum detectable effect, seeds that would
    detect the observed mean, why."""
    rows = []
    for s in sections:
        if not s.get("claims"):
            rows.append([s["title"].split(":")[0], "–", s["status"], "", "", ""])
        for c in s.get("claims", []):
            mde = "–" if c.get("mde") is None else f"{c['mde']:.3g}"
            needed = c.get("seeds_needed")
            needed_text = "–" if needed is None else str(needed)
            rows.append(
                [s["title"].split(":")[0], c["claim"], f"**{c['verdict']}**", mde, needed_text, c["why"]]
            )
    return rows


def render_section(s: dict[str, Any]) -> list[str]:
    """Returns the markdown lines of one section."""
    lines = [f"## {s['title']}", "", f"**Paper** ({s['reference']}): {s['finding']}", ""]
    if s["status"] != "done":
        return lines + [f"**Status:** {s['status']}.", ""] + [f"- {n}" for n in s.get("notes", [])] + [""]
    lines += [
        f"Seeds: {', '.join(map(str, s['seed_values']))} · budget: {s['budget']} · hardware: {s['hardware']}",
        "",
    ]
    for table in s["tables"]:
        lines += [f"*{table['title']}*", "", *markdown_table(table["columns"], table["rows"]), ""]
    if s["claims"]:
        lines += ["**Measured vs paper:**", ""]
        for c in s["claims"]:
            lines.append(f"- {c['claim']}: {c['measured']} → **{c['verdict']}** ({c['why']}, n={c['n']})")
        lines.append("")
    lines += [f"![{os.path.basename(f)}]({f})" for f in s["figures"]]
    lines += [""] if s["figures"] else []
    lines += [f"- {n}" for n in s.get("notes", [])]
    return lines + [""]


def setup_lines(h: dict[str, Any]) -> list[str]:
    """Returns the markdown of what was fixed before training: the LR tune and the equal-time budgets."""
    lines = []
    if h.get("tuning"):
        columns = ["objective", "preset", "final val PPL per LR of the grid (* best)", "tuned LR", "budget"]
        lines += ["## Learning rates, tuned per architecture (`nfeval tune`)", ""]
        lines += [*markdown_table(columns, h["tuning"]), ""]
        lines += [line for w in h.get("warnings", []) for line in (f"> warning: {w}", "")]
    elif h.get("tuned") is False:
        lines += ["**Untuned** (`--no-tune`): one LR for every architecture; every verdict says so.", ""]
    if h.get("equal_time"):
        columns = ["run", "timed against", "paired step-time ratio [CI] (overhead)", "paper", "steps"]
        lines += [
            "## Equal time, fixed before training",
            "",
            "Each run's step time against its baseline, measured paired (interleaved bursts of both in one "
            "process, so machine load cancels) before any training; the baseline trains the scale's steps "
            "and each run those steps ÷ its ratio, so every run ends its own schedule in the same time.",
            "",
            *markdown_table([*columns, "measured"], h["equal_time"]),
            "",
        ]
    return lines


def render(report: dict[str, Any]) -> str:
    """Returns report.md's text."""
    h = report["header"]
    lines = [
        "# NormFormer paper, reproduced at small scale (`nfeval reproduce`)",
        "",
        f"Command: `{h['command']}`  ",
        f"Scale: {h['scale']} · seeds: {h['seeds']} · budget: {h['budget']} · hardware: {h['hardware']}  ",
        f"Learning rate: {h['lr']}  ",
        f"Wall-clock of this invocation: {h['wall_min']:.1f} min · 1-min load average at the last "
        f"update: {h['load_average']} on {os.cpu_count()} cores · "
        f"nfeval {h['version']} ({h['git'] or 'no git'})",
        "",
        f"**Decision rule.** {verdict.RULE}. Small models trained for minutes are not 125M models trained "
        "for days: an 'inconclusive' or 'disagrees' here is a statement about this scale only.",
        "",
        f"**Power.** MDE: the minimum detectable effect of each claim at the seeds used ({verdict.POWER:.0%} "
        "power, α 0.05 two-sided, in the claim's units); seeds to detect: how many seeds would decide it if "
        f"the effect is what was measured (– : over {verdict.MAX_SEEDS}, or no spread).",
        *(
            ["", f"**What this scale can decide.** {POWER_NOTES[h['scale']]}"]
            if h["scale"] in POWER_NOTES
            else []
        ),
        "",
        "## Summary",
        "",
        *markdown_table(
            ["experiment", "claim", "verdict", "MDE", "seeds to detect the observed mean", "why"],
            summary_rows(report["sections"]),
        ),
        "",
    ]
    lines += setup_lines(h)
    for s in report["sections"]:
        lines += render_section(s)
    return "\n".join(lines)


def write(out: str, header: dict[str, Any], sections: list[dict[str, Any]]) -> str:
    """Writes ``out/report.json`` and ``out/report.md`` atomically; returns the markdown path."""
    report = {"nfeval": {"provenance": provenance()}, "header": header, "sections": sections}
    atomic_write_json(os.path.join(out, "report.json"), report)
    path = os.path.join(out, "report.md")
    atomic_write_text(path, render(report) + "\n")
    return path
