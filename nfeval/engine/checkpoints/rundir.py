"""The layout of a training run directory, and the one place that reads and writes it.

::

    RUN/
      config.json          model config + training config, data, provenance, compute so far
      tokenizer.json
      metrics.jsonl        one JSON line per log/validation point (appended; the last may be cut short)
      checkpoints/step_NNNNNNNN/   model.safetensors, config.json, tokenizer.json, training_state.pt
      model.safetensors    the final weights
      complete.json        written last: the run finished, with its final compute and fingerprint
    RUN.json               beside the folder, from a pipeline (reproduce, bakeoff, demo): the run's record
                           (budget, paired step-time ratio, status), written when the run is done

A run is finished only when ``complete.json`` exists: a run killed while writing its final weights
has none and resumes from its newest valid checkpoint. Every write goes through a temp name
(``.tmp*``) that readers never look at and the run's next writer deletes. The writer holds the folder's
lock (``writing``), so a second process never writes into a run being written.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import re
import shutil
import zipfile
from collections.abc import Callable
from typing import Any

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from ...base.artifacts import atomic_write_json, atomic_write_text
from ...base.errors import MissingDataError
from ...base.fingerprint import fingerprint_state_dict
from ...base.jsonio import load_json, read_jsonl
from ...base.sweep_lock import folder_lock
from . import torch_files

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
WEIGHTS = "model.safetensors"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
STATE = "training_state.pt"  # a torch zip file of tensors and plain values: loads with weights_only=True
COMPLETE = "complete.json"
TMP_PREFIX = ".tmp-"
TMP_GLOB = ".tmp*"  # ours, and the temp names of the libraries that write for us (safetensors: .tmpXXXXXX)
_STEP = re.compile(r"step_(\d{8})")


def checkpoint_dir(run_dir: str, step: int) -> str:
    """Returns the folder of the checkpoint at ``step``."""
    return os.path.join(run_dir, CHECKPOINTS, f"step_{step:08d}")


def write_checkpoint(
    run_dir: str, step: int, write_model: Callable[[str], Any], training_state: dict[str, Any]
) -> str:
    """Writes checkpoint ``step`` atomically: ``write_model(folder)`` (weights, config, tokenizer) and
    the training state into a temp folder, renamed into place; returns the checkpoint folder."""
    final = checkpoint_dir(run_dir, step)
    tmp = os.path.join(os.path.dirname(final), TMP_PREFIX + os.path.basename(final))
    shutil.rmtree(tmp, ignore_errors=True)
    write_model(tmp)
    torch_files.save(training_state, os.path.join(tmp, STATE))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def checkpoint_dirs(run_dir: str) -> list[str]:
    """Returns the run's ``checkpoints/step_*`` folders, oldest first (temp folders never included)."""
    folder = os.path.join(run_dir, CHECKPOINTS)
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if _STEP.fullmatch(n))
    return [os.path.join(folder, n) for n in names]


def checkpoint_problem(path: str, thorough: bool = False) -> str | None:
    """Returns why ``path`` is not a usable checkpoint (None if it is).

    Always checks that its weights and config exist and are not truncated; ``thorough`` (for
    resuming) also checks the training state and the weights against the fingerprint config.json
    records (reads every byte)."""
    for name in (WEIGHTS, CONFIG):
        if not os.path.isfile(os.path.join(path, name)):
            return f"{name} is missing"
    try:
        with safe_open(os.path.join(path, WEIGHTS), "pt") as f:
            names = list(f.keys())
    except (SafetensorError, OSError, ValueError) as e:
        return f"{WEIGHTS} is truncated or corrupt ({e})"
    try:
        recorded = load_json(os.path.join(path, CONFIG)).get("fingerprint")
    except ValueError as e:
        return str(e)
    state = os.path.join(path, STATE)
    if thorough:
        if not os.path.isfile(state):
            return f"{STATE} is missing"
        try:
            zipfile.ZipFile(state).close()
        except (zipfile.BadZipFile, OSError) as e:
            return f"{STATE} is truncated or corrupt ({e})"
    if thorough and recorded:
        if fingerprint_state_dict(load_file(os.path.join(path, WEIGHTS))) != recorded:
            return f"{WEIGHTS} does not match the fingerprint recorded in {CONFIG}"
    return None if names else f"{WEIGHTS} holds no tensors"


def newest_valid_checkpoint(run_dir: str, thorough: bool = False) -> tuple[str | None, list[str]]:
    """Returns (the newest usable checkpoint folder or None, a note for each newer one that was skipped)."""
    skipped = []
    for path in reversed(checkpoint_dirs(run_dir)):
        problem = checkpoint_problem(path, thorough)
        if problem is None:
            return path, skipped
        skipped.append(f"{path}: skipped, {problem}")
    return None, skipped


def record_path(run_dir: str) -> str:
    """Returns the path of the record a pipeline keeps beside the run folder: ``RUN.json`` for ``RUN``."""
    return os.path.normpath(run_dir) + ".json"


def is_run_dir(path: str) -> bool:
    """Returns whether ``path`` is a training run (it has metrics or a checkpoints folder)."""
    return os.path.isfile(os.path.join(path, METRICS)) or os.path.isdir(os.path.join(path, CHECKPOINTS))


def completion(run_dir: str) -> dict[str, Any] | None:
    """Returns the completion record of a finished run, or None if it has not finished (a record
    whose final weights are gone does not count). A run written before ``complete.json`` existed
    counts as finished by ``legacy_completion``'s stricter test."""
    path = os.path.join(run_dir, COMPLETE)
    if not os.path.isfile(os.path.join(run_dir, WEIGHTS)):
        return None
    if not os.path.isfile(path):
        return legacy_completion(run_dir)
    return load_json(path)


def legacy_completion(run_dir: str) -> dict[str, Any] | None:
    """Returns the completion record of a run finished by nfeval 0.1 (no ``complete.json``), else None.

    That version wrote the final weights, then ``config.json`` with their fingerprint and the final
    compute. Finished means: the fingerprint in config.json is the one stored in the weights' header
    and the compute reached the planned steps. A kill during that final save leaves the run's
    start-of-run config.json (no fingerprint, step 0), which fails the test, so the run resumes.
    """
    config_path = os.path.join(run_dir, CONFIG)
    if not os.path.isfile(config_path):
        return None
    meta = load_json(config_path)
    compute, train = meta.get("compute") or {}, meta.get("train") or {}
    try:
        with safe_open(os.path.join(run_dir, WEIGHTS), framework="pt") as f:
            stored = (f.metadata() or {}).get("fingerprint")
    except (SafetensorError, OSError):
        return None
    if "parallel" in train:  # written by a trainer that writes complete.json: its absence means unfinished
        return None
    steps, total = compute.get("steps"), train.get("total_steps")
    if not meta.get("fingerprint") or meta["fingerprint"] != stored or not steps or steps != total:
        return None
    vals = read_metrics(run_dir, "val")
    val_loss = vals[-1].get("val_loss") if vals else None
    return {
        "fingerprint": stored,
        "step": steps,
        **{k: compute.get(k) for k in ("tokens", "wall_s", "flops")},
        "total_steps": total,
        "val_loss": val_loss,
        "val_ppl": math.exp(min(val_loss, 700)) if isinstance(val_loss, (int, float)) else None,
        "compute": compute,
        "legacy": True,
    }


def mark_complete(run_dir: str, record: dict[str, Any]) -> None:
    """Writes the completion record, the last file of a run (atomically)."""
    atomic_write_json(os.path.join(run_dir, COMPLETE), record)


def writing(run_dir: str, writer: bool = True) -> contextlib.AbstractContextManager:
    """Returns the run folder's lock (``sweep_lock.folder_lock``: another process holding it is an
    OutputError naming it) for its writer; nothing for a rank that does not write (``writer`` False)."""
    return folder_lock(run_dir) if writer else contextlib.nullcontext()


def clean_temp_files(run_dir: str) -> list[str]:
    """Deletes temp files and folders a killed writer left in the run; returns what was deleted."""
    stale = glob.glob(os.path.join(run_dir, TMP_GLOB))
    stale += glob.glob(os.path.join(run_dir, CHECKPOINTS, TMP_GLOB))
    stale += glob.glob(os.path.join(run_dir, CHECKPOINTS, "step_*", TMP_GLOB))
    for path in stale:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):  # a probe its process deleted meanwhile
                os.remove(path)
    return stale


def discard_unstarted(run_dir: str, also: tuple[str, ...] = ()) -> list[str]:
    """Deletes what a run that saved no valid checkpoint wrote (config, tokenizer, metrics, temp files
    and the files named in ``also``), so the folder reads as holding no run and the same command starts
    afresh, under new settings too; returns what was deleted. A run with a checkpoint is left as it is."""
    if newest_valid_checkpoint(run_dir)[0] is not None:
        return []
    deleted = clean_temp_files(run_dir)
    for name in (CONFIG, TOKENIZER, METRICS, *also):
        path = os.path.join(run_dir, name)
        if os.path.isfile(path):
            os.remove(path)
            deleted.append(path)
    folder = os.path.join(run_dir, CHECKPOINTS)
    if os.path.isdir(folder) and not os.listdir(folder):
        os.rmdir(folder)
        deleted.append(folder)
    return deleted


def metric_records(path: str) -> tuple[list[tuple[int, Any]], list[str]]:
    """Returns ((line number, parsed JSON) for each non-empty line of a metrics file, warnings).

    An unparsable *last* line (a writer killed mid-line) is dropped with a warning; any other bad
    line raises DataError naming the file and line."""
    if not os.path.isfile(path):
        raise MissingDataError(f"{path}: not found (expected the {METRICS} that nfeval train writes)")
    return read_jsonl(path, tolerate_torn_last_line=True)


def read_metrics(run_dir: str, kind: str | None = None) -> list[dict[str, Any]]:
    """Returns the run's metrics rows (of ``kind`` if given), tolerating a cut-off last line."""
    path = os.path.join(run_dir, METRICS)
    if not os.path.isfile(path):
        return []
    rows = [r for _, r in metric_records(path)[0] if isinstance(r, dict)]
    return [r for r in rows if kind is None or r.get("kind") == kind]


def truncate_metrics(run_dir: str, last_step: int) -> None:
    """Drops metrics lines logged after ``last_step`` (by a run killed after its last checkpoint)."""
    if not os.path.isfile(os.path.join(run_dir, METRICS)):
        return
    keep = [r for r in read_metrics(run_dir) if r.get("step", 0) <= last_step]
    atomic_write_text(os.path.join(run_dir, METRICS), "".join(json.dumps(r) + "\n" for r in keep))
