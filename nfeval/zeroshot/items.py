"""Per-item zero-shot outcomes: what each document scored, kept so that two models can be compared paired.

``nfeval zeroshot`` asks lm-eval for its per-sample logs (``log_samples=True``) and keeps, per task and
metric (lm-eval's ``"metric,filter"`` key), each document's outcome keyed by its ``doc_id``:

    {"doc_id": [...], "doc_hash": [...], "gold": [...],
     "metrics": {"acc,none": {"value": [1.0, 0.0, ...], "chosen": [2, 0, ...]}, ...}}

``value`` is lm-eval's own per-document value of the metric; a metric is kept only when the mean of
those values is the task's reported score (so a paired difference is a difference of the reported
scores). ``chosen`` is the index of the choice the metric picked, recomputed from the log-likelihoods
with lm-eval's (and tasks/gpt3.py's) rule and checked against ``value``; it is null for metrics without
a known rule or when the check fails. ``doc_hash`` is lm-eval's hash of the document, so results scored
on different documents never pair. The items sit in a sidecar beside the results file (``F.items.json``
for ``F.json``) and beside each task's cache entry, so a cached rerun writes the same sidecar.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..base.artifacts import atomic_write_json, provenance
from ..base.errors import DataError, MissingDataError
from ..base.jsonio import load_json

log = logging.getLogger(__name__)
SUFFIX = ".items.json"


def sidecar_path(results_path: str) -> str:
    """Returns the per-item file beside a results file: ``F.items.json`` for ``F.json``."""
    root, ext = os.path.splitext(results_path)
    return (root if ext == ".json" else results_path) + SUFFIX


def scored(results_path: str) -> bool:
    """Returns whether a results file and its per-item sidecar both exist: the pair ``evaluate`` writes
    (a kill between the two writes leaves a results file alone, which is not a finished scoring)."""
    return os.path.isfile(results_path) and os.path.isfile(sidecar_path(results_path))


def _choosers(choices: list[str], resps: list, n_tokens: list) -> dict[str, np.ndarray]:
    """Returns {metric: scores whose argmax is the metric's chosen index} for one document."""
    k = len(choices)
    lls = np.array([float(ll) for ll, _ in resps], dtype=np.float64)
    own = lls[:k]
    scores = {
        "acc": own,
        "acc_norm": own / np.array([float(len(c)) for c in choices]),
        "acc_bytes": own / np.array([float(len(c.encode("utf-8"))) for c in choices]),
    }
    if all(n_tokens[:k]):
        scores["acc_per_token"] = own / np.array(n_tokens[:k], dtype=np.float64)
    if len(lls) == 2 * k:  # conditional then unconditional log-likelihoods (tasks/gpt3.py, lm-eval)
        scores["acc_uncond"] = scores["acc_mutual_info"] = own - lls[k:]
    return scores


def _document(task, sample: Mapping) -> tuple[Any, dict[str, int]]:
    """Returns (gold index or None, {metric: chosen index}) of one logged sample."""
    gold_index = getattr(task, "gold_index", None)
    if gold_index is None or getattr(task, "OUTPUT_TYPE", None) != "multiple_choice":
        return None, {}
    doc, resps = sample["doc"], sample["filtered_resps"]
    scores = _choosers(task.doc_to_choice(doc), resps, [getattr(ll, "n_tokens", None) for ll, _ in resps])
    return gold_index(doc), {m: int(np.argmax(s)) for m, s in scores.items()}


def from_samples(task, samples: list[Mapping], results: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the per-item record of one task from lm-eval's in-memory ``samples[task]`` (before JSON
    serialisation: the adapter's token counts live on the log-likelihood objects) and its ``results``."""
    by_doc: dict[int, Mapping] = {}
    for s in sorted(samples, key=lambda s: (s["doc_id"], s["filter"])):
        by_doc.setdefault(s["doc_id"], {})[s["filter"]] = s
    doc_ids = sorted(by_doc)
    first = [next(iter(by_doc[d].values())) for d in doc_ids]
    record: dict[str, Any] = {"doc_id": doc_ids, "doc_hash": [s["doc_hash"] for s in first], "metrics": {}}
    golds: list = []
    for filt in sorted({f for per in by_doc.values() for f in per}):
        rows = [by_doc[d].get(filt) for d in doc_ids]
        if any(r is None for r in rows):
            continue
        picked = [_document(task, r) for r in rows]
        golds = golds or [g for g, _ in picked]
        for metric in rows[0]["metrics"]:
            key = f"{metric},{filt}"
            values = [r.get(metric) for r in rows]
            if not all(_number(v) for v in values) or not _is_mean(values, results.get(key)):
                continue
            record["metrics"][key] = {
                "value": [float(v) for v in values],
                "chosen": _chosen(key, picked, values),
            }
    record["gold"] = golds if any(g is not None for g in golds) else None
    return record


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_mean(values: list[float], reported: Any) -> bool:
    return _number(reported) and abs(float(np.mean(values)) - reported) <= 1e-9


def _chosen(key: str, picked: list[tuple[Any, dict]], values: list[float]) -> list[int] | None:
    """Returns each document's chosen index for ``key``'s metric, or None when there is no rule for it or
    the recomputed choice disagrees with lm-eval's outcome on any document (logged: a bug to report)."""
    metric = key.split(",")[0]
    if not picked or any(metric not in chosen or gold is None for gold, chosen in picked):
        return None
    out = [chosen[metric] for _, chosen in picked]
    agree = all(float(c == g) == v for c, (g, _), v in zip(out, picked, values))
    if not agree:
        log.warning("%s: recomputed choices disagree with lm-eval's outcomes; 'chosen' left out", key)
        return None
    return out


def cache_path(entry_path: str) -> str:
    """Returns the per-item cache file beside a zero-shot cache entry."""
    return sidecar_path(entry_path)


def read_cached(entry_path: str) -> dict[str, Any] | None:
    """Returns a task's cached per-item record, or None when there is none (an entry from before items
    were kept: the task is then rescored); a record off its schema is a DataError (``check_record``)."""
    path = cache_path(entry_path)
    if not os.path.isfile(path):
        return None
    return check_record(load_json(path), path, "")


def check_record(record: Any, path: str, where: str) -> dict[str, Any]:
    """Returns ``record`` when it is a per-item record (``from_samples``'s schema: doc_id, doc_hash and
    each metric's values one per document); else raises DataError naming ``path`` and the key."""
    prefix = f"{where}." if where else ""

    def bad(key: str, expected: str) -> DataError:
        return DataError(f"{path}: key '{prefix}{key}' is missing or malformed; expected {expected}")

    if not isinstance(record, dict):
        raise (
            bad("", "an object {doc_id, doc_hash, metrics, gold}")
            if where
            else DataError(f"{path}: expected an object {{doc_id, doc_hash, metrics, gold}}")
        )
    ids = record.get("doc_id")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise bad("doc_id", "a list of document ids")
    if not isinstance(record.get("doc_hash"), list) or len(record["doc_hash"]) != len(ids):
        raise bad("doc_hash", "one hash per document")
    metrics = record.get("metrics")
    if not isinstance(metrics, dict):
        raise bad("metrics", "an object {metric: {value, chosen}}")
    for key, m in metrics.items():
        values = m.get("value") if isinstance(m, dict) else None
        if not isinstance(values, list) or len(values) != len(ids) or not all(map(_number, values)):
            raise bad(f"metrics.{key}.value", "one number per document")
    gold = record.get("gold")
    if gold is not None and (not isinstance(gold, list) or len(gold) != len(ids)):
        raise bad("gold", "null or one gold index per document")
    return record


def write_sidecar(
    results_path: str, items: Mapping[str, Any], model: Mapping[str, Any], results_sha256: str | None = None
) -> str:
    """Writes ``{task: record}`` beside ``results_path`` with provenance, the model and the sha256 of the
    results file it belongs to (``results_sha256``, when given); returns its path."""
    path = sidecar_path(results_path)
    meta = {"provenance": provenance(), "results": os.path.basename(results_path), "model": dict(model)}
    if results_sha256 is not None:
        meta["results_sha256"] = results_sha256
    atomic_write_json(path, {"nfeval": meta, "tasks": dict(items)})
    return path


def read_sidecar(results_path: str) -> dict[str, Any]:
    """Returns {task: record} kept beside ``results_path``; raises MissingDataError when absent and
    DataError when malformed, naming the file."""
    path = sidecar_path(results_path)
    if not os.path.isfile(path):
        raise MissingDataError(
            f"{path}: no per-item outcomes beside {results_path}; rerun `nfeval zeroshot` to write them"
        )
    data = load_json(path)
    tasks = data.get("tasks")
    if not isinstance(tasks, dict):
        raise DataError(f"{path}: key 'tasks' is missing; expected {{task: per-item record}}")
    for name, record in tasks.items():
        check_record(record, path, f"tasks.{name}")
    return tasks
