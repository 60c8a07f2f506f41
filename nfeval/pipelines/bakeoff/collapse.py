"""The recipe a bakeoff's "worse" verdict on a candidate that collapsed somewhere is read under (where
candidates did not train is read from their tunes: ``runs.failed_lrs`` and ``runs.untrainable``)."""

from __future__ import annotations

from typing import Any


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
