"""The compute-matched comparison (``compare.compare``) as a text table."""

from __future__ import annotations

from typing import Any

from ..base.escape import text_cell
from ..engine.model.flops import FLOPS_COUNTED
from . import time_clock
from .compare import AXIS_LABELS, MID_SCHEDULE, NOT_REACHED


def _si(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "–"
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:.{digits}g}{suffix}"
    return f"{x:.{digits}g}"


def _sci(x: float | None) -> str:
    if x is None:
        return "–"
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h" if seconds >= 360 else f"{seconds:.4g} s"


def _ppl(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _ppl_at(row: dict, axis: str) -> str:
    reading = row["at_equal"][axis]
    return _ppl(reading["val_ppl"]) + (" (mid-schedule)" if reading.get("mid_schedule") else "")


def mid_schedule_lines(result: dict[str, Any]) -> list[str]:
    """Returns one line per axis whose equal-budget reading falls mid-schedule in some run, naming the
    runs and where in their schedules they are read."""
    lines = []
    for axis, names in (result.get("mid_schedule") or {}).items():
        if not names:
            continue
        where = ", ".join(
            f"{r['name']} at step {r['at_equal'][axis]['steps']:.0f} of {r['total_steps']}"
            for r in result["runs"]
            if r["name"] in names
        )
        lines.append(
            f"ppl@{AXIS_LABELS[axis]}: {MID_SCHEDULE}: {where}, before the LR decayed, against a run at the "
            "end of its schedule; give the runs equal budgets with complete schedules to compare them"
        )
    return lines


def fraction_text(row: dict, axis: str) -> str:
    """Returns a run's fraction of the baseline's compute on ``axis`` to its best PPL: "0.625", "≤0.250"
    when the run's first validation point already reached it, or "not reached"."""
    target = row["to_target"]
    if not target["reached"]:
        return NOT_REACHED
    return ("≤" if target["bound"] == "at_most" else "") + f"{target['fraction'][axis]:.3f}"


def table(rows: list[list[str]], right: set[int]) -> list[str]:
    """Returns ``rows`` (the first being the header) as aligned text lines, each cell on one line
    (``escape.text_cell``: names come from files and folders); columns in ``right`` right-aligned."""
    rows = [[text_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
    return out


def format_comparison(result: dict[str, Any]) -> str:
    """Returns the comparison as a text table with a header naming target and budget, warnings last; each
    line (run names and warnings come from files and folders) on one line (``escape.text_cell``)."""
    at = result["baseline_at_target"]
    mixed = result.get("mixed_recipes") or []
    lines = [f"MIXED RECIPES: these runs were trained under different recipes ({' | '.join(mixed)})"] * bool(
        mixed
    )
    lines += [
        f"baseline: {result['baseline']}; target = its best val ppl {_ppl(result['target_val_ppl'])} "
        f"(step {at['step']}, {_sci(at['flops'])} FLOPs, {_hours(at['wall_s'])})",
        f"equal-compute budget: {_sci(result['budget']['flops'])} FLOPs | "
        f"{_hours(result['budget']['wall_s'])} of training time",
        "",
    ]
    lines += _run_rows(result["runs"])
    lines += [
        "",
        "'to target': fraction of the baseline's compute needed to reach its best val ppl (≤: reached by "
        "the first validation point).",
        f"'time to target': {time_clock.DEFINITIONS[result['time_clock']]}.",
        f"'ppl@FLOPs', 'FLOPs to target': {FLOPS_COUNTED}.",
    ]
    lines += [
        "learning rates: "
        + " | ".join(f"{r['name']}: {r['lr']['label']}" for r in result["runs"] if r.get("lr"))
    ]
    lines += mid_schedule_lines(result)
    lines += [f"warning: {w}" for w in result["warnings"]]
    return "\n".join(text_cell(line) for line in lines)


def _run_rows(runs: list[dict[str, Any]]) -> list[str]:
    """Returns the table of the runs: one row each, under a header."""
    header = [
        "run",
        "arch",
        "steps",
        "tokens",
        "s/step",
        "overhead",
        "best ppl",
        "ppl@FLOPs",
        "ppl@time",
        "tokens@time",
        "FLOPs to target",
        "time to target",
    ]
    body = [header]
    for row in runs:
        overhead = row["step_time_overhead"]
        body.append(
            [
                row["name"],
                row["architecture"] or "–",
                str(row["steps"]),
                _si(row["tokens"]),
                "–" if row["step_time_s"] is None else f"{row['step_time_s']:.4g}",
                "–" if overhead is None else f"{overhead:+.1%}",
                _ppl(row["best_val_ppl"]),
                _ppl_at(row, "flops"),
                _ppl_at(row, "wall_s"),
                _si(row["at_equal"]["wall_s"]["tokens"]),
                fraction_text(row, "flops"),
                fraction_text(row, "wall_s"),
            ]
        )
    return table(body, right=set(range(2, len(header))))
