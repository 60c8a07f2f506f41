"""One point of a tune: its folder (``DIR/points/<preset>/lr=<lr>/seed=<s>/``, ``base.sweep_points``), its
config (the grid's base config with the point's preset, lr, seed and the tune's budget), the key that
decides its result, and reading it back when finished. ``nfeval.tune.sweep`` trains the points.

A point is finished when its ``point.json`` (written last, holding the point's key) exists. The key
names the data and tokenizer files by what they hold (``engine.training.input_fingerprints``), not by
path, so a tune folder and its data may move; a point folder written under a different config is
refused, and an older nfeval's key of paths is accepted in place and rewritten.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..base.artifacts import atomic_write_json
from ..base.errors import ConfigError
from ..base.jsonio import load_json
from ..engine.training.input_fingerprints import INPUT_PATH_FIELDS, recorded_input_fingerprints
from ..engine.training.train_config import TrainConfig, resolved_warmup
from . import results as tune_results

POINTS = "points"  # the tune's points folder in DIR: DIR/points/<preset>/lr=<lr>/seed=<s>
POINT = "point.json"
# Fields that do not change a point's result: left out of the key a finished point is checked against.
NOT_IN_KEY = ("device", "progress", "log_interval", "ckpt_interval", "lr_from")


def point_config(
    base: TrainConfig, preset: str, lr: float, seed: int, budget: tuple[str, float]
) -> TrainConfig:
    """Returns ``base`` with the point's preset, lr and seed and the tune's budget as its only budget."""
    budgets = dict.fromkeys(tune_results.BUDGET_FIELDS.values()) | {budget[0]: budget[1]}
    return dataclasses.replace(base, preset=preset, lr=lr, seed=seed, progress=False, lr_from=None, **budgets)


def point_key(cfg: TrainConfig, inputs: dict[str, str | None]) -> dict[str, Any]:
    """Returns what decides a point's result: its config's fields, its input files named by what they
    hold (``inputs``: ``input_fingerprints(cfg)``) rather than by path, so a moved or copied tune folder
    or data keeps its finished points and a file whose content changed does not. The warm-up is the
    number the run records (its recipe's when the config leaves it unset), so a point keyed before the
    recipe's warm-up became the unset default, or read back from a killed run's config, still matches."""
    fields = dataclasses.asdict(cfg) | {"warmup": resolved_warmup(cfg)}
    return {k: v for k, v in fields.items() if k not in NOT_IN_KEY + INPUT_PATH_FIELDS} | {"inputs": inputs}


def _in_key_form(stored: dict[str, Any], key: dict[str, Any], cfg: TrainConfig) -> dict[str, Any]:
    """Returns ``stored`` as a ``point_key``. An older nfeval's key held the input paths instead of
    ``inputs``: it counts as today's when those paths are the current ones (the folder was not moved)."""
    if "inputs" in stored:
        return {k: v for k, v in stored.items() if k not in INPUT_PATH_FIELDS}
    moved = {n: stored.get(n) for n in INPUT_PATH_FIELDS if stored.get(n) != getattr(cfg, n)}
    rest = {k: v for k, v in stored.items() if k not in INPUT_PATH_FIELDS}
    return rest | moved | {"inputs": key["inputs"]}  # the moved paths stay: they differ from the key


def _check_key(path: str, stored: dict[str, Any], key: dict[str, Any], cfg: TrainConfig) -> None:
    old = "inputs" not in stored
    stored = _in_key_form(stored, key, cfg)
    diff = sorted(k for k in set(stored) | set(key) if k not in NOT_IN_KEY and stored.get(k) != key.get(k))
    if diff:
        names = ", ".join("data or tokenizer contents" if k == "inputs" else k for k in diff)
        hint = " (an older nfeval's key, of paths: rerun once at the old paths to key it by content)"
        raise ConfigError(
            f"{path}: this point was trained with different {names} than now{hint if old else ''}; use "
            "another --out, or delete the point's folder to recompute it"
        )


def finished_point(directory: str, cfg: TrainConfig, key: dict[str, Any]) -> dict[str, Any] | None:
    """Returns a finished point's result (its point.json, ``run_dir`` where it is now) or None; a point
    folder written for another config is a ConfigError (finished or killed), never a silent mix."""
    marker = os.path.join(directory, POINT)
    if os.path.isfile(marker):
        result = load_json(marker, hint="delete the point's folder to recompute it")
        stored = result.get("key") or {}
        _check_key(marker, stored, key, cfg)
        if "inputs" not in stored:  # an older nfeval's key of paths: rewritten, so the folder can move
            atomic_write_json(marker, result | {"key": key})
        return result | {"run_dir": directory}
    saved = os.path.join(directory, "config.json")  # a killed point: train's own record of its config
    if os.path.isfile(saved):
        config = ((load_json(saved).get("train") or {}).get("config")) or {}
        recorded = recorded_input_fingerprints(directory)
        _check_key(saved, config if recorded is None else config | {"inputs": recorded}, key, cfg)
    return None
