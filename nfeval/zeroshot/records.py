"""What a zero-shot results file says beside lm-eval's scores: the ``nfeval`` block (provenance, model,
settings, where each task's documents came from, the column each task fills) and lm-eval's ``config``
block filled with the values the run used.

Results are keyed by the lm-eval task that ran, as stock lm-eval keys them (``piqa_local`` for the
shipped local YAML, ``piqa_hub`` for its Hub twin, ``piqa`` for lm-eval's own task); ``nfeval.tasks`` maps
each to the column it fills (``piqa``), which every reader also finds from the name alone
(``tasks.canonical_name``).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from .. import embedded
from .. import tasks as nf_tasks
from ..base.artifacts import provenance


def eval_split(task) -> str:
    """Returns the split a task is scored on."""
    return task.config.test_split if task.has_test_docs() else task.config.validation_split


def task_data(name: str, task, data_dir: str | None) -> dict[str, Any]:
    """Returns where a task's documents came from: the lm-eval task that read them (``piqa_local``) and
    its source, ``local`` files under ``data_dir`` or the ``hub`` dataset lm-eval names; ``embedded`` when
    the files are a slice shipped in the package (its rows, and the rows of the split it was taken from)."""
    if name.endswith("_local"):
        out = {"lm_eval_task": name, "source": "local", "data_dir": data_dir}
        task = nf_tasks.record(name)
        shipped = embedded.slice_of(data_dir, task.folder) if task else None
        if shipped is not None:  # part of the task: the leaderboard marks it as a subset
            (rows,), (of,) = shipped.files.values(), shipped.full_rows.values()
            out["embedded"] = {"slice": f"nfeval/embedded/{shipped.folder}", "rows": rows, "of": of}
        return out
    return {"lm_eval_task": name, "source": "hub", "dataset": task.config.dataset_path}


def nfeval_block(model: dict, loaded: dict, skipped: dict, todo: list, **settings) -> dict[str, Any]:
    """Returns the ``nfeval`` block of a results file: provenance, model, settings and per-task notes,
    keyed by the lm-eval task names the results are keyed by; ``tasks`` maps each to its column."""
    import lm_eval

    from ..tasks.gpt3 import METRIC_DESCRIPTIONS

    scored = {t.task_name for t in todo}
    return {
        "provenance": provenance(
            lm_eval_version=lm_eval.__version__,
            transformers_version=_version("transformers"),
            datasets_version=_version("datasets"),
        ),
        "model": model,
        **settings,
        "tasks": {name: nf_tasks.canonical_name(name) for name in loaded},
        "task_data": {name: task_data(name, t, settings.get("data_dir")) for name, t in loaded.items()},
        "eval_split": {name: eval_split(t) for name, t in loaded.items()},
        "skipped": dict(skipped),
        "cached_tasks": sorted(n for n in loaded if n not in scored),
        "metrics": METRIC_DESCRIPTIONS,
        "gpt3_metric": {name: nf_tasks.GPT3_METRIC.get(nf_tasks.canonical_name(name)) for name in loaded},
    }


def lm_eval_config(ckpt_path: str, **settings: Any) -> dict[str, Any]:
    """Returns the results' ``config`` block with the values this run used (lm-eval leaves model_args,
    batch_size and device empty for a model passed as an object): ``model_args`` as ``lm-eval --model
    nfeval --model_args`` takes them, ``pretrained=`` the path as given (lm-eval names the model folder of
    ``--output_path`` after it)."""
    args = {"pretrained": ckpt_path, "dtype": settings["dtype"]}
    args |= {k: settings[k] for k in ("max_length", "max_batch_tokens") if settings.get(k) is not None}
    if settings.get("too_long") not in (None, "refuse"):
        args["too_long"] = settings["too_long"]
    return {
        "model": "nfeval",
        "model_args": ",".join(f"{k}={v}" for k, v in args.items()),
        "batch_size": settings["batch_size"],
        "device": settings["device"],
        "limit": settings.get("limit"),
    }


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None
