"""The analyses the pipelines run on their runs: ``nfeval analyze``'s own library call
(``analysis.runs.analyze``), each writing its PNG and JSON and not redone once its PNG exists, and the
rising-LR stability test's settings at a scale (each architecture's initialisation on the runs' model
config, in the device's lowest autocast precision). ``reproduce`` (Figures 3–6) and ``bakeoff`` (each
candidate's stability) call them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from ..analysis import runs as analysis_runs
from ..analysis.stability import StabilitySettings, lowest_precision
from ..base.jsonio import load_json
from .scales import Scale


def analyze(options: analysis_runs.Options, png: str, log: Callable[[str], None]) -> dict[str, Any]:
    """Runs the analysis ``options`` describe into PNG unless PNG exists (and, for a stability test, holds
    a result of the same divergence criterion); returns the JSON beside it."""
    path = os.path.splitext(png)[0] + ".json"
    if not os.path.isfile(png) or _other_criterion(options, path):
        log(f"nfeval analyze {options}")
        analysis_runs.analyze(options, png)
    return load_json(path)


def _other_criterion(options: analysis_runs.Options, path: str) -> bool:
    """Returns whether the stored stability test at ``path`` judged divergence otherwise than ``options``
    would (an older result: its updates survived are not comparable)."""
    if not isinstance(options, analysis_runs.StabilityOptions) or not os.path.isfile(path):
        return False
    return load_json(path).get("criterion") != options.settings.criterion()


def stability_settings(scale: Scale, device: str) -> StabilitySettings:
    """Returns the rising-LR stability test's settings at ``scale`` on ``device`` ("auto": CUDA when
    present), in that device's lowest autocast precision (``settings.autocast``)."""
    device = device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    batch, seq = scale.stability_batch
    return StabilitySettings(
        updates=scale.stability_updates,
        batch_size=batch,
        seq_len=seq,
        autocast=lowest_precision(device),
        device=device,
    )
