"""lm-eval's output layout (``lm_eval --output_path DIR --log_samples``), written and found by lm-eval's code.

``DIR/<model_name_sanitized>/results_<date>.json`` holds the results and ``samples_<task>_<date>.jsonl``
beside it each task's per-sample log, one line per document and filter; the date (the text after the
last ``_``) ties a run's files together, and the newest date is the latest run. ``write`` has lm-eval's
``EvaluationTracker`` write them into a staging folder inside DIR, checks every line arrived (lm-eval
logs a failed write and carries on), then renames them into place, samples first, so a results file in
DIR always has its samples. The finders (``results_files``, ``samples_files``) are lm-eval's own.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from ..base import sweep_lock
from ..base.errors import ConfigError, DataError, MissingDataError, OutputError
from ..base.jsonio import read_jsonl
from . import items as zeroshot_items

TRACKER_LOGGER = "lm_eval.loggers.evaluation_tracker"
STAGING = ".tmp-lm-eval-"  # the prefix of a writer's staging folder inside the output folder
DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(\.\d+)?")  # lm-eval's date_id in its file names


def check_output_path(output_path: str | None, flag: str = "--output_path") -> None:
    """Raises ConfigError when ``output_path`` ends in ``.json`` and exists: lm-eval takes such a path as a
    file-name prefix (``F_<date>.json``, the samples files beside it), never as the file to write, so an
    existing one is another run's results file or a folder, not what the user meant."""
    if output_path and output_path.endswith(".json") and os.path.exists(output_path):
        what = "a folder" if os.path.isdir(output_path) else "an existing file"
        raise ConfigError(
            f"{flag} {output_path}: {what}; lm-eval takes a .json {flag} as a file-name prefix (it writes "
            f"{_prefixed(output_path)} and samples_<task>_<date>.jsonl beside it), never the file itself: "
            "pass a folder (nfeval zeroshot: or --output F.json for one results file)"
        )


def _prefixed(output_path: str) -> str:
    """Returns the results file name lm-eval makes of a .json ``output_path``: ``F_<date>.json``."""
    return f"{os.path.basename(output_path).removesuffix('.json')}_<date>.json"


def json_prefix_note(output_path: str) -> str:
    """Returns what a .json ``output_path`` means (lm-eval's rule), to follow the path written; "" for a
    folder."""
    if not output_path.endswith(".json"):
        return ""
    folder = os.path.dirname(os.path.abspath(output_path))
    return (
        f" (a .json --output_path is lm-eval's file-name prefix: {_prefixed(output_path)}, with the "
        f"samples files beside it in {folder})"
    )


def write(output_path: str, results: dict[str, Any], samples: dict[str, list] | None, started: float) -> str:
    """Writes ``results`` (with its ``nfeval`` block) and, when given, ``samples`` ({task: lm-eval's logged
    samples, JSON-safe}) where ``lm_eval --output_path output_path`` writes them; returns the results
    file's path. The run's time counts from ``started`` (a ``time.perf_counter()`` value).

    Writers into one folder take turns (``sweep_lock.turn_lock``), and each first clears what a killed
    one left (``_clear_leftovers``); a write that fails leaves nothing, not even a folder it made."""
    as_file = output_path.endswith(".json")  # lm-eval's other form: F_<date>.json, samples beside it
    base = os.path.dirname(os.path.abspath(output_path)) if as_file else os.path.abspath(output_path)
    made = _missing_folders(base)
    try:
        os.makedirs(base, exist_ok=True)
        with sweep_lock.turn_lock(base):
            return _write_staged(output_path, as_file, base, results, samples, started)
    except OSError as e:
        if isinstance(e, OutputError):
            raise
        raise OutputError(f"--output_path {output_path}: cannot write ({e.strerror or e})") from None
    finally:
        for folder in made:  # deepest first: those a failed write leaves empty
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def _missing_folders(path: str) -> list[str]:
    """Returns ``path`` and its ancestors that do not exist yet, deepest first."""
    made = []
    while path and not os.path.exists(path) and os.path.dirname(path) != path:
        made.append(path)
        path = os.path.dirname(path)
    return made


def _clear_leftovers(base: str, staging: str, folder: str) -> None:
    """Removes what a writer killed in ``base`` left (called under ``base``'s turn lock, so no other live
    writer is mid-write there): its staging folder (any in ``base`` but this writer's ``staging``), and in
    ``folder`` (where this write's files go) the samples files it had moved whose results file it had
    not (samples go first), which lm-eval's readers, taking each task's newest samples file, would pair
    with an older run's results."""
    from lm_eval.utils import get_file_datetime, get_sample_results_filenames

    for name in os.listdir(base):
        path = os.path.join(base, name)
        if name.startswith(STAGING) and os.path.isdir(path) and not os.path.samefile(path, staging):
            shutil.rmtree(path, ignore_errors=True)
    if not os.path.isdir(folder):
        return
    names = [n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n))]
    dates = {get_file_datetime(n).removesuffix(".json") for n in names if n.endswith(".json")}
    for name in _by_name(get_sample_results_filenames, names):
        date = get_file_datetime(name)
        if name.endswith(".jsonl") and DATE.fullmatch(date) and date not in dates:
            os.remove(os.path.join(folder, name))


def _write_staged(
    output_path: str, as_file: bool, base: str, results: dict[str, Any], samples: dict | None, started: float
) -> str:
    """``write``'s work under the turn lock: lm-eval's tracker writes into a staging folder, every line is
    checked to have arrived, and the files are renamed into place, samples first."""
    from lm_eval.loggers import EvaluationTracker

    staging = tempfile.mkdtemp(prefix=STAGING, dir=base)
    try:
        tracker = EvaluationTracker(
            output_path=os.path.join(staging, os.path.basename(output_path)) if as_file else staging
        )
        run = tracker.general_config_tracker
        run.log_experiment_args("nfeval", results["config"]["model_args"], None, None, False)
        run.start_time = started
        _clear_leftovers(base, staging, base if as_file else os.path.join(base, run.model_name_sanitized))
        with _failures_logged() as failures:
            tracker.save_results_aggregated(results=dict(results), samples=samples)
            for task in results["configs"] if samples else ():
                tracker.save_results_samples(task_name=task, samples=copy.deepcopy(samples[task]))
        staged = _staged_files(staging, samples)
        if failures or staged is None:
            reason = f" ({failures[-1]})" if failures else ""
            raise OutputError(f"--output_path {output_path}: lm-eval could not write its files{reason}")
        return _move_into(staging, base, staged)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _failures_logged() -> Iterator[list[str]]:
    """Collects what lm-eval's tracker logs about a write it could not do (it logs and carries on), and
    keeps its progress messages off the terminal."""
    logger, failures = logging.getLogger(TRACKER_LOGGER), []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING or "Error(" in record.getMessage():
                failures.append(record.getMessage())

    handler, level, propagate = Collect(), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # the exception itself is logged at INFO, after the warning
    logger.propagate = False
    try:
        yield failures
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _by_name(finder, paths: list[str]) -> list[str]:
    """Returns the ``paths`` that lm-eval's ``finder`` picks by their file name (it matches '/results_'
    anywhere in a path, so a folder named ``results_…`` would otherwise count)."""
    return [p for p in paths if finder(["/" + os.path.basename(p)])]


def _staged_files(staging: str, samples: dict[str, list] | None) -> list[str] | None:
    """Returns the staged files, results file last, or None when one is missing or short of lines."""
    from lm_eval.utils import get_file_task_name, get_results_filenames

    paths = sorted(os.path.join(d, n) for d, _, names in os.walk(staging) for n in names)
    results = _by_name(get_results_filenames, paths) or [p for p in paths if p.endswith(".json")]
    others = [p for p in paths if p not in results]
    for path in others:
        with open(path, encoding="utf-8") as f:
            lines = f.read().count("\n")
        if lines != len((samples or {}).get(get_file_task_name(os.path.basename(path)), ())):
            return None
    if len(results) != 1 or len(others) != len(samples or {}):
        return None
    return [*others, results[0]]


def _move_into(staging: str, base: str, staged: list[str]) -> str:
    """Renames the staged files to the same places under ``base``; returns where the last one went."""
    dest = base
    for path in staged:
        dest = os.path.join(base, os.path.relpath(path, staging))
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.replace(path, dest)
        except OSError as e:
            raise OutputError(f"{dest}: cannot write ({e.strerror or e})") from None
    return dest


def results_files(path: str) -> list[str]:
    """Returns the results files ``path`` names: itself when a file; for a folder, its latest
    ``results_<date>.json`` (lm-eval's ``get_latest_filename``), or else the latest of each model folder
    in it (``lm_eval --output_path`` makes one per model)."""
    if not os.path.isdir(path):
        return [path]
    own = _latest(path)
    if own:
        return [own]
    found = [_latest(os.path.join(path, name)) for name in sorted(os.listdir(path))]
    found = [f for f in found if f]
    if not found:
        raise MissingDataError(
            f"{path}: no results_<date>.json in this folder or its model folders; expected a results "
            "file or an `--output_path` folder"
        )
    return found


def _latest(folder: str) -> str | None:
    from lm_eval.utils import get_latest_filename, get_results_filenames

    if not os.path.isdir(folder):
        return None
    files = [os.path.join(folder, n) for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n))]
    found = _by_name(get_results_filenames, files)
    return get_latest_filename(found) if found else None


def samples_files(results_path: str) -> dict[str, str]:
    """Returns {task: samples file} of the run that wrote ``results_path``: each
    ``samples_<task>_<date>.jsonl`` beside it with its date (lm-eval's ``get_sample_results_filenames``,
    ``get_file_task_name``)."""
    from lm_eval.utils import get_file_datetime, get_file_task_name, get_sample_results_filenames

    folder = os.path.dirname(os.path.abspath(results_path))
    date = get_file_datetime(os.path.basename(results_path)).removesuffix(".json")
    files = _by_name(
        get_sample_results_filenames, [os.path.join(folder, n) for n in sorted(os.listdir(folder))]
    )
    names = [os.path.basename(f) for f in files]
    return {get_file_task_name(n): f for n, f in zip(names, files) if get_file_datetime(n) == date}


def in_layout(results_path: str) -> bool:
    """Returns whether ``results_path`` is named as lm-eval names results or has samples files of its run."""
    from lm_eval.utils import get_results_filenames

    return bool(_by_name(get_results_filenames, [results_path]) or samples_files(results_path))


def read_items(results_path: str, data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Returns {task: per-item record} (``items.from_samples``' schema, without chosen indices) of the
    results file ``results_path`` (parsed: ``data``) from its samples files; MissingDataError when a task
    has none, DataError when one holds other documents than the results count."""
    found, out = samples_files(results_path), {}
    configs, counts = (_object(data, key, results_path) for key in ("configs", "n-samples"))
    for task, results in _object(data, "results", results_path).items():
        if task not in configs:  # a group's aggregate: its tasks have the samples
            continue
        if task not in found:
            raise MissingDataError(
                f"{results_path}: no samples_{task}_<date>.jsonl of the same run beside it; rerun with "
                "--output_path DIR --log_samples to write them"
            )
        if not isinstance(results, dict):
            raise DataError(
                f"{results_path}: key 'results.{task}' is {results!r}; expected an object of metrics"
            )
        lines = [line for _, line in read_jsonl(found[task], objects_only=True)[0]]
        for i, line in enumerate(lines, 1):
            _check_sample(line, f"{found[task]}:{i}")
        record = zeroshot_items.from_samples(None, lines, results)
        effective = counts.get(task).get("effective") if isinstance(counts.get(task), dict) else None
        if effective is not None and len(record["doc_id"]) != effective:
            raise DataError(
                f"{found[task]}: {len(record['doc_id'])} documents, but {results_path} reports "
                f"n-samples.{task}.effective = {effective}; expected the same run's files"
            )
        out[task] = record
    return out


def _object(data: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    """Returns ``data[key]`` when it is an object ({} when absent or null); else a DataError naming
    ``path`` and the key."""
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise DataError(f"{path}: key {key!r} is {value!r}; expected lm-eval's per-task object"[:300])
    return value or {}


# The keys of lm-eval's logged sample that pairing reads, the type each must have and what it is
SAMPLE_KEYS = {
    "doc_id": (int, "a document id (an integer)"),
    "doc_hash": (str, "lm-eval's hash of the document (a string)"),
    "filter": (str, "a filter name (a string)"),
    "metrics": (list, "a list of metric names"),
}


def _check_sample(line: dict[str, Any], where: str) -> None:
    """Raises DataError naming ``where`` (FILE:LINE) when a logged sample lacks a key pairing reads or
    holds a value of another type there."""
    for key, (kind, expected) in SAMPLE_KEYS.items():
        if key not in line:
            raise DataError(f"{where}: key {key!r} is missing; expected lm-eval's sample")
        value = line[key]
        typed = isinstance(value, kind) and not isinstance(value, bool)
        if not typed or (key == "metrics" and not all(isinstance(m, str) for m in value)):
            raise DataError(f"{where}: key {key!r} is {value!r}; expected {expected}"[:300])


def json_safe(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Returns lm-eval's in-memory samples of one task as plain JSON values (tuples as lists, objects as
    lm-eval's serialiser writes them), which lm-eval's sample writer turns into the same lines."""
    from lm_eval.utils import handle_non_serializable

    return json.loads(json.dumps(samples, default=handle_non_serializable, ensure_ascii=False))
