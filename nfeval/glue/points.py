"""Where a GLUE sweep point lives on disk and who computes it: ``<out>/glue/<task>/lr=<lr>/seed=<s>/``
(``base.sweep_points.point_dir`` with ``SWEEP``) holds ``result.json`` (written when the point finishes,
with its resume key) and the ``.lock`` file of ``nfeval.base.sweep_lock`` that a sweep holds while it
computes the point, so concurrent sweeps never compute a point twice."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..base import sweep_lock
from ..base.errors import DataError
from ..base.jsonio import load_json
from ..base.sweep_points import lr_key
from .recipe import ResolvedRecipe

RESULT = "result.json"
SWEEP = "glue"  # the sweep's folder in OUT: OUT/glue/<task>/lr=<lr>/seed=<s> (``base.sweep_points``)


@dataclass(frozen=True)
class Point:
    """One (task, lr, seed) point to run: its resolved recipe, folder and resume key."""

    task: str
    lr: float
    seed: int
    recipe: ResolvedRecipe
    directory: str
    key: dict

    @property
    def name(self) -> str:
        """Returns the point's name in progress lines and Slurm records: task/lr=…/seed=…."""
        return f"{self.task}/lr={lr_key(self.lr)}/seed={self.seed}"


def same(a: Any, b: Any) -> bool:
    """Returns whether ``a`` and ``b`` are equal as JSON (tuples and lists alike)."""
    return json.loads(json.dumps(a)) == json.loads(json.dumps(b))


def mismatch(path: str, stored: Mapping, key: Mapping) -> DataError:
    """Returns the error for a point file written for another checkpoint, data or recipe than ``key``."""
    diff = [k for k in key if not same(stored.get(k), key[k])]
    return DataError(
        f"{path}: written for a different {', '.join(diff)} than this run "
        "(use another --out folder, or delete the folder to recompute)"
    )


def finished_result(directory: str, key: Mapping) -> dict | None:
    """Returns the point's result when it is finished for exactly ``key``; None if not finished.

    Raises DataError when a result exists for a different checkpoint, data or recipe, or is not JSON.
    """
    path = os.path.join(directory, RESULT)
    if not os.path.isfile(path):
        return None
    result = load_json(path, hint="delete it to recompute the point")
    if not same(result.get("key"), key):
        raise mismatch(path, result.get("key") or {}, key)
    return result


def claim_and_run(directory: str, key: Mapping, wait: bool, run: Callable[[], dict]) -> dict | None:
    """Returns the point's result under its lock (``nfeval.base.sweep_lock``): read back when another
    sweep finished it meanwhile, else computed by ``run()``; None when another live sweep holds the lock
    and ``wait`` is False."""
    return sweep_lock.claim_and_run(directory, lambda: finished_result(directory, key), run, wait)


def finished_on_disk(out_dir: str, task: str, key: Mapping) -> list[dict]:
    """Returns every finished point of ``task`` under ``out_dir`` for the same checkpoint, data and recipe
    as ``key`` (any learning rate and seed): what concurrent sweeps into one folder computed together."""
    found = []
    for path in sorted(glob.glob(os.path.join(out_dir, SWEEP, task, "lr=*", "seed=*", RESULT))):
        result = load_json(path, hint="delete it to recompute the point")
        stored = result.get("key") or {}
        if all(same(stored.get(k), key[k]) for k in ("checkpoint", "data", "recipe")):
            found.append(result)
    return found
