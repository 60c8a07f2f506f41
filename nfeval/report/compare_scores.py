"""``nfeval compare-scores A.json B.json``: is A's difference to B real? Paired, per task and metric.

Both files are zero-shot results (``nfeval zeroshot``, with their ``.items.json`` sidecars, or lm-eval's
``results_<date>.json`` with its ``samples_<task>_<date>.jsonl``; an ``--output_path`` folder of one
model stands for its latest results file) or GLUE summaries (``nfeval glue``, with each point's
``predictions.json``). For every task and metric in both, prints A's and B's scores, A − B with a
paired bootstrap interval over items, and the exact McNemar p-value for accuracy metrics; "*" marks a
difference whose bootstrap p, Holm-adjusted over the table's rows, is below 1 − confidence.
See nfeval/report/paired.py.
"""

from __future__ import annotations

from typing import Any

from ..base.artifacts import provenance
from ..base.errors import ConfigError
from ..base.escape import text_cell
from . import significance as sig
from .compare_table import table
from .leaderboard_read import results_paths
from .paired import UnpairedError, adjust, compare_files


def compare_scores(
    path_a: str,
    path_b: str,
    n_resamples: int = sig.N_RESAMPLES,
    seed: int = sig.SEED,
    confidence: float = sig.CONFIDENCE,
) -> dict[str, Any]:
    """Returns {"a", "b", "rows", "nfeval"}: the paired comparison of A (candidate) against B (baseline)."""
    if n_resamples < 100:
        raise ConfigError(f"--resamples {n_resamples}: expected at least 100")
    if not 0 < confidence < 1:
        raise ConfigError(f"--confidence {confidence}: expected a value in (0, 1)")
    path_a, path_b = one_results_file(path_a, "A"), one_results_file(path_b, "B")
    rows = compare_files(path_a, path_b, n_resamples=n_resamples, seed=seed, confidence=confidence)
    if not rows:
        raise UnpairedError(f"{path_a} and {path_b}: no task and metric in both files; nothing to pair")
    adjust(rows, confidence)
    return {"nfeval": {"provenance": provenance()}, "a": path_a, "b": path_b, "rows": rows}


def one_results_file(path: str, what: str) -> str:
    """Returns the one results file ``path`` names (``leaderboard_read.results_paths``); a ConfigError when
    it is a folder holding several models' results."""
    files = results_paths([path])
    if len(files) != 1:
        raise ConfigError(
            f"{what} {path}: holds the results of {len(files)} models ({', '.join(files)}); name one "
            "results file or model folder"
        )
    return files[0]


def format_rows(result: dict[str, Any]) -> str:
    """Returns the comparison as a text table, with a header naming A and B and the interval; each line
    (paths, task and metric names) on one line (``escape.text_cell``)."""
    rows = result["rows"]
    conf = f"{100 * rows[0]['confidence']:g}%" if rows else "95%"
    lines = [f"A: {result['a']}", f"B: {result['b']}", ""]
    body = [["task", "metric", "n", "A", "B", "A − B", f"{conf} interval", "p (Holm)", "McNemar p", ""]]
    for r in rows:
        p = "–" if r["mcnemar_p"] is None else f"{r['mcnemar_p']:.3g}"
        body.append(
            [
                r["task"],
                r["metric"],
                str(r["n"]),
                f"{r['value']:.4f}",
                f"{r['baseline']:.4f}",
                f"{r['difference']:+.4f}",
                f"[{r['low']:+.4f}, {r['high']:+.4f}]",
                f"{r['p_holm']:.3g}",
                p,
                "*" if r["significant"] else "",
            ]
        )
    lines += table(body, right={2, 3, 4, 5, 6, 7, 8})
    n_res = rows[0]["n_resamples"] if rows else sig.N_RESAMPLES
    lines += [
        "",
        f"paired bootstrap over items ({n_res} resamples, seed {rows[0]['seed'] if rows else 0}); the "
        f"interval is not adjusted; p (Holm): the bootstrap p Holm-adjusted over the {len(rows)} rows; "
        f"*: p (Holm) < {1 - (rows[0]['confidence'] if rows else sig.CONFIDENCE):.2g}",
    ]
    if not rows:
        lines.append("no task and metric in common")
    return "\n".join(text_cell(line) for line in lines)
