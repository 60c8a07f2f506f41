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
  and a reference cell whose convention differs from the column's stays "–".
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import sys
from pathlib import Path
from statistics import mean
from typing import Any

import tasks as nf_tasks

from ..artifacts import atomic_write_text, provenance
from ..engine.config import load_json
from ..glue.data import TASKS as GLUE_TASKS
from ..glue.metrics import SPLIT_METRICS
from ..tune_results import describe_lr

ZEROSHOT_TASKS = nf_tasks.DEFAULT_TASKS  # averaged, as in the paper
# Shown when present, not averaged; corpus_cloze is the demo's held-out cloze task (nfeval/cloze.py).
EXTRA_ZEROSHOT_TASKS = ("storycloze_2018", "corpus_cloze")
# The metrics the GLUE leaderboard averages into a task's score: those glue.py computes per task.
GLUE_SCORE_METRICS = {t: tuple(n for fns in SPLIT_METRICS[t].values() for n in fns) for t in GLUE_TASKS}
TITLES = {
    "hellaswag": "HellaSwag",
    "piqa": "PIQA",
    "winogrande": "WinoGrande",
    "storycloze_2016": "StoryCloze",
    "storycloze_2018": "StoryCloze 2018",
    "corpus_cloze": "Corpus cloze",
    "openbookqa": "OpenBookQA",
    "cola": "CoLA",
    "sst2": "SST-2",
    "mrpc": "MRPC",
    "stsb": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI",
    "qnli": "QNLI",
    "rte": "RTE",
}
# GPT-3 scored cloze-style tasks per token, so the corpus cloze task follows that convention too.
GPT3_METRICS = {**nf_tasks.GPT3_METRIC, "corpus_cloze": "acc_per_token"}
METRIC_PRESETS = {
    "gpt3": GPT3_METRICS,
    "acc": dict.fromkeys(GPT3_METRICS, "acc"),
    "acc_norm": dict.fromkeys(GPT3_METRICS, "acc_norm"),
}
GROUP_MEASURES = {
    "compute": "device_hours",
    "device-hours": "device_hours",
    "flops": "flops",
    "tokens": "tokens",
}
GROUP_UNITS = {"device_hours": "device-hours", "flops": "FLOPs", "tokens": "tokens"}
REFERENCE_DIR = Path(__file__).resolve().parents[1] / "leaderboards" / "reference"
MISSING = "–"


# ---------------------------------------------------------------- reading, strictly on what we use


def _describe(keys: list[str]) -> str:
    return ".".join(str(k) for k in keys)


def _get(
    data: Any, keys: list[str], path: str, kind: type | tuple, expected: str, required: bool = True
) -> Any:
    """Returns ``data[k0][k1]…``; raises ValueError naming ``path`` and the key when missing (if required) or mistyped."""
    value = data
    for i, key in enumerate(keys):
        if not isinstance(value, dict):
            raise ValueError(
                f"{path}: key {_describe(keys[:i])!r} is a {type(value).__name__}, expected an object"
            )
        if key not in value or value[key] is None:
            if required:
                raise ValueError(f"{path}: key {_describe(keys)!r} is missing; expected {expected}")
            return None
        value = value[key]
    numeric = kind in ((int, float), int)
    if not isinstance(value, kind) or (numeric and (isinstance(value, bool) or not math.isfinite(value))):
        raise ValueError(f"{path}: key {_describe(keys)!r} is {value!r}; expected {expected}")
    return value


def _score(data: Any, keys: list[str], path: str, low: float = 0.0) -> float:
    value = _get(data, keys, path, (int, float), f"a number in [{low:g}, 1]")
    if not low <= value <= 1:
        raise ValueError(
            f"{path}: key {_describe(keys)!r} is {value!r}; expected a number in [{low:g}, 1] (a fraction, not percent)"
        )
    return float(value)


def _model_block(data: dict, path: str) -> dict[str, Any]:
    _get(data, ["nfeval", "model"], path, dict, "the model block (checkpoint.summary)")
    base = ["nfeval", "model"]
    info = {
        "fingerprint": _get(data, base + ["fingerprint"], path, str, "a string", required=False),
        "path": _get(data, base + ["path"], path, str, "a string", required=False),
        "architecture": _get(data, base + ["architecture"], path, str, "a string", required=False),
        "parameters": _get(data, base + ["parameters"], path, int, "an integer", required=False),
    }
    if not info["fingerprint"] and not info["path"]:
        raise ValueError(
            f"{path}: key 'nfeval.model.fingerprint' is missing; expected the model's fingerprint (or at least 'nfeval.model.path')"
        )
    _get(data, base + ["compute"], path, dict, "an object", required=False)
    for key in ("tokens", "flops", "device_hours"):
        info[key] = _get(data, base + ["compute", key], path, (int, float), "a number", required=False)
    return info


def read_zeroshot(data: dict, path: str, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """Returns {canonical task: {"metrics": lm-eval metric dict, "subset": bool, "source": path}} of a zero-shot file."""
    results = _get(data, ["results"], path, dict, "lm-eval's per-task results object")
    aliases = (
        _get(data, ["nfeval", "tasks"], path, dict, "an object {task name: canonical task}", required=False)
        or {}
    )
    canonical_names = ZEROSHOT_TASKS + EXTRA_ZEROSHOT_TASKS
    for name in aliases:
        _get(data, ["nfeval", "tasks", name], path, str, "the canonical task name (a string)")
    limit = _get(data, ["nfeval", "limit"], path, (int, float), "a number or null", required=False)
    n_samples = data.get("n-samples") if isinstance(data.get("n-samples"), dict) else {}
    tasks: dict[str, dict[str, Any]] = {}
    for name in results:
        canonical = aliases.get(name, name)
        if canonical not in canonical_names:
            warnings.append(
                f"{path}: ignored task {name!r} (not one of {canonical_names}; name its canonical task in 'nfeval.tasks')"
            )
            continue
        metrics = _get(data, ["results", name], path, dict, "an object of lm-eval metrics")
        if canonical in tasks:
            raise ValueError(f"{path}: key 'results.{name}' is a second result for task {canonical!r}")
        counts = n_samples.get(name) if isinstance(n_samples.get(name), dict) else {}
        if counts.get("effective") is not None and counts.get("original") is not None:
            subset = counts["effective"] < counts["original"]
        else:
            subset = limit is not None
        tasks[canonical] = {"task": name, "metrics": metrics, "subset": subset, "source": path}
    return tasks


def read_glue(data: dict, path: str, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """Returns {task: {"metric", "best", "source"}} of a GLUE summary; the metric's best value is checked."""
    tasks = _get(data, ["tasks"], path, dict, "the per-task GLUE results object")
    out = {}
    for task in tasks:
        if task not in GLUE_TASKS:
            warnings.append(f"{path}: ignored GLUE task {task!r} (expected one of {GLUE_TASKS})")
            continue
        metric = _get(data, ["tasks", task, "metric"], path, str, "the task's GLUE metric name")
        best = _get(data, ["tasks", task, "best"], path, dict, "an object {metric: value}")
        _score(data, ["tasks", task, "best", metric], path, low=-1.0)
        out[task] = {"metric": metric, "best": best, "source": path}
    return out


def read_results(path: str, warnings: list[str]) -> tuple[str, dict[str, Any], dict[str, dict]]:
    """Returns (kind "zeroshot" or "glue", model info, per-task entries) of one results file."""
    data = load_json(path)
    if "results" in data:
        kind, tasks = "zeroshot", read_zeroshot(data, path, warnings)
    elif "tasks" in data:
        kind, tasks = "glue", read_glue(data, path, warnings)
    else:
        raise ValueError(f"{path}: key 'results' (zero-shot results) or 'tasks' (GLUE summary) is missing")
    return kind, _model_block(data, path), tasks


def _reference_path(spec: str) -> str:
    if os.path.isfile(spec):
        return spec
    for folder in (Path("leaderboards") / "reference", REFERENCE_DIR):
        if (folder / f"{spec}.json").is_file():
            return str(folder / f"{spec}.json")
    known = sorted(p.stem for p in REFERENCE_DIR.glob("*.json"))
    raise FileNotFoundError(
        f"--reference {spec}: no such file; expected a path to a reference JSON or one of {known}"
    )


def load_reference(spec: str) -> dict[str, Any]:
    """Returns the reference file named by ``spec`` (a path, or a name under leaderboards/reference) with
    scores converted to fractions; see leaderboards/README.md for the format."""
    path = _reference_path(spec)
    data = load_json(path)
    name = _get(data, ["name"], path, str, "a short label such as 'GPT-3'")
    citation = _get(data, ["citation"], path, str, "the paper and table the numbers come from")
    units = _get(data, ["units"], path, str, "'percent' or 'fraction'")
    if units not in ("percent", "fraction"):
        raise ValueError(f"{path}: key 'units' is {units!r}; expected 'percent' or 'fraction'")
    tasks = _get(data, ["tasks"], path, dict, "an object {canonical task: {metric, convention}}")
    for task in tasks:
        if task not in ZEROSHOT_TASKS + EXTRA_ZEROSHOT_TASKS:
            raise ValueError(
                f"{path}: key 'tasks.{task}' is not a canonical task; expected one of {ZEROSHOT_TASKS + EXTRA_ZEROSHOT_TASKS}"
            )
        _get(data, ["tasks", task, "metric"], path, str, "the lm-eval metric following the same convention")
        _get(data, ["tasks", task, "convention"], path, str, "a description of the scoring convention")
    models = _get(data, ["models"], path, list, "a list of models")
    scale = 100.0 if units == "percent" else 1.0
    rows = []
    for i, model in enumerate(models):
        entry = {"models": {str(i): model}}
        keys = ["models", str(i)]
        scores = _get(entry, keys + ["scores"], path, dict, "an object {task: score}")
        for task in scores:
            if task not in tasks:
                raise ValueError(f"{path}: key 'models.{i}.scores.{task}' names a task missing from 'tasks'")
            value = _get(entry, keys + ["scores", task], path, (int, float), f"a number in [0, {scale:g}]")
            if not 0 <= value <= scale:
                raise ValueError(
                    f"{path}: key 'models.{i}.scores.{task}' is {value!r}; expected a number in [0, {scale:g}] ({units})"
                )
        if _get(entry, keys + ["parameters"], path, int, "the parameter count (a positive integer)") <= 0:
            raise ValueError(
                f"{path}: key 'models.{i}.parameters' is {model['parameters']!r}; expected a positive integer"
            )
        rows.append(
            {
                "name": _get(entry, keys + ["name"], path, str, "the model's name"),
                "parameters": _get(
                    entry, keys + ["parameters"], path, int, "the parameter count (a positive integer)"
                ),
                "tokens": _get(entry, keys + ["tokens"], path, (int, float), "a number", required=False),
                "scores": {task: value / scale for task, value in scores.items()},
            }
        )
    return {
        "name": name,
        "citation": citation,
        "architecture": data.get("architecture"),
        "tasks": tasks,
        "models": rows,
        "path": path,
    }


def nearest_by_size(reference_models: list[dict], sizes: list[int]) -> list[dict]:
    """Returns the reference models nearest in (log) parameter count to each of ``sizes``, in file order;
    all of them when no size is known."""
    if not sizes:
        return list(reference_models)
    picked = {
        min(range(len(reference_models)), key=lambda i: abs(math.log(reference_models[i]["parameters"] / n)))
        for n in sizes
    }
    return [m for i, m in enumerate(reference_models) if i in picked]


# ---------------------------------------------------------------- building the board


def _default_name(info: dict[str, Any]) -> str:
    if not info["path"]:
        return info["fingerprint"][:12]
    path = os.path.normpath(info["path"])
    base, parent = os.path.basename(path), os.path.dirname(path)
    if re.fullmatch(r"step_\d+", base) and os.path.basename(parent) == "checkpoints":
        return f"{os.path.basename(os.path.dirname(parent))}@{base}"
    return base


def _run_lr(checkpoint_path: str | None) -> dict[str, Any] | None:
    """Returns the LR record (tune_results.describe_lr) of the checkpoint's config.json, None if unreadable."""
    if not checkpoint_path:
        return None
    path = os.path.join(checkpoint_path, "config.json")
    try:
        train_config = (load_json(path).get("train") or {}).get("config")
    except (OSError, ValueError):
        return None
    return describe_lr(train_config) if isinstance(train_config, dict) else None


def _collect(paths: list[str], warnings: list[str]) -> list[dict[str, Any]]:
    """Returns one model per fingerprint (path if none), in order of first appearance, with its zero-shot and GLUE entries."""
    models: dict[str, dict[str, Any]] = {}
    for path in paths:
        kind, info, tasks = read_results(path, warnings)
        key = info["fingerprint"] or info["path"]
        model = models.setdefault(key, {**info, "zeroshot": {}, "glue": {}, "sources": []})
        for field in ("path", "architecture", "parameters", "tokens", "flops", "device_hours"):
            if model[field] is None:
                model[field] = info[field]
        model["sources"].append(path)
        model["lr"] = model.get("lr") or _run_lr(model["path"])
        for task, entry in tasks.items():
            if task in model[kind]:
                other = model[kind][task]["source"]
                raise ValueError(
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
            f"{entry['source']}: key 'results.{entry['task']}.{key}' is missing (has {have}); shown as {MISSING}"
        )
        return None
    value = _score(
        {"results": {entry["task"]: entry["metrics"]}}, ["results", entry["task"], key], entry["source"]
    )
    stderr = entry["metrics"].get(f"{metric}_stderr,none")
    return {
        "value": value,
        "stderr": stderr if isinstance(stderr, (int, float)) else None,
        "subset": entry["subset"],
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
        _score(wrapped, ["tasks", task, "best", m], source, low=-1.0)
        for m in GLUE_SCORE_METRICS[task]
        if m not in missing
    ]
    return {
        "value": _score(wrapped, ["tasks", task, "best", metric], source, low=-1.0),
        "stderr": None,
        "subset": False,
        "task_score": None if missing else mean(parts),
    }


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
            _compute(low, measure) if low == high else f"{_compute(low, measure)}–{_compute(high, measure)}"
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
        raise ValueError(
            f"--names: {len(names)} names for {len(models)} models (rows are joined by fingerprint)"
        )
    labels = names or [_default_name(m) for m in models]
    labels = [
        f"{label} ({m['fingerprint'][:8]})" if labels.count(label) > 1 and m["fingerprint"] else label
        for label, m in zip(labels, models)
    ]
    metrics = dict(GPT3_METRICS)
    for spec in metric or ["gpt3"]:
        if spec in METRIC_PRESETS:
            metrics.update(METRIC_PRESETS[spec])
        elif "=" in spec and spec.split("=", 1)[0] in metrics:
            task, value = spec.split("=", 1)
            metrics[task] = value
        else:
            raise ValueError(
                f"--metric {spec}: expected one of {sorted(METRIC_PRESETS)} or TASK=METRIC with TASK in {sorted(metrics)}"
            )
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
        _groups(board["zeroshot"]["rows"], measure, group_tolerance)
        board["zeroshot"]["rows"] += _reference_rows(board["zeroshot"], board["reference"])
    glue = [(m, label) for m, label in zip(models, labels) if m["glue"]]
    if glue:
        board["glue"] = _glue_table(glue, warnings)
        _groups(board["glue"]["rows"], measure, group_tolerance)
    if not zeroshot and not glue:
        raise ValueError(f"leaderboard: no zero-shot or GLUE task results in {list(paths)}")
    if board["reference"]:
        board["reference"] = {k: board["reference"][k] for k in ("name", "citation", "tasks", "path")}
    return board


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
    return {"columns": [{"task": t, "title": TITLES[t], "metric": metrics[t]} for t in tasks], "rows": rows}


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


# ---------------------------------------------------------------- rendering


def _si(x: float | None) -> str:
    if x is None:
        return MISSING
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def _compute(x: float | None, measure: str) -> str:
    if x is None:
        return MISSING
    if measure == "flops":
        mantissa, _, exponent = f"{x:.2g}".partition("e")
        return f"{mantissa}e{int(exponent)}" if exponent else mantissa
    if measure == "tokens":
        return _si(x)
    return f"{x:.3g}"


def _cell(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return MISSING
    return f"{100 * cell['value']:.1f}" + ("*" if cell["subset"] else "")


def _markdown_table(table: dict[str, Any]) -> list[str]:
    header = ["Model", "Params", "Arch", "Tokens", "FLOPs", "Device-h"]
    header += [f"{c['title']} ({c['metric']})" for c in table["columns"]] + ["Avg"]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|---|" + "---:|" * (len(header) - 3)]
    group = None
    for row in table["rows"]:
        label = (
            f"*reference: {row['reference']}*"
            if row["reference"]
            else (f"**{row['group']}**" if row["group"] else None)
        )
        if label and label != group:
            lines.append("| " + " | ".join([label] + [""] * (len(header) - 1)) + " |")
            group = label
        cells = [
            row["name"],
            _si(row["parameters"]),
            row["architecture"] or MISSING,
            _si(row["tokens"]),
            _compute(row["flops"], "flops"),
            _compute(row["device_hours"], "device_hours"),
        ]
        cells += [_cell(row["scores"][c["task"]]) for c in table["columns"]]
        cells.append(MISSING if row["average"] is None else f"{100 * row['average']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _zeroshot_notes(board: dict[str, Any]) -> list[str]:
    table = board["zeroshot"]
    averaged = ", ".join(TITLES[t] for t in ZEROSHOT_TASKS)
    notes = [
        "Accuracy in percent; each column names its lm-eval metric (acc_per_token: GPT-3's per-token length "
        "normalisation; acc_uncond: its unconditional normalisation; acc: unnormalised, which for WinoGrande "
        f"is GPT-3's partial scoring). {MISSING}: not evaluated. Avg: mean of {averaged}; {MISSING} unless all five are present.",
    ]
    if any(c and c["subset"] for r in table["rows"] for c in r["scores"].values()):
        notes.append("*: evaluated on a subset of the task (lm-eval `--limit`).")
    ref = board["reference"]
    if ref:
        columns = {c["task"]: c["metric"] for c in table["columns"]}
        placed = [
            f"{TITLES[t]} {spec['split']} ({spec['convention']}: {spec['metric']})"
            if spec.get("split")
            else f"{TITLES[t]} ({spec['convention']}: {spec['metric']})"
            for t, spec in ref["tasks"].items()
        ]
        differ = [
            TITLES[t] for t, spec in ref["tasks"].items() if columns.get(t) not in (None, spec["metric"])
        ]
        notes.append(
            f"{ref['name']} rows: {ref['citation']}, the sizes nearest ours. Each reference number sits under the "
            f"column whose metric follows the same convention: {'; '.join(placed)}."
        )
        if differ:
            notes.append(
                f"{ref['name']} cells are {MISSING} for {', '.join(differ)}: this table's metric there follows another convention."
            )
    return notes


def _sources(board: dict[str, Any]) -> list[str]:
    lines, seen = [], set()
    for table in (board.get("zeroshot"), board.get("glue")):
        for row in (table or {}).get("rows", []):
            if row["reference"] or row["name"] in seen:
                continue
            seen.add(row["name"])
            fingerprint = (
                f"fingerprint `{row['fingerprint'][:16]}`" if row["fingerprint"] else "no fingerprint"
            )
            lr = f"{row['lr']['label']}; " if row.get("lr") else ""
            lines.append(f"- {row['name']}: {fingerprint}; {lr}{', '.join(row['sources'])}")
    return lines


def render_markdown(
    board: dict[str, Any],
    title: str = "Leaderboard",
    images: dict[str, str] | None = None,
    comparison: str | None = None,
) -> str:
    """Returns the leaderboard as markdown: a zero-shot and/or a GLUE table, notes under each, sources last.
    ``images`` maps "zeroshot"/"curves" to a PNG file name to link; ``comparison`` is a compare table (text)."""
    images = images or {}
    lines = [f"# {title}", ""]
    if "zeroshot" in board:
        lines += ["## Zero-shot", ""] + _markdown_table(board["zeroshot"]) + [""]
        lines += [f"- {note}" for note in _zeroshot_notes(board)] + [""]
        if "zeroshot" in images:
            lines += [f"![Zero-shot accuracy]({images['zeroshot']})", ""]
    if "glue" in board:
        lines += ["## GLUE", ""] + _markdown_table(board["glue"]) + [""]
        lines += [
            f"- GLUE scores ×100 at each task's best learning rate, as in the GLUE summary; each column names its metric. "
            f"{MISSING}: not evaluated. Avg: mean over the tasks shown of the GLUE task score (the mean of a task's "
            f"metrics: MRPC/QQP accuracy and F1, STS-B Pearson and Spearman, MNLI matched and mismatched); "
            f"{MISSING} unless every task shown is present.",
            "",
        ]
    if comparison or "curves" in images:
        lines += ["## Training runs at equal compute", ""]
        lines += ["```text", comparison, "```", ""] if comparison else []
        lines += (
            [f"![Validation perplexity vs compute]({images['curves']})", ""] if "curves" in images else []
        )
    if board["group_by"]:
        lines += [
            f"Rows are grouped by training {GROUP_UNITS[board['group_by']]}: a group holds runs within its range "
            "(compute-matched).",
            "",
        ]
    if board.get("analysis"):  # `nfeval analyze` results given with --analysis
        from ..analysis.tables import markdown_section

        lines += markdown_section(board["analysis"])
    lines += ["## Sources", ""] + _sources(board)
    return "\n".join(lines) + "\n"


def render_csv(board: dict[str, Any]) -> str:
    """Returns one CSV row per model (reference rows included) with raw fractions; missing scores are empty."""
    tables = [(name, board[name]) for name in ("zeroshot", "glue") if name in board]
    header = [
        "model",
        "reference",
        "group",
        "parameters",
        "architecture",
        "tokens",
        "flops",
        "device_hours",
        "fingerprint",
    ]
    for name, table in tables:
        header += [f"{c['task']}/{c['metric']}" for c in table["columns"]] + [f"{name}_average"]
    rows: dict[str, dict[str, Any]] = {}
    for name, table in tables:
        for row in table["rows"]:
            out = rows.setdefault(
                row["name"],
                {
                    k: row[k]
                    for k in (
                        "reference",
                        "group",
                        "parameters",
                        "architecture",
                        "tokens",
                        "flops",
                        "device_hours",
                        "fingerprint",
                    )
                },
            )
            out["model"] = row["name"]
            for c in table["columns"]:
                cell = row["scores"][c["task"]]
                out[f"{c['task']}/{c['metric']}"] = None if cell is None else cell["value"]
            out[f"{name}_average"] = row["average"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for out in rows.values():
        writer.writerow({k: "" if out.get(k) is None else out[k] for k in header})
    return buf.getvalue()


def render(
    board: dict[str, Any],
    fmt: str,
    title: str = "Leaderboard",
    images: dict[str, str] | None = None,
    comparison: str | None = None,
) -> str:
    """Returns ``board`` rendered as ``fmt`` (md, csv or json)."""
    if fmt == "md":
        return render_markdown(board, title, images, comparison)
    if fmt == "csv":
        return render_csv(board)
    return json.dumps(board, indent=2, default=str) + "\n"


def write(
    board: dict[str, Any], out: str, fmt: str, title: str = "Leaderboard", comparison: dict | None = None
) -> str:
    """Writes ``board`` as ``fmt`` to ``out``; for markdown also draws, beside it, the zero-shot bar chart and
    (given a ``nfeval.compare.compare`` result) the perplexity-vs-compute curves. Returns the rendered text."""
    from .plots import plot_bars, plot_curves

    images, table_text = {}, None
    stem = os.path.splitext(out)[0]
    if fmt == "md" and "zeroshot" in board:
        table = board["zeroshot"]
        bars = [
            (
                r["name"],
                [
                    None if r["scores"][c["task"]] is None else 100 * r["scores"][c["task"]]["value"]
                    for c in table["columns"]
                ],
            )
            for r in table["rows"]
        ]
        columns = [f"{c['title']}\n{c['metric']}" for c in table["columns"]]
        images["zeroshot"] = os.path.basename(
            plot_bars(columns, bars, f"{stem}_zeroshot.png", "Zero-shot accuracy", "accuracy (%)")
        )
    if fmt == "md" and comparison:
        from .compare import format_comparison

        images["curves"] = os.path.basename(plot_curves(comparison, f"{stem}_curves.png"))
        table_text = format_comparison(comparison)
    text = render(board, fmt, title, images, table_text)
    atomic_write_text(out, text)
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results", nargs="+", metavar="RESULTS", help="zero-shot results JSON and/or GLUE summary JSON files"
    )
    p.add_argument(
        "--out", metavar="FILE", help="output file (e.g. leaderboards/NAME.md); default: stdout, no plots"
    )
    p.add_argument("--format", choices=("md", "csv", "json"), help="default: from --out's suffix, else md")
    p.add_argument(
        "--names", nargs="+", metavar="NAME", help="row names, one per model in order of first appearance"
    )
    p.add_argument("--reference", metavar="gpt3|PATH", help="add the reference rows nearest in size to ours")
    p.add_argument(
        "--metric",
        action="append",
        metavar="PRESET|TASK=METRIC",
        help="zero-shot metric per column: gpt3 (default), acc, acc_norm, or e.g. hellaswag=acc_norm; repeatable",
    )
    p.add_argument(
        "--group-by",
        choices=("none", *GROUP_MEASURES),
        default="none",
        help="group compute-matched rows (compute = device-hours, the paper's equal GPU time)",
    )
    p.add_argument(
        "--group-tolerance", type=float, default=0.1, help="relative spread within a group (default 0.1)"
    )
    p.add_argument(
        "--runs",
        nargs="+",
        metavar="RUN_DIR",
        help="also plot validation perplexity vs compute for these runs",
    )
    p.add_argument("--title", default="Leaderboard", help="markdown title")
    p.add_argument(
        "--analysis",
        action="append",
        metavar="FILE.json",
        help="add an analysis section from `nfeval analyze` JSON (grads, gains, stability); repeatable",
    )


def run(args: argparse.Namespace) -> int:
    from ..analysis.tables import load_analysis

    analyses = [load_analysis(path) for path in args.analysis or []]  # checked before any other work
    fmt = args.format or {".csv": "csv", ".json": "json"}.get(os.path.splitext(args.out or "")[1], "md")
    board = build(
        args.results,
        names=args.names,
        reference=args.reference,
        metric=args.metric,
        group_by=args.group_by,
        group_tolerance=args.group_tolerance,
    )
    if analyses:
        board["analysis"] = analyses
    for w in board["warnings"]:
        print(f"nfeval leaderboard: warning: {w}", file=sys.stderr)
    comparison = None
    if args.runs:
        from .compare import compare

        comparison = compare(args.runs)
        for w in comparison["warnings"]:
            print(f"nfeval leaderboard: warning: {w}", file=sys.stderr)
    if args.out:
        write(board, args.out, fmt, title=args.title, comparison=comparison)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(render(board, fmt, args.title))
    return 0
