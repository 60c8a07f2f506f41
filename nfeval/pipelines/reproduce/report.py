"""``report.md`` and ``report.json`` of ``nfeval reproduce``: the scale beside the paper's, the one recipe,
what was fixed before training, then one section per experiment in the paper's order, each with the
paper's finding, its protocol, the measured numbers and verdicts (``report.verdict``: Holm-adjusted
within the primary and the secondary family). ``render`` is a function of ``report.json`` alone, so a
committed report regenerates from its JSON (``nfeval reproduce --out DIR --render-only``)."""

from __future__ import annotations

import os
from typing import Any

from ...base.artifacts import atomic_write_json, atomic_write_text, provenance
from ...base.jsonio import load_json, reading
from ...engine.training import recipe as recipes
from ...report import verdict
from .. import init_sensitivity, scale_facts, trained_gate
from ..lr_band import describe, tune_seed_lines
from ..report_text import compute_path_lines, markdown_table


def _p(p: float | None) -> str:
    return "–" if p is None else (f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}")


def summary_rows(sections: list[dict[str, Any]]) -> list[list[str]]:
    """Returns one row per claim: experiment, claim, family, raw p, Holm-adjusted p, verdict, MDE, TOST p,
    seeds that would detect the observed mean."""
    rows = []
    for s in sections:
        name = s["title"].split(":")[0]
        if not s.get("claims"):
            rows.append([name, "–", "", "", "", s["status"], "", "", ""])
        for c in s.get("claims", []):
            mde = "–" if c.get("mde") is None else f"{c['mde']:.3g}"
            needed = "–" if c.get("seeds_needed") is None else str(c["seeds_needed"])
            tost = "–" if c.get("p_equivalence") is None else f"{_p(c['p_equivalence'])} (±{c['margin']:g})"
            rows.append(
                [name, c["claim"], c.get("family", ""), _p(c.get("p")), _p(c.get("p_holm"))]
                + [f"**{c['verdict']}**", mde, tost, needed]
            )
    return rows


def render_section(s: dict[str, Any]) -> list[str]:
    """Returns the markdown lines of one section."""
    lines = [f"## {s['title']}", "", f"**Paper** ({s['reference']}): {s['finding']}", ""]
    if s.get("protocol"):
        lines += [f"**Protocol:** {s['protocol']}.", ""]
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
            family = c.get("family", verdict.SECONDARY)
            lines.append(
                f"- {c['claim']} ({family}): {c['measured']} → **{c['verdict']}** "
                f"({c['why']}; Holm-adjusted p {_p(c.get('p_holm'))}, n={c['n']})"
            )
            sensitivity = describe(c.get("lr_sensitivity"))
            if sensitivity:
                lines.append(f"  - {sensitivity}")
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
        lines += tune_seed_lines(h)
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


def _scale_lines(h: dict[str, Any]) -> list[str]:
    facts = h.get("facts")
    if not facts:
        return []
    columns, rows = scale_facts.table(facts, h["paper_facts"])
    return ["## Scale", "", *markdown_table(columns, rows), ""]


def _seed_note(h: dict[str, Any]) -> list[str]:
    history = h.get("seed_history") or []
    later = [e for e in history[1:] if e.get("after_a_report")]
    if not later:
        return []
    steps = " → ".join(str(e["seeds"]) for e in history)
    return [
        f"**Seeds added after reading results.** This folder's seeds went {steps}; the report at "
        f"{history[0]['seeds']} seed(s) had been written before seeds were added (optional stopping): the "
        "p-values below do not account for that choice.",
        "",
    ]


def _claims(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for s in report["sections"] for c in s.get("claims", [])]


def render(report: dict[str, Any]) -> str:
    """Returns report.md's text, from ``report`` (report.json's content) alone."""
    h = report["header"]
    claims = _claims(report)
    primary = [c for c in claims if c.get("family") == verdict.PRIMARY]
    facts = h.get("facts")
    lines = [f"# NormFormer paper, reproduced at the `{h['scale']}` scale (`nfeval reproduce`)", ""]
    if facts:
        lines += [scale_facts.caveat(facts, h["paper_facts"]), ""]
    lines += [
        f"Command: `{h['command']}`  ",
        f"Seeds: {h['seeds']} · budget: {h['budget']} · hardware: {h['hardware']}, {h.get('jobs', 1)} "
        f"run(s) at a time on {h.get('cpu_count', '?')} cores  ",
        f"Learning rate: {h['lr']}  ",
        f"Training time of every run: {h.get('train_hours', 0):.2f} h · wall-clock of the last invocation: "
        f"{h['wall_min']:.1f} min · 1-min load average at its last update: {h['load_average']} · "
        f"nfeval {h['version']} ({h['git'] or 'no git'})",
        "",
        *compute_path_lines(h),
    ]
    for objective, r in (h.get("recipes") or {}).items():
        lines += [f"**Recipe ({objective}), shared by every run of the report:** {recipes.describe(r)}.", ""]
    if h.get("unigram_ppl") is not None:  # a report made before the trained-run gate has none
        lines += [trained_gate.gate_text(h["unigram_ppl"], h["trained_factor"]), ""]
    lines += init_sensitivity.lines(h.get("token_sensitivity"))
    lines += _scale_lines(h)
    lines += _seed_note(h)
    lines += [
        "**Primary claims, declared before the runs:** "
        + (", ".join(f"{c['claim']} → **{c['verdict']}**" for c in primary) or "none of them was run")
        + ". Every other claim is secondary.",
        "",
        f"**Decision rule.** {verdict.RULE}.",
        "",
        "## Summary",
        "",
        *markdown_table(
            [
                "experiment",
                "claim",
                "family",
                "p",
                "Holm p",
                "verdict",
                "MDE",
                "TOST p (margin)",
                "seeds to detect",
            ],
            summary_rows(report["sections"]),
        ),
        "",
    ]
    lines += setup_lines(h)
    for s in report["sections"]:
        lines += render_section(s)
    return "\n".join(lines)


def adjusted(sections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Returns ``sections`` with every finished claim's verdict taken from its family's Holm-adjusted p."""
    claims = verdict.adjust(c for s in sections if s["status"] == "done" for c in s.get("claims", []))
    it = iter(claims)
    return [
        {**s, "claims": [next(it) for _ in s.get("claims", [])]} if s["status"] == "done" else s
        for s in sections
    ]


def write(out: str, header: dict[str, Any], sections: list[dict[str, Any]]) -> str:
    """Writes ``out/report.json`` and ``out/report.md`` atomically; returns the markdown path."""
    report = {"nfeval": {"provenance": provenance()}, "header": header, "sections": adjusted(sections)}
    atomic_write_json(os.path.join(out, "report.json"), report)
    path = os.path.join(out, "report.md")
    atomic_write_text(path, render(report) + "\n")
    return path


def rerender(out: str) -> str:
    """Rewrites ``out/report.md`` from ``out/report.json`` alone (nothing is trained or measured);
    returns the markdown path."""
    path, stored = os.path.join(out, "report.md"), os.path.join(out, "report.json")
    with reading(stored, "the report.json that nfeval reproduce writes (rerun it to rewrite the file)"):
        text = render(load_json(stored))
    atomic_write_text(path, text + "\n")
    return path
