"""The bakeoff report's charts: perplexity, zero-shot accuracy and rising-LR stability by candidate, and
the first seed's validation curves."""

from __future__ import annotations

import os
from typing import Any

from ...base.plots import plot_bars, plot_curves


def plots(out: str, r: dict[str, Any]) -> list[str]:
    """Draws the PPL, zero-shot and stability bar charts; returns their file names (in ``out``)."""
    names = [row["name"] for row in r["ranking"]]
    means = [row["interval"]["mean"] if row["interval"] else None for row in r["ranking"]]
    files = [
        plot_bars(
            names,
            [("final val PPL, mean over seeds", means)],
            os.path.join(out, "bakeoff_ppl.png"),
            "Bakeoff: validation perplexity (lower is better)",
            "validation PPL",
        )
    ]
    tasks = list(dict.fromkeys(t["task"] for t in r["zeroshot_tests"]))
    if tasks:
        score = {(t["name"], t["task"]): t for t in r["zeroshot_tests"]}
        base = r["baseline"]
        rows = [
            (
                base,
                [
                    100
                    * _mean([s["baseline"] for s in score[next(k for k in score if k[1] == t)]["per_seed"]])
                    for t in tasks
                ],
            )
        ]
        rows += [
            (
                n,
                [
                    100 * _mean([s["value"] for s in score[(n, t)]["per_seed"]]) if (n, t) in score else None
                    for t in tasks
                ],
            )
            for n in names
            if n != base
        ]
        files.append(
            plot_bars(
                tasks,
                rows,
                os.path.join(out, "bakeoff_zeroshot.png"),
                "Bakeoff: zero-shot accuracy",
                "accuracy (%)",
            )
        )
    if r.get("curves_seed1"):
        files.append(plot_curves(r["curves_seed1"], os.path.join(out, "bakeoff_curves_seed1.png")))
    survived = [(s["name"], s["survived"]) for s in r["stability"]]
    files.append(
        plot_bars(
            [n for n, _ in survived],
            [("updates survived, mean over seeds", [_mean(v) for _, v in survived])],
            os.path.join(out, "bakeoff_stability.png"),
            "Bakeoff: rising-LR stability (higher is more stable)",
            "updates survived",
        )
    )
    return [os.path.basename(f) for f in files]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
