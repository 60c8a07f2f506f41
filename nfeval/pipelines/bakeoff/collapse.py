"""Where a bakeoff's candidates did not train (``trained_gate``): the LRs of each candidate's tune grid
whose point fails the gate, the candidates that trained at none of them (listed, not ranked), and the
recipe a "worse" verdict on a candidate that collapsed somewhere is read under."""

from __future__ import annotations

from typing import Any

from ...base.jsonio import load_json
from .. import trained_gate
from .runs import Context, tune_file


def failed_lrs(ctx: Context, unigram: float, candidates: list | None = None) -> dict[str, list[float]]:
    """Returns {name: the LRs of its tune grid whose point did not end below the gate's threshold (a
    diverged or missing point included)}, for every candidate (of ``candidates`` when given)."""
    out = {}
    for c in ctx.candidates if candidates is None else candidates:
        entries = load_json(tune_file(ctx, c))["presets"].values()
        out[c.name] = sorted(lr for entry in entries for lr in trained_gate.failed_lrs(entry, unigram))
    return out


def untrainable(ctx: Context, failed: dict[str, list[float]]) -> frozenset[str]:
    """Returns the candidates for which every point of the tune grid failed the gate (``failed``:
    ``failed_lrs``'s answer): they did not train at any LR of their grid under this recipe."""
    grids = {c.name: load_json(tune_file(ctx, c))["grid"]["lrs"] for c in ctx.candidates if c.name in failed}
    return frozenset(name for name, lrs in failed.items() if len(lrs) >= len(grids[name]))


def qualify_worse(
    tests: list[dict[str, Any]], records: dict[str, list[dict]], failed: dict[str, list[float]], words: str
) -> None:
    """Adds ``under`` (the recipe it holds under, ``words``, and where the candidate did not train) to
    each settled perplexity test in ``tests`` whose verdict is "worse" and whose candidate collapsed
    somewhere: at an LR of its grid or in a run (in place)."""
    for t in tests:
        lrs = failed.get(t["name"], [])
        runs = sum(not r.get("trained", True) for r in records.get(t["name"], []))
        if t["verdict"] != "worse" or not (lrs or runs):
            continue
        where = [f"at LR {', '.join(f'{lr:g}' for lr in lrs)} of its grid"] if lrs else []
        where += [f"in {runs} of its runs"] if runs else []
        t["under"] = f"under this recipe ({words}): it did not train {' and '.join(where)}"
