"""Reading leaderboard inputs: zero-shot and GLUE results files and reference rows, strictly on the keys
used (a missing or mistyped key is a DataError naming the file and the key); and the tables' constants."""

from __future__ import annotations

import importlib.resources
import math
import os
from typing import Any

from .. import tasks as nf_tasks
from ..base.errors import DataError, MissingDataError
from ..base.jsonio import load_json
from ..glue.metrics import SPLIT_METRICS
from ..glue.specs import TASKS as GLUE_TASKS
from ..glue.specs import TITLES as GLUE_TITLES
from ..zeroshot import lm_eval_layout

ZEROSHOT_TASKS = nf_tasks.DEFAULT_TASKS  # averaged, as in the paper
# Shown when present, not averaged; corpus_cloze is the demo's held-out cloze task (nfeval/zeroshot/cloze.py).
EXTRA_ZEROSHOT_TASKS = nf_tasks.EXTRA_TASKS
# The metrics the GLUE leaderboard averages into a task's score: those glue.py computes per task.
GLUE_SCORE_METRICS = {t: tuple(n for fns in SPLIT_METRICS[t].values() for n in fns) for t in GLUE_TASKS}
TITLES = {**nf_tasks.TITLES, **GLUE_TITLES}  # the task records' (tasks/registry.py, glue/specs.py)
# GPT-3's conventions; the corpus cloze task, which GPT-3 did not score, per token as its cloze tasks.
GPT3_METRICS = dict(nf_tasks.LEADERBOARD_METRIC)
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
MISSING = "–"
# StoryCloze's licence forbids redistribution: nfeval ships no slice of it, so a model row without it says
# where its data has to come from instead of a bare MISSING.
USER_SUPPLIED = "user-supplied"
USER_SUPPLIED_TASKS = nf_tasks.USER_SUPPLIED
CHANCE = {task: 1 / n for task, n in nf_tasks.CHOICES.items()}  # accuracy of a uniform guess
YARDSTICK = "yardstick"  # the reference label of the chance and majority-class rows
Z95 = 1.959964  # a 95% normal interval's half-width in standard errors

# ---------------------------------------------------------------- reading, strictly on what we use


def _describe(keys: list[str]) -> str:
    return ".".join(str(k) for k in keys)


def _get(
    data: Any, keys: list[str], path: str, kind: type | tuple, expected: str, required: bool = True
) -> Any:
    """Returns ``data[k0][k1]…``; raises ValueError naming ``path`` and the key when missing (if required)
    or mistyped."""
    value = data
    for i, key in enumerate(keys):
        if not isinstance(value, dict):
            raise DataError(
                f"{path}: key {_describe(keys[:i])!r} is a {type(value).__name__}, expected an object"
            )
        if key not in value or value[key] is None:
            if required:
                raise DataError(f"{path}: key {_describe(keys)!r} is missing; expected {expected}")
            return None
        value = value[key]
    numeric = kind in ((int, float), int)
    if not isinstance(value, kind) or (numeric and (isinstance(value, bool) or not math.isfinite(value))):
        raise DataError(f"{path}: key {_describe(keys)!r} is {value!r}; expected {expected}")
    return value


def fraction(data: Any, keys: list[str], path: str, low: float = 0.0) -> float:
    value = _get(data, keys, path, (int, float), f"a number in [{low:g}, 1]")
    if not low <= value <= 1:
        raise DataError(
            f"{path}: key {_describe(keys)!r} is {value!r}; expected a number in [{low:g}, 1] (a fraction, "
            "not percent)"
        )
    return float(value)


def _model_block(data: dict, path: str, kind: str) -> dict[str, Any]:
    """Returns the model a results file scored: nfeval's ``nfeval.model`` block, or for a zero-shot file
    that stock lm-eval wrote (no nfeval block) the model lm-eval names (``stock_model``)."""
    block = data.get("nfeval") if isinstance(data.get("nfeval"), dict) else {}
    if kind == "zeroshot" and block.get("model") is None:
        return stock_model(data, path)
    _get(data, ["nfeval", "model"], path, dict, "the model block (checkpoint.summary)")
    base = ["nfeval", "model"]
    info = {
        "fingerprint": _get(data, base + ["fingerprint"], path, str, "a string", required=False),
        "path": _get(data, base + ["path"], path, str, "a string", required=False),
        "architecture": _get(data, base + ["architecture"], path, str, "a string", required=False),
        "parameters": _get(data, base + ["parameters"], path, int, "an integer", required=False),
    }
    if not info["fingerprint"] and not info["path"]:
        raise DataError(
            f"{path}: key 'nfeval.model.fingerprint' is missing; expected the model's fingerprint (or at "
            "least 'nfeval.model.path')"
        )
    _get(data, base + ["compute"], path, dict, "an object", required=False)
    for key in ("tokens", "flops", "device_hours"):
        info[key] = _get(data, base + ["compute", key], path, (int, float), "a number", required=False)
    return {**info, "lm_eval_model": "nfeval", "label": None}


def stock_model(data: dict, path: str) -> dict[str, Any]:
    """Returns the model of a zero-shot results file without nfeval's block (stock ``lm_eval``, or
    ``nfeval lm-eval``, wrote it): named by lm-eval's ``model_name`` (its ``pretrained=`` value as given),
    else the ``pretrained=`` of ``config.model_args``; the parameter count from ``config.
    model_num_parameters`` where lm-eval's model reports it; nothing else is known."""
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    name = data.get("model_name") if isinstance(data.get("model_name"), str) else None
    args = config.get("model_args")
    if not name and isinstance(args, str):
        found = [a.split("=", 1)[1] for a in args.split(",") if a.strip().startswith("pretrained=")]
        name = found[0].strip() if found else None
    if not name:
        raise DataError(
            f"{path}: key 'nfeval.model' is missing, and so are lm-eval's 'model_name' and the pretrained= "
            "of 'config.model_args'; expected nfeval's model block or the model lm-eval scored"
        )
    parameters = config.get("model_num_parameters")
    typed = isinstance(parameters, int) and not isinstance(parameters, bool) and parameters > 0
    path_like = name.startswith(("/", ".", "~")) or os.path.isdir(name)
    model = config.get("model") if isinstance(config.get("model"), str) else None
    return {
        "fingerprint": None,
        "path": None,
        "architecture": None,
        "parameters": parameters if typed else None,
        "tokens": None,
        "flops": None,
        "device_hours": None,
        "lm_eval_model": model,
        "label": os.path.basename(os.path.normpath(name)) if path_like else name,
        "model_name": name,
    }


def read_zeroshot(data: dict, path: str, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """Returns {canonical task: {"metrics": lm-eval metric dict, "subset": bool, "source": path}} of a
    zero-shot file."""
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
    block = data.get("nfeval") if isinstance(data.get("nfeval"), dict) else {}
    task_data = block.get("task_data") if isinstance(block.get("task_data"), dict) else {}
    tasks: dict[str, dict[str, Any]] = {}
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    model_kind = config.get("model") if isinstance(config.get("model"), str) else None
    for name in results:
        canonical = aliases.get(name) or nf_tasks.canonical_name(name)  # older files: piqa_local
        if canonical not in canonical_names:
            warnings.append(
                f"{path}: ignored task {name!r} (not one of {canonical_names}; name its canonical task in "
                "'nfeval.tasks')"
            )
            continue
        metrics = _get(data, ["results", name], path, dict, "an object of lm-eval metrics")
        if canonical in tasks:
            raise DataError(f"{path}: key 'results.{name}' is a second result for task {canonical!r}")
        counts = n_samples.get(name) if isinstance(n_samples.get(name), dict) else {}
        if counts.get("effective") is not None and counts.get("original") is not None:
            subset = counts["effective"] < counts["original"]
        else:
            subset = limit is not None
        source = task_data.get(name, task_data.get(canonical))  # older files: keyed by the column
        source = source if isinstance(source, dict) else {}
        subset = subset or bool(source.get("embedded"))  # a slice shipped in the package (nfeval.embedded)
        n = counts.get("effective") if isinstance(counts.get("effective"), int) else None
        tasks[canonical] = {"task": name, "metrics": metrics, "subset": subset, "source": path, "n": n}
        tasks[canonical]["model"] = model_kind
        tasks[canonical]["listed"] = listed_metrics(data, name)
    return tasks


def read_glue(data: dict, path: str, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """Returns {task: {"metric", "best", "source", "majority", "rows"}} of a GLUE summary; the metric's best
    value is checked. ``majority`` is the majority-class metrics and ``rows`` the dev rows per split (None
    in summaries from before they were recorded); a task where every learning rate diverged is left out
    with a warning."""
    tasks = _get(data, ["tasks"], path, dict, "the per-task GLUE results object")
    out = {}
    for task in tasks:
        if task not in GLUE_TASKS:
            warnings.append(f"{path}: ignored GLUE task {task!r} (expected one of {GLUE_TASKS})")
            continue
        metric = _get(data, ["tasks", task, "metric"], path, str, "the task's GLUE metric name")
        best = _get(data, ["tasks", task, "best"], path, dict, "an object {metric: value}")
        if not best:
            warnings.append(f"{path}: GLUE task {task!r}: every learning rate diverged; shown as {MISSING}")
            continue
        fraction(data, ["tasks", task, "best", metric], path, low=-1.0)
        majority = ["tasks", task, "majority"]
        out[task] = {
            "metric": metric,
            "best": best,
            "source": path,
            "majority": _get(data, majority + ["metrics"], path, dict, "an object", required=False),
            "rows": _get(data, majority + ["rows"], path, dict, "an object", required=False),
        }
    return out


def results_paths(paths: list[str]) -> list[str]:
    """Returns the results files that ``paths`` name: each file as given, each ``--output_path`` folder of
    lm-eval's layout as its latest results file per model (``lm_eval_layout.results_files``)."""
    return [found for path in paths for found in lm_eval_layout.results_files(path)]


def read_results(path: str, warnings: list[str]) -> tuple[str, dict[str, Any], dict[str, dict]]:
    """Returns (kind "zeroshot" or "glue", model info, per-task entries) of one results file."""
    data = load_json(path)
    if "results" in data:
        kind, tasks = "zeroshot", read_zeroshot(data, path, warnings)
    elif "tasks" in data:
        kind, tasks = "glue", read_glue(data, path, warnings)
    else:
        raise DataError(f"{path}: key 'results' (zero-shot results) or 'tasks' (GLUE summary) is missing")
    return kind, _model_block(data, path, kind), tasks


def listed_metrics(data: dict, task: str) -> list[str]:
    """Returns the metrics the task's config in a results file lists (``configs.<task>.metric_list``):
    those it was asked to compute; [] when the file does not say."""
    configs = data.get("configs") if isinstance(data.get("configs"), dict) else {}
    config = configs.get(task) if isinstance(configs.get(task), dict) else {}
    listed = config.get("metric_list") if isinstance(config.get("metric_list"), list) else []
    return [m["metric"] for m in listed if isinstance(m, dict) and isinstance(m.get("metric"), str)]


def reference_files() -> dict[str, Any]:
    """Returns {name: resource} of the reference files shipped in the package (``nfeval.leaderboards``'
    ``reference/*.json``), found the same from any working directory and in any install."""
    folder = importlib.resources.files("nfeval.leaderboards") / "reference"
    return {f.name[: -len(".json")]: f for f in folder.iterdir() if f.name.endswith(".json")}


def _reference_path(spec: str) -> str:
    if os.path.isfile(spec):
        return spec
    shipped = reference_files()
    if spec in shipped:
        return str(shipped[spec])
    raise MissingDataError(
        f"--reference {spec}: no such file; expected a path to a reference JSON or one of {sorted(shipped)}"
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
        raise DataError(f"{path}: key 'units' is {units!r}; expected 'percent' or 'fraction'")
    tasks = _get(data, ["tasks"], path, dict, "an object {canonical task: {metric, convention}}")
    for task in tasks:
        if task not in ZEROSHOT_TASKS + EXTRA_ZEROSHOT_TASKS:
            raise DataError(
                f"{path}: key 'tasks.{task}' is not a canonical task; expected one of "
                f"{ZEROSHOT_TASKS + EXTRA_ZEROSHOT_TASKS}"
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
                raise DataError(f"{path}: key 'models.{i}.scores.{task}' names a task missing from 'tasks'")
            value = _get(entry, keys + ["scores", task], path, (int, float), f"a number in [0, {scale:g}]")
            if not 0 <= value <= scale:
                raise DataError(
                    f"{path}: key 'models.{i}.scores.{task}' is {value!r}; expected a number in [0, "
                    f"{scale:g}] ({units})"
                )
        if _get(entry, keys + ["parameters"], path, int, "the parameter count (a positive integer)") <= 0:
            raise DataError(
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
