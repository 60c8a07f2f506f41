"""``nfeval zeroshot``: score a checkpoint on the five zero-shot tasks through lm-evaluation-harness.

Tasks come from ``tasks/`` (``<task>_local`` with ``--data-dir``, else ``<task>_hub``); the model is
``model_adapters.NFEvalLM``. Each task's results are cached under the model fingerprint, the scoring
settings and a hash of the task (config, hook source, documents, limit, metric version), so a rerun
is free and two models never share answers. The cache lives in ``$NFEVAL_CACHE`` (default
``~/.cache/nfeval``). Results are keyed by the lm-eval task that ran (``piqa_local``), as stock lm-eval
keys them; ``zeroshot.records`` writes what nfeval adds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from .. import tasks as nf_tasks
from ..base import env, hub
from ..base.artifacts import atomic_write_json
from ..base.errors import ConfigError, MissingDataError, UserError, hub_unreachable
from ..base.escape import text_cell
from ..base.jsonio import file_sha256
from ..base.sweep_lock import file_lock
from ..engine.checkpoints import loading
from ..engine.inference.backend import no_tokenizer_message
from ..engine.model.dtypes import long_name, torch_dtype
from ..model_adapters.scorer import describe, with_command
from ..tasks import task_build
from ..tasks.loaders import MissingData
from . import items as zeroshot_items
from . import lm_eval_layout, records, task_names
from .cache import PER_TASK_KEYS, TOO_LONG, cache_keys, read_cache, write_entry
from .config import ZeroShotConfig
from .lm_eval_git import quiet_git_hash

HUB_INSTEAD = "pass --data-dir embedded (the 200-item slices in the package) or --data-dir DIR (local files)"


def task_manager(data_dir: str | None, names: list[str] | None = None):
    """Returns lm-eval's TaskManager with nfeval's tasks registered and ``data_dir`` passed to the loaders.

    lm-eval's own task index (seconds to build) is included only when ``names`` asks for a task of its.
    """
    from lm_eval.tasks import TaskManager

    return TaskManager(
        include_path=nf_tasks.TASKS_DIR,
        include_defaults=names is None or not set(names) <= set(nf_tasks.LM_EVAL_NAMES),
        metadata={"data_dir": data_dir} if data_dir else {},
    )


def reads_hub(name: str) -> bool:
    """Returns whether lm-eval reads task ``name``'s documents from the Hugging Face Hub: our ``_hub``
    variants (a user-supplied task's, StoryCloze's, is skipped instead) and lm-eval's own tasks."""
    task = nf_tasks.record(name)
    local = name.endswith("_local") or (task is not None and not task.variants)
    return not (local or (task is not None and task.user_supplied))


def load_tasks(names: list[str], manager) -> tuple[dict[str, Any], dict[str, str]]:
    """Returns ({name: Task}, {skipped name: reason}); a user-supplied task (StoryCloze) without files is
    skipped, other bad data raises."""
    loaded, skipped = {}, {}
    for name in names:
        task = nf_tasks.record(name)
        user_supplied = task is not None and task.user_supplied
        if user_supplied and not name.endswith("_local"):
            skipped[name] = task.obtain
            continue
        if name not in manager.all_tasks:
            raise task_names.unknown_task(name, manager.all_tasks)
        try:
            loaded.update(manager.load([name])["tasks"])
        except MissingData as e:
            if not user_supplied:
                raise
            skipped[name] = str(e)
        except UserError:  # bad local data: its message names file, line and field
            raise
        except Exception as e:  # a Hub dataset that cannot be fetched (offline, gated, renamed)
            if name.endswith("_hub"):
                raise hub_unreachable(f"task {name}", e, HUB_INSTEAD) from None
            raise
    return loaded, skipped


def make_table(out: dict[str, Any]) -> str:
    """Returns the results as a plain-text table: task, metric, value, stderr, n; task and metric names
    (from task files and flags) on one line each (``escape.text_cell``): one line per result."""
    rows = [("task", "metric", "value", "stderr", "n")]
    for task, res in out["results"].items():
        n = out.get("n-samples", {}).get(task, {}).get("effective", "")
        for key, value in res.items():
            if "," not in key or "_stderr" in key or not isinstance(value, (int, float)):
                continue
            metric = key.split(",")[0]
            stderr = res.get(key.replace(metric, f"{metric}_stderr", 1))
            rows.append(
                (
                    text_cell(task),
                    text_cell(metric),
                    f"{value:.4f}",
                    f"{stderr:.4f}" if isinstance(stderr, (int, float)) else "",
                    str(n),
                )
            )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    scoring = out.get("nfeval", {}).get("scoring")  # the FLOP/s report
    if not scoring:
        return table

    return table + "\n\n" + describe(scoring)


def _score(
    lm, todo: list, limit, manager, keys, found: tuple[dict, dict, dict], cfg: ZeroShotConfig
) -> dict[str, Any] | None:
    """Scores the ``todo`` tasks with lm-eval, adding to ``found`` (cached results, items, samples) each
    one's results, items and, with ``cfg.log_samples``, lm-eval's logged samples (also to the cache when
    ``cfg.use_cache``); returns lm-eval's run-level keys (None off rank 0)."""
    import lm_eval
    from lm_eval.utils import handle_non_serializable

    with quiet_git_hash():
        fresh = lm_eval.simple_evaluate(
            model=lm, tasks=todo, limit=limit, log_samples=True, task_manager=manager
        )
    if fresh is None:  # not rank 0 under torchrun
        return None
    cached, items, logged = found
    samples = fresh.pop("samples")
    for t in todo:
        name = t.task_name
        items[name] = zeroshot_items.from_samples(t, samples[name], fresh["results"][name])
        if cfg.log_samples:
            logged[name] = lm_eval_layout.json_safe(samples[name])
        if getattr(t, "original_doc_count", None) is not None:  # the split before --limit cut it
            fresh["n-samples"][name]["original"] = t.original_doc_count
    fresh = json.loads(json.dumps(fresh, default=handle_non_serializable))
    fresh[TOO_LONG] = lm.too_long_record()  # documents scored truncated (--too-long truncate)
    for name in keys:
        if name in cached:
            continue
        entry = {k: {name: fresh[k][name]} for k in PER_TASK_KEYS if name in fresh.get(k, {})}
        cached[name] = entry
        if cfg.use_cache:
            write_entry(keys[name], entry, items[name], logged.get(name))
    return {k: v for k, v in fresh.items() if k not in PER_TASK_KEYS and k != "samples"}


def evaluate(
    ckpt_path: str, cfg: ZeroShotConfig = ZeroShotConfig(), log=None, started: float | None = None
) -> dict[str, Any] | None:
    """Scores ``ckpt_path`` (nfeval run/checkpoint dir, HF causal-LM dir or fairseq file) zero-shot as
    ``cfg`` says; returns lm-eval's results dict plus an ``nfeval`` block (None on ranks other than 0
    under torchrun). Writes ``cfg.output`` atomically when given, or lm-eval's files under
    ``cfg.output_path`` (``lm_eval_layout.write``: dated names, so runs never collide; the results path is
    logged); nothing is written when the data or the model is bad. A cache file that is not valid JSON is
    reported (named, through ``log``) and recomputed. The scoring report's whole-command time runs from
    ``started`` (a ``time.perf_counter()`` value; default: this call's start) to the end.

    One writer per results file: the process writing ``cfg.output`` (rank 0) holds its lock
    (``sweep_lock.file_lock``) from the start, and another one writing the same file is refused at once,
    naming the holder, so a results file and its sidecar are always one run's."""
    started = time.perf_counter() if started is None else started
    cfg = cfg.checked()
    writes = bool(cfg.output) and env.integer("RANK", 0) == 0  # under torchrun rank 0 writes
    with file_lock(cfg.output) if writes else contextlib.nullcontext():
        return _evaluate(ckpt_path, cfg, log, started)


def _evaluate(ckpt_path: str, cfg: ZeroShotConfig, log, started: float) -> dict[str, Any] | None:
    """``evaluate``'s work, ``cfg`` checked (and its output locked)."""
    from ..model_adapters import NFEvalLM

    log = log or (lambda msg: print(msg, file=sys.stderr))
    scoring = cfg.scoring
    identity = _identify(ckpt_path, cfg)
    dtype_name = long_name(torch_dtype(scoring.dtype))
    with _quiet_custom_kwargs_hint(), task_build.building(cfg.limit, cfg.use_cache, log):
        manager, loaded, skipped = _plan_tasks(cfg.tasks, cfg.data_dir, log)
        _check_one_variant(loaded)

        keys = cache_keys(identity, scoring, loaded, cfg.limit, cfg.fairseq_head_scale_bug)
        found = read_cache(keys, log, cfg.log_samples) if cfg.use_cache else ({}, {}, {})
        cached, items, samples = found
        todo = [t for name, t in loaded.items() if name not in cached]
        # the scoring report: wall time, FLOPs, FLOP/s (None: all answers cached)
        run_keys, scoring_report, lm = {}, None, None
        if todo:
            lm = NFEvalLM(identity, scoring)
            run_keys = _score(lm, todo, cfg.limit, manager, keys, found, cfg)
            if run_keys is None:
                return None
            scoring_report = lm.scoring_report()
    out = _merge(run_keys, cached, loaded)
    too_long = {name: record for name, record in out.pop(TOO_LONG, {}).items() if record}
    if scoring_report is not None:
        scoring_report = with_command(scoring_report, time.perf_counter() - started)
    settings = {"batch_size": scoring.batch_size, "max_batch_tokens": scoring.max_batch_tokens}
    device = str(lm.device) if lm is not None else None  # the one that scored: None when all was cached
    settings.update(dtype=dtype_name, device=device, data_dir=cfg.data_dir, limit=cfg.limit)
    settings.update(scoring=scoring_report, too_long=scoring.too_long, truncated=too_long)
    model = _add_records(out, identity, ckpt_path, scoring.max_length, loaded, skipped, todo, settings)
    if cfg.output:
        _write(cfg.output, out, items, loaded, model)
    if cfg.output_path:
        per_task = {name: samples[name] for name in loaded} if cfg.log_samples else None
        written = lm_eval_layout.write(cfg.output_path, out, per_task, started)
        log(f"results: {written}{lm_eval_layout.json_prefix_note(cfg.output_path)}")
    for name, record in too_long.items():
        log(truncated_line(name, record))
    return out


def truncated_line(name: str, record: dict[str, Any]) -> str:
    """Returns the line saying how many of a task's documents were scored truncated."""
    count = len(record["doc_ids"])
    return (
        f"{name}: {count} document(s) longer than the context window ({record['max_length']} tokens) "
        "scored truncated as lm-eval does (--too-long truncate; recorded in nfeval.truncated)"
    )


def _add_records(out, identity, ckpt_path, max_length, loaded, skipped, todo, settings) -> dict[str, Any]:
    """Fills ``out``'s lm-eval ``config`` block with the real settings and adds the ``nfeval`` block
    (model, tasks, scoring); returns the model record."""
    model = dict(identity.summary, fingerprint=identity.fingerprint)
    config = records.lm_eval_config(ckpt_path, max_length=max_length, **settings)
    out["config"] = {**out.get("config", {}), **config}
    out["nfeval"] = records.nfeval_block(model, loaded, skipped, todo, **settings)
    return model


def _write(output: str, out: dict[str, Any], items: dict, loaded: dict, model: dict[str, Any]) -> None:
    """Writes the results JSON and its per-item sidecar (``F.items.json``), keyed by the lm-eval tasks
    that ran; the sidecar records the results file's sha256, so a pair from two runs (one killed between
    the two writes) is told."""
    atomic_write_json(output, out)
    per_task = {name: items[name] for name in loaded}
    zeroshot_items.write_sidecar(output, per_task, model, results_sha256=file_sha256(output))


def _check_one_variant(loaded: dict) -> None:
    """Raises ConfigError when two variants of one task were asked for (piqa_local and piqa_hub): their
    results would fill the one column ``piqa``."""
    seen: dict[str, str] = {}
    for name in loaded:
        key = nf_tasks.canonical_name(name)
        if key in seen:
            raise ConfigError(f"--tasks: {seen[key]} and {name} both score {key}; pass one of them")
        seen[key] = name


def _merge(run_keys: dict[str, Any], cached: dict[str, dict], loaded: dict) -> dict[str, Any]:
    """Returns lm-eval's results layout: the per-task keys of every loaded task plus the run-level keys."""
    out: dict[str, Any] = {k: {} for k in PER_TASK_KEYS}
    out.update(run_keys)
    for name in loaded:
        for k, v in cached[name].items():
            out.setdefault(k, {}).update(v)
    return out


@contextlib.contextmanager
def _quiet_custom_kwargs_hint() -> Iterator[None]:
    """Within the block, lm-eval's per-task hint about custom kwargs is filtered out: our loaders take
    data_dir from the task metadata, so the hint is noise here."""
    logger = logging.getLogger("lm_eval.api.task")

    def keep(record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed" not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def _plan_tasks(tasks: list[str] | None, data_dir: str | None, log) -> tuple[Any, dict, dict]:
    """Returns (TaskManager, {name: Task}, {skipped name: reason}); raises MissingDataError when every
    task was skipped, or at once when a task's documents come from the Hub and it does not answer."""
    names = [
        nf_tasks.registered_name(t, local=data_dir is not None) for t in (tasks or nf_tasks.DEFAULT_TASKS)
    ]
    from_hub = [n for n in names if reads_hub(n)]
    if from_hub:
        hub.check_reachable(f"--tasks {' '.join(from_hub)}", HUB_INSTEAD)
    manager = task_manager(data_dir, names)
    loaded, skipped = load_tasks(names, manager)
    if not loaded:
        raise MissingDataError("no task left to score (all were skipped): " + "; ".join(skipped.values()))
    for name, why in skipped.items():
        log(f"skipping {name}: {why}")
    return manager, loaded, skipped


def _identify(ckpt_path: str, cfg: ZeroShotConfig) -> loading.ModelIdentity:
    """Returns the identity of the model to score (``loading.identify``, read once: a cache miss builds
    the model from it); a fairseq file without a tokenizer raises MissingDataError before any work."""
    identity = loading.identify(
        ckpt_path,
        tokenizer=cfg.tokenizer,
        fairseq_dict=cfg.fairseq_dict,
        trust_checkpoint=cfg.trust_checkpoint,
        fairseq_head_scale_bug=cfg.fairseq_head_scale_bug,
    )
    if identity.loaded is not None and identity.loaded.tokenizer is None and os.path.isfile(ckpt_path):
        raise MissingDataError(no_tokenizer_message(ckpt_path))
    return identity
