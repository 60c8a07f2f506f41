"""The zero-shot results cache: keys (model fingerprint, scoring settings, task contents, limit) and
per-task entries under ``cache_dir("zeroshot")``, read back and written atomically."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
from typing import Any

from ..base.artifacts import atomic_write_json, cache_dir
from ..base.errors import DataError, OutputError
from ..base.jsonio import load_json, sha256_json
from ..engine.model.dtypes import long_name, torch_dtype
from ..model_adapters.config import ScoringConfig
from . import items as zeroshot_items

# ScoringConfig fields besides dtype, max_length and hf_forward that change a model's answers (or, for
# fold_head_scale and pack, how they are computed, as hf_forward does)
ANSWER_SETTINGS = ("add_bos_token", "prefix_token_id", "fold_head_scale", "pack", "too_long")
# nfeval's per-task record of the documents scored truncated (``NFEvalLM.too_long_record``), cached with
# the task's results and moved into the results' ``nfeval.truncated``
TOO_LONG = "nfeval_truncated"
PER_TASK_KEYS = (
    "results",
    "configs",
    "versions",
    "n-shot",
    "higher_is_better",
    "n-samples",
    "group_subtasks",
    TOO_LONG,
)


def task_hash(task) -> str:
    """Returns a hash of everything about a task that decides its scores: config, hooks, documents."""
    from ..tasks.gpt3 import METRICS_VERSION

    cfg = task.dump_config()
    meta = cfg.pop("metadata", None) or {}
    cfg["metadata"] = {k: meta[k] for k in ("version", "uncond_context") if k in meta}
    docs = hashlib.sha256()
    for doc in task.eval_docs:
        docs.update(json.dumps(doc, sort_keys=True, default=str).encode() + b"\n")
    return sha256_json(
        {
            "config": cfg,
            "class": inspect.getsource(type(task)),
            "docs": docs.hexdigest(),
            "metrics_version": METRICS_VERSION,
        }
    )


def cache_keys(
    identity, scoring: ScoringConfig, loaded: dict, limit, fairseq_head_scale_bug: bool = False
) -> dict[str, str]:
    """Returns {task: cache key}: a hash of the model, the scoring settings that decide its answers, the
    task contents and the limit."""
    import lm_eval

    settings = {
        "kind": identity.kind,
        "fingerprint": identity.fingerprint,
        "tokenizer": identity.tokenizer_fingerprint,
        "dtype": long_name(torch_dtype(scoring.dtype)),
        "max_length": scoring.max_length,
        "lm_eval": lm_eval.__version__,
    }
    if fairseq_head_scale_bug:  # same weights, another forward: its own cache key (old keys unchanged)
        settings["fairseq_head_scale_bug"] = True
    # a cross-check is not answered by the default's
    if identity.kind == "hf" and scoring.hf_forward != "engine":
        settings["hf_forward"] = scoring.hf_forward
    default = ScoringConfig()
    for name in ANSWER_SETTINGS:  # off their defaults, their own keys (old keys unchanged)
        if getattr(scoring, name) != getattr(default, name):
            settings[name] = getattr(scoring, name)
    return {
        name: sha256_json({**settings, "task": name, "task_hash": task_hash(t), "limit": limit})
        for name, t in loaded.items()
    }


def read_cache(
    keys: dict[str, str], log, with_samples: bool = False
) -> tuple[dict[str, dict], dict[str, Any], dict[str, list]]:
    """Returns ({task: cached per-task results}, {task: cached item records}, {task: cached samples}) for
    the tasks in the cache; with ``with_samples`` a task counts as cached only with its samples (lm-eval's
    logged samples, kept by a run that wrote them)."""
    cached, items, samples = {}, {}, {}
    for name, key in keys.items():
        path = entry_path(key)
        if not os.path.isfile(path):
            continue
        try:
            entry, item_record = check_entry(load_json(path), path, name), zeroshot_items.read_cached(path)
            logged = read_samples(path) if with_samples else None
        except DataError as e:  # a damaged cache entry is recomputed (and rewritten), not fatal
            log(f"{name}: ignoring the damaged cache file and recomputing ({e})")
            continue
        if item_record is not None and (logged is not None or not with_samples):
            items[name], cached[name] = item_record, entry
            if logged is not None:
                samples[name] = logged
            log(f"{name}: cached result ({path})")
    return cached, items, samples


def samples_path(entry_path: str) -> str:
    """Returns the file of lm-eval's logged samples beside a cache entry."""
    return entry_path[: -len(".json")] + ".samples.json"


def read_samples(entry_path: str) -> list[dict[str, Any]] | None:
    """Returns the logged samples cached beside ``entry_path``, or None when none were kept; a file that
    is not a list of samples is a DataError."""
    path = samples_path(entry_path)
    if not os.path.isfile(path):
        return None
    samples = load_json(path).get("samples")
    if not isinstance(samples, list) or not all(isinstance(s, dict) and "doc_id" in s for s in samples):
        raise DataError(f"{path}: key 'samples' is missing or malformed; expected lm-eval's logged samples")
    return samples


def check_entry(entry: Any, path: str, name: str) -> dict[str, dict]:
    """Returns ``entry`` when it is one task's cached results (``{per-task key: {name: value}}``, with
    ``results.<name>`` an object of metrics); else raises DataError naming ``path`` and the key."""
    if not isinstance(entry, dict):
        raise DataError(f"{path}: expected an object {{per-task key: {{task: value}}}}")
    for k, v in entry.items():
        if k not in PER_TASK_KEYS or not isinstance(v, dict) or set(v) != {name}:
            raise DataError(f"{path}: key {k!r} is not a per-task key holding only {name!r}")
    if not isinstance((entry.get("results") or {}).get(name), dict):
        raise DataError(f"{path}: key 'results.{name}' is missing or not an object of metrics")
    return entry


def entry_path(key: str) -> str:
    """Returns the path of the cache entry stored under ``key``."""
    return os.path.join(cache_dir("zeroshot"), f"{key}.json")


def write_entry(key: str, entry: dict[str, Any], item_record: Any, samples: list | None = None) -> None:
    """Writes one task's cached results, its item records and, when given, its logged samples (those
    first: an entry implies its items). A cache that cannot be written (a read-only home, a full disk)
    keeps nothing: the cache only saves time, so the scoring goes on."""
    path = entry_path(key)
    with contextlib.suppress(OutputError):
        if samples is not None:
            atomic_write_json(samples_path(path), {"samples": samples})
        atomic_write_json(zeroshot_items.cache_path(path), item_record)
        atomic_write_json(path, entry)
