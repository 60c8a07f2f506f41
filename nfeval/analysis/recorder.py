"""A finished run's gradient statistics (``nfeval analyze grads --run RUN``): the grad_stats.jsonl that
``engine.training.grad_stats.GradStatsRecorder`` wrote during training, averaged over its window."""

from __future__ import annotations

import os
from typing import Any

from ..base.errors import DataError, MissingDataError
from ..base.jsonio import load_json
from ..engine.checkpoints.rundir import CONFIG
from ..engine.model.config import ModelConfig
from ..engine.training.grad_stats import GRAD_STATS, average_rows, read_grad_stats


def check_run(run_dir: str) -> str:
    """Returns the run's grad_stats.jsonl path; MissingDataError naming what is missing otherwise."""
    if not os.path.isdir(run_dir):
        raise MissingDataError(f"{run_dir}: no such run directory")
    path = os.path.join(run_dir, GRAD_STATS)
    if not os.path.isfile(path):
        raise MissingDataError(
            f"{path}: not found: the run was trained without --grad-stats START:END "
            "(or compute at a checkpoint with --ckpt RUN --batches N)"
        )
    return path


def read_run(run_dir: str) -> dict[str, Any]:
    """Returns a run's gradient statistics: {name, info, window, updates, values (per-layer means)}."""
    path = check_run(run_dir)
    rows = read_grad_stats(path)
    if not rows:
        raise DataError(f"{path}: no rows (training stopped before the --grad-stats window)")
    info: dict[str, Any] = {"source": os.path.abspath(run_dir)}
    config_path = os.path.join(run_dir, CONFIG)
    if os.path.isfile(config_path):
        config = load_json(config_path)
        model = config.get("model", {})
        info.update(
            n_layer=model.get("n_layer"),
            fingerprint=config.get("fingerprint"),
            seed=config.get("provenance", {}).get("seed"),
            data_fingerprint=config.get("provenance", {}).get("data_fingerprint"),
        )
        if model:
            info["architecture"] = ModelConfig.from_dict(model, source=config_path).architecture
    return {
        "name": os.path.basename(os.path.normpath(run_dir)),
        "info": info,
        "window": [rows[0]["update"], rows[-1]["update"]],
        "updates": len(rows),
        "values": average_rows(rows),
    }
