"""``nfeval compare --group NAME=GLOB …``: compute-matched comparison over seeds, mean ± std with t-intervals.

Each group holds several runs of one architecture (e.g. ``--group prenorm=runs/pre-s*``; runs sorted by
name, numbers in natural order). Per group it reports, as mean ± std with a Student-t interval over runs:

- validation perplexity at equal compute (equal FLOPs and equal wall-clock), the budget being the
  smallest final compute among all runs of all groups, as ``nfeval compare``; a cell read before the
  end of some run's schedule says "not compute-matched (mid-schedule)" and how many runs it concerns;
- the fraction of the baseline's compute needed to reach the baseline's best validation perplexity.
  Seeds pair by position: the i-th run of a group is measured against the i-th baseline run (its
  target and its compute), so groups must hold the same number of runs. When some run never reaches
  its target the fraction has no mean; the count reached is reported instead.
"""

from __future__ import annotations

import glob
import math
import os
import re
from typing import Any

from ..base.artifacts import provenance
from ..base.errors import ConfigError, MissingDataError
from ..base.escape import text_cell
from . import significance as sig
from . import time_clock
from .compare import (
    AXIS_LABELS,
    MID_SCHEDULE,
    _at_budget,
    _check_comparable,
    _json_safe,
    _shared_recipe,
    crossing,
)
from .compare_read import AXES, load_run
from .compare_table import table


def _natural(path: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def parse_groups(specs: list[str]) -> dict[str, list[str]]:
    """Returns {group name: run dirs} from ``NAME=GLOB`` specs (repeatable; each name once)."""
    groups: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, pattern = spec.partition("=")
        if not sep or not name or not pattern:
            raise ConfigError(f"--group {spec}: expected NAME=GLOB, e.g. prenorm=runs/pre-s*")
        if name in groups:
            raise ConfigError(f"--group {spec}: group name {name!r} given twice; give each group one name")
        found = [p for p in glob.glob(pattern) if os.path.isdir(p)] or (
            [pattern] if os.path.isdir(pattern) else []
        )
        if not found:
            raise MissingDataError(f"--group {spec}: {pattern!r} matches no run directory")
        groups[name] = sorted(found, key=_natural)
    return groups


def _fraction(run, base, axis: str, ratios: dict[str, float] | None) -> float | None:
    """Returns the fraction of ``base``'s compute on ``axis`` to its best PPL that ``run`` needed to reach
    it; time on the one clock of ``time_clock`` (``ratios``: the paired step-time ratios by run path)."""
    finite = [p for p in base.val if math.isfinite(p["val_ppl"])]
    if not finite:
        return None
    best = min(finite, key=lambda p: p["val_ppl"])
    reached = crossing(run.val, best["val_ppl"])
    if axis == "wall_s":
        return time_clock.fraction(reached, best, ratios, run.path, base.path)
    return reached[axis] / best[axis] if reached else None


def compare_groups(
    groups: dict[str, list[str]], baseline: str | None = None, mixed_recipes: bool = False
) -> dict[str, Any]:
    """Returns the seed-group comparison as a JSON-safe dict (see the module docstring); ``baseline`` is a
    group name, default the first group; runs of different recipes raise ConfigError unless
    ``mixed_recipes`` (``compare``'s rule)."""
    if not groups:
        raise ConfigError("compare: expected RUN_DIRs or --group NAME=GLOB")
    baseline = baseline or next(iter(groups))
    if baseline not in groups:
        raise ConfigError(f"--baseline {baseline}: not a group; expected one of {list(groups)}")
    runs = {name: [load_run(d) for d in dirs] for name, dirs in groups.items()}
    sizes = {name: len(r) for name, r in runs.items()}
    if len(set(sizes.values())) > 1:
        raise ConfigError(
            f"--group: groups hold {sizes} runs; seeds pair by position, so each group needs "
            "the same number of runs"
        )
    every = [r for group in runs.values() for r in group]
    shared, mixed = _shared_recipe(every, mixed_recipes)
    budget = {axis: min(r.val[-1][axis] for r in every) for axis in AXES}
    ratios = time_clock.paired_ratios({r.path: r.timing for r in every})
    rows = []
    for name, group in runs.items():
        readings = {axis: [_at_budget(r, axis, budget[axis]) for r in group] for axis in AXES}
        ppl = {axis: [x["val_ppl"] for x in v] for axis, v in readings.items()}
        fractions = {
            axis: [_fraction(r, b, axis, ratios) for r, b in zip(group, runs[baseline])] for axis in AXES
        }
        archs = sorted({r.architecture or "–" for r in group})
        rows.append(
            {
                "name": name,
                "runs": [os.path.abspath(r.path) for r in group],
                "architecture": ", ".join(archs),
                "n": len(group),
                "ppl_at_equal": {axis: _summary(v) for axis, v in ppl.items()},
                "mid_schedule": {axis: sum(x["mid_schedule"] for x in v) for axis, v in readings.items()},
                "to_target": {
                    axis: {"reached": sum(f is not None for f in v), **_summary(v)}
                    for axis, v in fractions.items()
                },
            }
        )
    return _json_safe(
        {
            "nfeval": {"provenance": provenance()},
            "baseline": baseline,
            "recipe": shared,
            "mixed_recipes": mixed,
            "budget": budget,
            "time_clock": time_clock.PAIRED if ratios else time_clock.MEASURED,
            "warnings": _check_comparable(every),
            "groups": rows,
        }
    )


def _summary(values: list[float | None]) -> dict[str, Any]:
    """Returns t_interval's summary of ``values``, or mean/std/interval None when one is missing."""
    if all(v is not None and math.isfinite(v) for v in values):
        return {**sig.t_interval(values), "values": values}
    return {"mean": None, "std": None, "low": None, "high": None, "n": len(values), "values": values}


def _cell(s: dict[str, Any], digits: int) -> str:
    if s["mean"] is None:
        return f"not reached ({s['reached']}/{s['n']})" if "reached" in s else "–"
    if s["std"] is None:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f} [{s['low']:.{digits}f}, {s['high']:.{digits}f}]"


def _mid(group: dict[str, Any], axis: str) -> str:
    k = group["mid_schedule"][axis]
    return f" (mid-schedule {k}/{group['n']})" if k else ""


def format_groups(result: dict[str, Any]) -> str:
    """Returns the seed-group comparison as a text table with a header naming baseline and budget; each
    line (group names and warnings come from files and flags) on one line (``escape.text_cell``)."""
    conf = next(
        (
            s["confidence"]
            for g in result["groups"]
            for s in g["ppl_at_equal"].values()
            if s.get("confidence")
        ),
        sig.CONFIDENCE,
    )
    budget = result["budget"]
    mixed = result.get("mixed_recipes") or []
    lines = [f"MIXED RECIPES: these runs were trained under different recipes ({' | '.join(mixed)})"] * bool(
        mixed
    )
    lines += [
        f"baseline group: {result['baseline']}; seeds pair by position; "
        f"mean ± std [{100 * conf:g}% t-interval]",
        f"equal-compute budget: {budget['flops']:.2e} FLOPs | {budget['wall_s']:.4g} s of training time",
        "",
    ]
    header = ["group", "n", "arch"] + [f"ppl@{AXIS_LABELS[a]}" for a in AXES]
    header += [f"{AXIS_LABELS[a]} to target" for a in AXES]
    body = [header]
    for g in result["groups"]:
        body.append(
            [g["name"], str(g["n"]), g["architecture"]]
            + [_cell(g["ppl_at_equal"][a], 2) + _mid(g, a) for a in AXES]
            + [_cell(g["to_target"][a], 3) for a in AXES]
        )
    lines += table(body, right={1, 3, 4, 5, 6})
    lines += [
        "",
        "'to target': fraction of the paired baseline run's compute needed to reach its best val ppl.",
        f"'time to target': {time_clock.DEFINITIONS[result['time_clock']]}.",
    ]
    if any(g["mid_schedule"][a] for g in result["groups"] for a in AXES):
        lines.append(
            f"(mid-schedule k/n): {MID_SCHEDULE}: k of the group's n runs are read at the equal budget "
            "before the end of their LR schedule, against runs read at their decayed end"
        )
    lines += [f"warning: {w}" for w in result["warnings"]]
    return "\n".join(text_cell(line) for line in lines)
