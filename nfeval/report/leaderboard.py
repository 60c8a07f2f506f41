"""``nfeval leaderboard``: markdown, CSV or JSON tables from zero-shot and GLUE results files.

Inputs are results files written by ``nfeval zeroshot`` (lm-eval's output plus an ``nfeval`` block) and
``nfeval glue`` (``results/glue.json``); which is which is told by their keys, and rows are joined by
model fingerprint. Readers ignore extra keys and reject missing or mistyped required keys, naming the
file and the key.

Conventions (also printed under each table):
- scores are percent with one decimal in markdown, raw fractions in CSV/JSON;
- a task that was not evaluated shows "–" (empty in CSV, null in JSON), never 0;
- an average is "–" for a row missing any of its table's tasks, since a mean over a different task set
  is not comparable; the zero-shot average is the mean of the five tasks' accuracies, the GLUE average
  the mean of GLUE task scores (a task's score is the mean of its metrics, as the GLUE leaderboard's);
- each zero-shot column names its lm-eval metric; by default the GPT-3 conventions (``--metric gpt3``),
  so reference rows (``--reference gpt3``) sit under the column whose metric follows the same convention,
  and a reference cell whose convention differs from the column's stays "–";
- yardsticks (``yardsticks.py``): 95% intervals on accuracy cells, a chance row under the zero-shot
  table and the majority-class row under the GLUE table;
- each cell carries ``n``, the items it was scored on (zero-shot: lm-eval's ``n-samples`` effective
  count, which both nfeval's results files and lm-eval's ``--output_path`` layout record; GLUE: the dev
  rows of the metric's split); a column whose models were scored on different counts is marked
  ``items_differ`` and its markdown cells say ``(n=…)``, since such scores are not on the same test.
"""

from __future__ import annotations

import os
import re
from statistics import mean
from typing import Any

from ..base.artifacts import provenance
from ..base.errors import DataError
from ..base.jsonio import load_json
from ..engine.checkpoints import rundir
from ..glue.data import TASKS as GLUE_TASKS
from ..tune.results import describe_lr
from .absent import absent_cells, absent_reason
from .leaderboard_read import (
    EXTRA_ZEROSHOT_TASKS,
    GLUE_SCORE_METRICS,
    GPT3_METRICS,
    GROUP_MEASURES,
    GROUP_UNITS,
    METRIC_PRESETS,
    MISSING,
    TITLES,
    USER_SUPPLIED_TASKS,
    ZEROSHOT_TASKS,
    fraction,
    load_reference,
    nearest_by_size,
    read_results,
    results_paths,
)
from .leaderboard_render import format_compute
from .yardsticks import (
    at_or_below_majority,
    chance_row,
    dev_rows,
    glue_half_width,
    half_width,
    majority_row,
)

# ---------------------------------------------------------------- building the board


def _default_name(info: dict[str, Any]) -> str:
    if info.get("label"):  # a model stock lm-eval scored: its name as lm-eval records it
        return info["label"]
    if not info["path"]:
        return info["fingerprint"][:12]
    path = os.path.normpath(info["path"])
    base, parent = os.path.basename(path), os.path.dirname(path)
    if re.fullmatch(r"step_\d+", base) and os.path.basename(parent) == rundir.CHECKPOINTS:
        return f"{os.path.basename(os.path.dirname(parent))}@{base}"
    return base


def _distinct(label: str, info: dict[str, Any]) -> str:
    """Returns the label of a row that shares its name with another: with its fingerprint's start, or for
    a model stock lm-eval scored (no fingerprint), the lm-eval model that scored it."""
    if info["fingerprint"]:
        return f"{label} ({info['fingerprint'][:8]})"
    return f"{label} (lm-eval {info.get('lm_eval_model') or 'stock'})"


def _run_lr(checkpoint_path: str | None) -> dict[str, Any] | None:
    """Returns the LR record (tune_results.describe_lr) of the checkpoint's config.json, None if
    unreadable."""
    if not checkpoint_path:
        return None
    path = os.path.join(checkpoint_path, "config.json")
    try:
        train_config = (load_json(path).get("train") or {}).get("config")
    except (OSError, ValueError):
        return None
    return describe_lr(train_config) if isinstance(train_config, dict) else None


def _collect(paths: list[str], warnings: list[str]) -> list[dict[str, Any]]:
    """Returns one model per fingerprint (path if none), in order of first appearance, with its zero-shot
    and GLUE entries."""
    models: dict[str, dict[str, Any]] = {}
    for path in results_paths(paths):
        kind, info, tasks = read_results(path, warnings)
        key = info["fingerprint"] or info["path"] or f"lm-eval:{info['model_name']}"
        model = models.setdefault(key, {**info, "zeroshot": {}, "glue": {}, "sources": []})
        for field in ("path", "architecture", "parameters", "tokens", "flops", "device_hours"):
            if model[field] is None:
                model[field] = info[field]
        model["sources"].append(path)
        model["lr"] = model.get("lr") or _run_lr(model["path"])
        for task, entry in tasks.items():
            if task in model[kind]:
                other = model[kind][task]["source"]
                raise DataError(
                    f"{path}: task {task!r} of model {key[:12]} is also in {other}; pass one result per task"
                )
            model[kind][task] = entry
    return list(models.values())


def _zeroshot_cell(entry: dict | None, metric: str, warnings: list[str]) -> dict[str, Any] | None:
    if entry is None:
        return None
    key = f"{metric},none"
    if key not in entry["metrics"]:
        have = sorted(k.split(",")[0] for k in entry["metrics"] if "stderr" not in k)
        warnings.append(
            f"{entry['source']}: key 'results.{entry['task']}.{key}' is missing (has {have}); shown as "
            f"{MISSING}: {absent_reason(entry, metric)}"
        )
        return None
    value = fraction(
        {"results": {entry["task"]: entry["metrics"]}}, ["results", entry["task"], key], entry["source"]
    )
    stderr = entry["metrics"].get(f"{metric}_stderr,none")
    stderr = stderr if isinstance(stderr, (int, float)) else None
    return {
        "value": value,
        "stderr": stderr,
        "half_width": half_width(value, stderr, entry.get("n")),
        "subset": entry["subset"],
        "n": entry.get("n"),
    }


def _glue_cell(entry: dict | None, task: str, metric: str, warnings: list[str]) -> dict[str, Any] | None:
    """Returns the column's value and the GLUE task score (the mean of the task's metrics, as the GLUE
    leaderboard averages them), None for the score when ``best`` lacks one of those metrics."""
    if entry is None:
        return None
    source, wrapped = entry["source"], {"tasks": {task: entry}}
    if metric not in entry["best"]:
        warnings.append(f"{source}: key 'tasks.{task}.best.{metric}' is missing; shown as {MISSING}")
        return None
    missing = [m for m in GLUE_SCORE_METRICS[task] if m not in entry["best"]]
    if missing:
        warnings.append(
            f"{source}: key 'tasks.{task}.best.{missing[0]}' is missing; no GLUE average for this model"
        )
    parts = [
        fraction(wrapped, ["tasks", task, "best", m], source, low=-1.0)
        for m in GLUE_SCORE_METRICS[task]
        if m not in missing
    ]
    value = fraction(wrapped, ["tasks", task, "best", metric], source, low=-1.0)
    return {
        "value": value,
        "stderr": None,
        "half_width": glue_half_width(task, metric, value, entry.get("rows")),
        "subset": False,
        "n": dev_rows(task, metric, entry.get("rows")),
        "task_score": None if missing else mean(parts),
    }


def _mark_item_counts(table: dict[str, Any]) -> None:
    """Marks each column of ``table`` whose model cells were scored on different numbers of items
    (``items_differ``; an unknown count differs from a known one)."""
    for column in table["columns"]:
        counts = {
            row["scores"][column["task"]]["n"]
            for row in table["rows"]
            if row["reference"] is None and row["scores"][column["task"]] is not None
        }
        column["items_differ"] = len(counts) > 1


def _average(cells: dict[str, Any], tasks: tuple[str, ...] | list[str]) -> float | None:
    values = [cells.get(t) for t in tasks]
    return mean(c["value"] for c in values) if values and all(c is not None for c in values) else None


def _groups(rows: list[dict], measure: str | None, tolerance: float) -> None:
    """Labels and reorders ``rows`` by compute group: rows whose ``measure`` lies within ``tolerance``
    (relative) of their group's smallest are compute-matched; rows with unknown compute come last."""
    if measure is None:
        return
    known = sorted((r for r in rows if r[measure] is not None), key=lambda r: r[measure])
    groups: list[list[dict]] = []
    for row in known:
        if groups and row[measure] <= groups[-1][0][measure] * (1 + tolerance):
            groups[-1].append(row)
        else:
            groups.append([row])
    unit = GROUP_UNITS[measure]
    for group in groups:
        low, high = group[0][measure], group[-1][measure]
        label = (
            format_compute(low, measure)
            if low == high
            else f"{format_compute(low, measure)}–{format_compute(high, measure)}"
        )
        for row in group:
            row["group"] = f"≈ {label} {unit}"
    for row in rows:
        if row[measure] is None:
            row["group"] = f"{unit} unknown"
    rows[:] = [row for group in groups for row in group] + [r for r in rows if r[measure] is None]


def _row(model: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "name": name,
        "fingerprint": model.get("fingerprint"),
        "path": model.get("path"),
        "parameters": model.get("parameters"),
        "architecture": model.get("architecture"),
        "tokens": model.get("tokens"),
        "flops": model.get("flops"),
        "device_hours": model.get("device_hours"),
        "lr": model.get("lr"),
        "lm_eval_model": None if model.get("fingerprint") else model.get("lm_eval_model"),
        "model_name": model.get("model_name"),
        "group": None,
        "reference": None,
        "sources": model.get("sources", []),
    }


def build(
    paths: list[str],
    names: list[str] | None = None,
    reference: str | None = None,
    metric: list[str] | None = None,
    group_by: str = "none",
    group_tolerance: float = 0.1,
) -> dict[str, Any]:
    """Returns the leaderboard as a JSON-safe dict: per table (``zeroshot``, ``glue``) its columns and rows
    with raw fractions, plus reference info, notes and warnings. See the module docstring for conventions."""
    warnings: list[str] = []
    models = _collect(paths, warnings)
    if names is not None and len(names) != len(models):
        raise DataError(
            f"--names: {len(names)} names for {len(models)} models (rows are joined by fingerprint)"
        )
    labels = names or [_default_name(m) for m in models]
    labels = [_distinct(label, m) if labels.count(label) > 1 else label for label, m in zip(labels, models)]
    metrics = _metrics(metric)
    measure = None if group_by == "none" else GROUP_MEASURES[group_by]
    board: dict[str, Any] = {
        "nfeval": {"provenance": provenance(), "inputs": list(paths)},
        "group_by": measure,
        "reference": load_reference(reference) if reference else None,
        "warnings": warnings,
    }
    zeroshot = [(m, label) for m, label in zip(models, labels) if m["zeroshot"]]
    if zeroshot:
        board["zeroshot"] = _zeroshot_table(zeroshot, metrics, warnings)
        _mark_item_counts(board["zeroshot"])
        _groups(board["zeroshot"]["rows"], measure, group_tolerance)
        board["zeroshot"]["rows"] += _reference_rows(board["zeroshot"], board["reference"])
        board["zeroshot"]["rows"].append(chance_row(board["zeroshot"]))
        _partial_averages(board["zeroshot"])
    glue = [(m, label) for m, label in zip(models, labels) if m["glue"]]
    if glue:
        board["glue"] = _glue_table(glue, warnings)
        _mark_item_counts(board["glue"])
        _groups(board["glue"]["rows"], measure, group_tolerance)
        majority = majority_row(board["glue"], [m for m, _ in glue], warnings)
        board["glue"]["below_majority"] = at_or_below_majority(board["glue"], majority)
        board["glue"]["rows"] += [majority] if majority else []
    if not zeroshot and not glue:
        raise DataError(f"leaderboard: no zero-shot or GLUE task results in {list(paths)}")
    if board["reference"]:
        board["reference"] = {k: board["reference"][k] for k in ("name", "citation", "tasks", "path")}
    return board


def _metrics(metric: list[str] | None) -> dict[str, str]:
    """Returns the metric each zero-shot task is ranked by: GPT-3's, then each ``--metric`` in turn (a preset
    of ``METRIC_PRESETS``, or TASK=METRIC)."""
    metrics = dict(GPT3_METRICS)
    for spec in metric or ["gpt3"]:
        if spec in METRIC_PRESETS:
            metrics.update(METRIC_PRESETS[spec])
        elif "=" in spec and spec.split("=", 1)[0] in metrics:
            task, value = spec.split("=", 1)
            metrics[task] = value
        else:
            raise DataError(
                f"--metric {spec}: expected one of {sorted(METRIC_PRESETS)} or TASK=METRIC with TASK in "
                f"{sorted(metrics)}"
            )
    return metrics


def _zeroshot_table(
    models: list[tuple[dict, str]], metrics: dict[str, str], warnings: list[str]
) -> dict[str, Any]:
    present = {t for m, _ in models for t in m["zeroshot"]}
    tasks = list(ZEROSHOT_TASKS) + [t for t in EXTRA_ZEROSHOT_TASKS if t in present]
    rows = []
    for model, label in models:
        row = _row(model, label)
        row["scores"] = {t: _zeroshot_cell(model["zeroshot"].get(t), metrics[t], warnings) for t in tasks}
        row["average"] = _average(row["scores"], ZEROSHOT_TASKS)
        rows.append(row)
    table = {"columns": [{"task": t, "title": TITLES[t], "metric": metrics[t]} for t in tasks], "rows": rows}
    table["absent"] = absent_cells(table, models)
    others = tuple(t for t in ZEROSHOT_TASKS if t not in USER_SUPPLIED_TASKS)
    if any(r["average"] is None and _average(r["scores"], others) is not None for r in rows):
        # rows lacking only the user-supplied StoryCloze: an average over the other four, for every row
        table["partial_average"] = {"title": "Avg w/o StoryCloze", "tasks": list(others)}
    return table


def _partial_averages(table: dict[str, Any]) -> None:
    """Fills each row's ``partial_average`` (the mean over the table's ``partial_average`` tasks) when the
    table has that column (reference and chance rows included, so they compare)."""
    spec = table.get("partial_average")
    for row in table["rows"]:
        row["partial_average"] = _average(row["scores"], spec["tasks"]) if spec else None


def _reference_rows(table: dict[str, Any], reference: dict | None) -> list[dict[str, Any]]:
    """Returns the reference rows nearest in size to the table's models; a cell is filled only under a
    column whose metric follows the reference's convention for that task."""
    if not reference:
        return []
    metric = {c["task"]: c["metric"] for c in table["columns"]}
    rows = []
    for model in nearest_by_size(
        reference["models"], [r["parameters"] for r in table["rows"] if r["parameters"]]
    ):
        row = _row(
            {
                "parameters": model["parameters"],
                "architecture": reference["architecture"],
                "tokens": model["tokens"],
            },
            model["name"],
        )
        row["reference"] = reference["name"]
        row["scores"] = {
            t: {"value": model["scores"][t], "stderr": None, "subset": False}
            if t in model["scores"] and reference["tasks"][t]["metric"] == metric[t]
            else None
            for t in metric
        }
        row["average"] = _average(row["scores"], ZEROSHOT_TASKS)
        rows.append(row)
    return rows


def _glue_table(models: list[tuple[dict, str]], warnings: list[str]) -> dict[str, Any]:
    tasks = [t for t in GLUE_TASKS if any(t in m["glue"] for m, _ in models)]
    column_metric = {t: next(m["glue"][t]["metric"] for m, _ in models if t in m["glue"]) for t in tasks}
    rows = []
    for model, label in models:
        row = _row(model, label)
        row["scores"] = {t: _glue_cell(model["glue"].get(t), t, column_metric[t], warnings) for t in tasks}
        task_scores = [cell and cell["task_score"] for cell in row["scores"].values()]
        row["average"] = mean(task_scores) if all(v is not None for v in task_scores) else None
        rows.append(row)
    return {
        "columns": [{"task": t, "title": TITLES[t], "metric": column_metric[t]} for t in tasks],
        "rows": rows,
    }
