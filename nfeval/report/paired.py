"""Paired comparison of two models' results, per task and metric: difference, bootstrap interval, McNemar.

Zero-shot results pair through their per-item sidecars (``F.items.json``, nfeval/zeroshot/items.py) or,
in lm-eval's layout, the ``samples_<task>_<date>.jsonl`` of the same run (nfeval/zeroshot/lm_eval_layout.py);
GLUE summaries through the ``predictions.json`` of the points at each task's best learning rate
(nfeval/glue/predictions.py; with several seeds, the statistic is the mean over seeds, as the summary's).
Two results pair only when they were scored on the same items: the same documents (ids and lm-eval's
document hashes) or the same dev examples (data sha256 and labels); otherwise ``UnpairedError`` says why.
Before pairing, each side's per-item outcomes must reproduce the score its results file reports.

A difference is "candidate − baseline"; a row alone is significant when its interval excludes 0. A table
of several differences marks them by Holm-adjusted p over all of them (``adjust``), so that the chance
of one false mark stays at 1 − confidence however many cells the table compares.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..base.errors import ConfigError, DataError
from ..base.escape import markdown_row, markdown_text
from ..base.jsonio import file_sha256, load_json, reading
from ..base.sweep_points import lr_key, point_dir
from ..glue import metrics as glue_metrics
from ..glue import predictions as glue_predictions
from ..glue.points import SWEEP
from ..tasks import canonical_name
from ..zeroshot import items as zeroshot_items
from ..zeroshot import lm_eval_layout
from . import significance as sig
from .leaderboard_read import read_results
from .verdict import holm


class UnpairedError(DataError):
    """Two results were scored on different items (documents, limits or dev data) and cannot be paired."""


def _check_reproduces(path: str, what: str, reported: float, recomputed: float) -> None:
    if abs(reported - recomputed) > 1e-6:
        raise DataError(
            f"{path}: {what} is {reported}, but its per-item outcomes give {recomputed}; "
            "the per-item file is stale (rerun to rewrite both)"
        )


# ---------------------------------------------------------------- zero-shot


def zeroshot_items_by_task(path: str) -> dict[str, dict[str, Any]]:
    """Returns {canonical task: {"name", "record", "results"}} of a zero-shot results file and its per-item
    outcomes (``_items``), checking that the per-item means are the reported scores."""
    data = load_json(path)
    reported = data.get("results")
    bad = [n for n, v in reported.items() if not isinstance(v, dict)] if isinstance(reported, dict) else []
    if not isinstance(reported, dict) or bad:
        key, value = (f"results.{bad[0]}", reported[bad[0]]) if bad else ("results", reported)
        raise DataError(f"{path}: key {key!r} is {value!r}; expected lm-eval's per-task results"[:300])
    items = _items(path, data)
    aliases = _dig(data, "nfeval", "tasks")
    aliases = aliases if isinstance(aliases, dict) else {}
    out = {}
    for name, record in items.items():
        results = reported.get(name, {})
        for key, metric in record["metrics"].items():
            if key in results:
                _check_reproduces(
                    path, f"results.{name}.{key}", results[key], float(np.mean(metric["value"]))
                )
        out[aliases.get(name) or canonical_name(name)] = {"name": name, "record": record, "results": results}
    return out


def _items(path: str, data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Returns {task: per-item record} of the results file ``path``: from its ``F.items.json`` sidecar
    when there is one (checked to belong to the file: model fingerprint, its sha256 when recorded), else
    from lm-eval's samples files of the same run."""
    sidecar = zeroshot_items.sidecar_path(path)
    if not os.path.isfile(sidecar) and lm_eval_layout.in_layout(path):
        return lm_eval_layout.read_items(path, data)
    items = zeroshot_items.read_sidecar(path)
    side = load_json(sidecar)
    fingerprint = _dig(data, "nfeval", "model", "fingerprint")
    if _dig(side, "nfeval", "model", "fingerprint") != fingerprint:
        raise DataError(f"{sidecar}: written for another model than {path}")
    sha = _dig(side, "nfeval", "results_sha256")  # absent in sidecars written before it was kept
    if sha is not None and sha != file_sha256(path):
        raise DataError(
            f"{sidecar}: written with another run's results than {path} "
            "(rerun nfeval zeroshot to rewrite both)"
        )
    return items


def _dig(data: Any, *keys: str) -> Any:
    """Returns ``data[k0][k1]…``, or None where a level is missing or not an object."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def check_same_items(task: str, a: dict, b: dict, path_a: str, path_b: str) -> None:
    """Raises UnpairedError unless both records hold the same documents in the same order."""
    ids_a, ids_b = a["record"]["doc_id"], b["record"]["doc_id"]
    if len(ids_a) != len(ids_b):
        raise UnpairedError(
            f"{task}: {path_a} was scored on {len(ids_a)} documents, {path_b} on {len(ids_b)} "
            "(different --limit or data); paired tests need the same items"
        )
    if ids_a != ids_b:
        first = next(x for x, y in zip(ids_a, ids_b) if x != y)
        raise UnpairedError(
            f"{task}: {path_a} and {path_b} were scored on different documents "
            f"(doc_id {first} is in one only); paired tests need the same items"
        )
    for doc_id, ha, hb in zip(ids_a, a["record"]["doc_hash"], b["record"]["doc_hash"]):
        if ha != hb:
            raise UnpairedError(
                f"{task}: document {doc_id} differs between {path_a} and {path_b} "
                "(different data files or splits); paired tests need the same items"
            )


def _outcome_row(task: str, metric: str, a: np.ndarray, b: np.ndarray, options: dict) -> dict[str, Any]:
    row = {"task": task, "metric": metric, "value": float(a.mean()), "baseline": float(b.mean())}
    row.update(sig.paired_bootstrap(sig.mean_difference, (a, b), **options))
    binary = sig.is_binary(a) and sig.is_binary(b)
    row["mcnemar_p"] = sig.mcnemar(a, b)["p"] if binary else None
    row["significant"] = not row["low"] <= 0 <= row["high"]
    return row


def compare_zeroshot(path: str, base: str, metrics: dict[str, str] | None = None, **options) -> list[dict]:
    """Returns one row per task and metric present in both files (only ``metrics[task]`` when given): the
    candidate's and baseline's scores, the difference, its interval and McNemar's p for 0/1 outcomes.
    Tasks are matched by the column they fill (``piqa_local``, ``piqa_hub`` and lm-eval's ``piqa`` are
    ``piqa``), in the files and in ``metrics``."""
    metrics = None if metrics is None else {canonical_name(t): m for t, m in metrics.items()}
    cand, ref = zeroshot_items_by_task(path), zeroshot_items_by_task(base)
    rows = []
    for task in [t for t in cand if t in ref]:
        check_same_items(task, cand[task], ref[task], path, base)
        ma, mb = cand[task]["record"]["metrics"], ref[task]["record"]["metrics"]
        keys = [k for k in ma if k in mb and (metrics is None or k.split(",")[0] == metrics.get(task))]
        for key in keys:
            a, b = np.asarray(ma[key]["value"]), np.asarray(mb[key]["value"])
            rows.append(_outcome_row(task, key.split(",")[0], a, b, options))
    return rows


# ---------------------------------------------------------------- GLUE


def glue_predictions_by_task(path: str) -> dict[str, dict[str, Any]]:
    """Returns {task: {"preds": {split: [per-seed arrays]}, "labels": {split: array}, "data", "best"}} of a
    GLUE summary, read from the points at each task's best learning rate (tasks without one left out)."""
    summary = load_json(path)
    out_dir = os.path.dirname(os.path.abspath(path))
    out = {}
    with reading(path, "the GLUE summary that nfeval glue writes"):
        best = {
            task: (entry["best_lr"], int(entry["per_lr"][lr_key(entry["best_lr"])].get("seeds", 1)), entry)
            for task, entry in (summary.get("tasks") or {}).items()
            if entry["best_lr"] is not None  # every learning rate diverged: nothing to pair
        }
    for task, (lr, seeds, entry) in best.items():
        preds: dict[str, list] = {}
        labels, data = {}, None
        for seed in range(seeds):
            directory = point_dir(out_dir, SWEEP, task, lr, seed)
            result = load_json(os.path.join(directory, "result.json"))
            point = glue_predictions.read(directory, epoch=result.get("epoch"))
            data = point.get("data")
            for split, values in point["splits"].items():
                preds.setdefault(split, []).append(np.asarray(values["preds"]))
                labels[split] = np.asarray(values["labels"])
        out[task] = {"preds": preds, "labels": labels, "data": data, "best": entry["best"]}
    return out


def _glue_metric_row(task, metric, split, cand, ref, paths, options) -> dict[str, Any]:
    labels, pa, pb = cand["labels"][split], cand["preds"][split], ref["preds"][split]
    kind = "accuracy" if metric.startswith("accuracy") else metric  # MNLI: accuracy_m, accuracy_mm
    difference = sig.seed_mean_difference(kind, len(pa))
    fn = sig.ROW_METRICS[kind]
    for side, preds, path in ((cand, pa, paths[0]), (ref, pb, paths[1])):
        recomputed = float(np.mean([fn(labels[None, :], p[None, :])[0] for p in preds]))
        _check_reproduces(path, f"tasks.{task}.best.{metric}", side["best"][metric], recomputed)
    row = {"task": task, "metric": metric, "value": cand["best"][metric], "baseline": ref["best"][metric]}
    row.update(sig.paired_bootstrap(difference, (labels, *pa, *pb), **options))
    single = len(pa) == 1 and len(pb) == 1 and kind == "accuracy"
    row["mcnemar_p"] = sig.mcnemar(pa[0] == labels, pb[0] == labels)["p"] if single else None
    row["significant"] = not row["low"] <= 0 <= row["high"]
    return row


def compare_glue(path: str, base: str, metrics: dict[str, str] | None = None, **options) -> list[dict]:
    """Returns one row per GLUE task and metric in both summaries (only ``metrics[task]`` when given), as
    ``compare_zeroshot``; correlation metrics (MCC, Pearson, Spearman) are bootstrapped over examples."""
    cand, ref = glue_predictions_by_task(path), glue_predictions_by_task(base)
    rows = []
    for task in [t for t in cand if t in ref]:
        if cand[task]["data"] != ref[task]["data"]:
            raise UnpairedError(
                f"{task}: {path} and {base} were fine-tuned/evaluated on different GLUE data "
                "(dev sha256 differ); paired tests need the same examples"
            )
        for split, fns in glue_metrics.SPLIT_METRICS[task].items():
            if not np.array_equal(cand[task]["labels"][split], ref[task]["labels"][split]):
                raise UnpairedError(f"{task} {split}: {path} and {base} hold different dev labels")
            for metric in fns:
                if metrics is None or metrics.get(task) == metric:
                    rows.append(
                        _glue_metric_row(task, metric, split, cand[task], ref[task], (path, base), options)
                    )
    return rows


def _kind(path: str) -> str:
    """Returns "zeroshot" or "glue": which results file ``path`` is; a DataError naming it when neither."""
    data = load_json(path)
    if "results" not in data and "tasks" not in data:
        raise DataError(f"{path}: key 'results' (zero-shot results) or 'tasks' (GLUE summary) is missing")
    return "zeroshot" if "results" in data else "glue"


def compare_files(path: str, base: str, metrics: dict[str, str] | None = None, **options) -> list[dict]:
    """Returns the paired rows of two results files of one kind (zero-shot results or GLUE summaries)."""
    kinds = [_kind(p) for p in (path, base)]
    if kinds[0] != kinds[1]:
        raise UnpairedError(f"{path} holds {kinds[0]} results, {base} {kinds[1]} results; nothing to pair")
    fn = compare_zeroshot if kinds[0] == "zeroshot" else compare_glue
    return fn(path, base, metrics, **options)


# ---------------------------------------------------------------- the leaderboard's --baseline


def _task_sources(row: dict[str, Any], kind: str) -> dict[str, str]:
    """Returns {task: results file} of a leaderboard row's files of ``kind`` ("zeroshot" or "glue")."""
    out = {}
    for path in row["sources"]:
        file_kind, _, tasks = read_results(path, [])
        if file_kind == kind:
            out.update(dict.fromkeys(tasks, path))
    return out


def _find_baseline(rows: list[dict], baseline: str) -> dict | None:
    for row in rows:
        if row["reference"] is None and (
            row["name"] == baseline or (row["fingerprint"] or "").startswith(baseline)
        ):
            return row
    return None


def add_to_board(board: dict[str, Any], baseline: str, **options) -> None:
    """Adds to every score cell of ``board`` (nfeval.report.leaderboard.build's) a ``paired`` entry: the
    difference to the ``baseline`` row (a row name or fingerprint prefix) on the column's metric, with its
    interval, McNemar p and whether it is significant; records the settings in ``board["paired"]``."""
    tables = [name for name in ("zeroshot", "glue") if name in board]
    bases = {name: _find_baseline(board[name]["rows"], baseline) for name in tables}
    if not any(bases.values()):
        names = sorted({r["name"] for t in tables for r in board[t]["rows"] if r["reference"] is None})
        raise ConfigError(
            f"--baseline {baseline}: no such row; expected one of {names} (or a fingerprint prefix)"
        )
    compare = {"zeroshot": compare_zeroshot, "glue": compare_glue}
    for name, base in bases.items():
        if base is None:
            continue
        metric_of = {c["task"]: c["metric"] for c in board[name]["columns"]}
        base_sources = _task_sources(base, name)
        for row in board[name]["rows"]:
            if row is base or row["reference"] is not None:
                continue
            sources = _task_sources(row, name)
            pairs: dict[tuple[str, str], list[str]] = {}
            for task, cell in row["scores"].items():
                if cell is not None and base["scores"].get(task) is not None and task in sources:
                    pairs.setdefault((sources[task], base_sources[task]), []).append(task)
            for (path, base_path), tasks in pairs.items():
                wanted = {t: metric_of[t] for t in tasks}
                for r in compare[name](path, base_path, wanted, **options):
                    row["scores"][r["task"]]["paired"] = {k: r[k] for k in PAIRED_FIELDS}
    settings = {k: options.get(k, d) for k, d in PAIRED_DEFAULTS.items()}
    entries = [
        cell["paired"]
        for name in tables
        for row in board[name]["rows"]
        for cell in row["scores"].values()
        if cell and cell.get("paired")
    ]
    adjust(entries, settings["confidence"])
    board["paired"] = {"baseline": baseline, **settings, "comparisons": len(entries)}


def adjust(rows: list[dict[str, Any]], confidence: float) -> None:
    """Sets each row's ``p_holm`` (Holm-adjusted over ``rows``, ``verdict.holm``) and ``significant``
    (p_holm < 1 − confidence) in place; returns None."""
    for row, p in zip(rows, holm([row["p"] for row in rows])):
        row["p_holm"] = p
        row["significant"] = p < 1 - confidence


PAIRED_FIELDS = ("difference", "low", "high", "p", "mcnemar_p", "significant", "n")
PAIRED_DEFAULTS = {"n_resamples": sig.N_RESAMPLES, "seed": sig.SEED, "confidence": sig.CONFIDENCE}


def markdown_mark(cell: dict[str, Any] | None) -> str:
    """Returns "†" for a cell whose difference to the baseline is significant (Holm-adjusted), else ""."""
    return "†" if cell and (cell.get("paired") or {}).get("significant") else ""


def markdown_section(board: dict[str, Any]) -> list[str]:
    """Returns the markdown section listing every paired difference (percentage points) of ``board``."""
    if not board.get("paired"):
        return []
    settings = board["paired"]
    conf = f"{100 * settings['confidence']:g}%"
    lines = [
        f"## Paired differences vs {markdown_text(settings['baseline'])}",
        "",
        f"| Model | Task | Metric | n | Δ (points) | {conf} interval | p (Holm) | McNemar p |",
        "|---|---|---|---:|---:|---|---:|---:|",
    ]
    for name in ("zeroshot", "glue"):
        table = board.get(name) or {"rows": [], "columns": []}
        for row in table["rows"]:
            for col in table["columns"]:
                paired = (row["scores"].get(col["task"]) or {}).get("paired")
                if not paired:
                    continue
                p = "–" if paired["mcnemar_p"] is None else f"{paired['mcnemar_p']:.3g}"
                difference = f"{100 * paired['difference']:+.1f}{markdown_mark(row['scores'][col['task']])}"
                interval = f"[{100 * paired['low']:+.1f}, {100 * paired['high']:+.1f}]"
                holm_p = f"{paired['p_holm']:.3g}"
                cells = [row["name"], col["title"], col["metric"], paired["n"], difference, interval]
                cells += [holm_p, p]
                lines.append(markdown_row(cells))
    lines += [
        "",
        f"- Δ: model − {markdown_text(settings['baseline'])} on the same items; interval: paired bootstrap "
        f"over items ({settings['n_resamples']} resamples, seed {settings['seed']}), not adjusted; p (Holm): "
        f"the bootstrap p Holm-adjusted over the {settings.get('comparisons', '–')} differences here; "
        "McNemar: exact test on the items only one model got right (accuracy metrics). †: p (Holm) < "
        f"{1 - settings['confidence']:.2g}, a correction for testing several differences at once.",
        "",
    ]
    return lines


def csv_fields(prefix: str, cell: dict[str, Any] | None) -> dict[str, Any]:
    """Returns a cell's paired CSV columns: ``prefix/diff``, ``/low``, ``/high``, ``/p_holm``,
    ``/mcnemar_p``."""
    paired = (cell or {}).get("paired") or {}
    return {f"{prefix}/{k}": paired.get(v) for k, v in CSV_COLUMNS.items()}


CSV_COLUMNS = {
    "diff": "difference",
    "low": "low",
    "high": "high",
    "p_holm": "p_holm",
    "mcnemar_p": "mcnemar_p",
}
