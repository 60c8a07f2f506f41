"""Per-example GLUE dev predictions of a sweep point, kept so two models can be compared paired.

Each point writes ``predictions.json`` beside its ``result.json`` (atomically, whenever an epoch becomes
the one the point reports: the best so far, or the latest under ``--select last_epoch``), so the file
always holds the reported epoch's predictions, also after a resume:

    {"task", "lr", "seed", "epoch", "data": {split: sha256},
     "splits": {"dev": {"labels": [...], "preds": [...]}, ...}, "nfeval": {"provenance": ...}}

``preds`` are class indices (STS-B: scores), in dev-file order, so example i is the file's i-th row.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..base.artifacts import atomic_write_json, provenance
from ..base.errors import DataError, MissingDataError

PREDICTIONS = "predictions.json"
TEST_PREDICTIONS = "test_predictions.json"  # a point's test-split predictions (--predict-test)


def is_reported(history: Sequence[Mapping], main: str, select: str) -> bool:
    """Returns whether the latest epoch of ``history`` is, for now, the one the point reports: the
    latest under ``last_epoch``; under ``best_epoch`` the first epoch with the highest main metric."""
    if select == "last_epoch":
        return True
    latest = history[-1]["metrics"][main]
    return all(latest > h["metrics"][main] for h in history[:-1])


def write(
    directory: str, task: str, lr: float, seed: int, epoch: int, enc, preds: Mapping[str, Sequence]
) -> str:
    """Writes the epoch's dev predictions (with their labels) to ``directory/predictions.json``."""
    path = os.path.join(directory, PREDICTIONS)
    splits = {
        name: {"labels": list(labels), "preds": list(preds[name])} for name, (_, labels) in enc.dev.items()
    }
    atomic_write_json(
        path,
        {
            "task": task,
            "lr": lr,
            "seed": seed,
            "epoch": epoch,
            "data": enc.fingerprint,
            "splits": splits,
            "nfeval": {"provenance": provenance()},
        },
    )
    return path


def read(directory: str, epoch: int | None = None) -> dict[str, Any]:
    """Returns a point's predictions; MissingDataError when absent, DataError when not for ``epoch``."""
    path = os.path.join(directory, PREDICTIONS)
    if not os.path.isfile(path):
        raise MissingDataError(
            f"{path}: no per-example predictions for this point (finished before they were kept?); "
            "delete its result.json and rerun `nfeval glue` to write them"
        )
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
        raise DataError(f"{path}: key 'splits' is missing; expected {{split: {{labels, preds}}}}")
    if epoch is not None and data.get("epoch") != epoch:
        raise DataError(f"{path}: holds epoch {data.get('epoch')}, but result.json reports epoch {epoch}")
    return data
