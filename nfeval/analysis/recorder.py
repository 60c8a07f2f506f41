"""Gradient statistics during training (``nfeval train --grad-stats START:END``).

The trainer calls ``GradStatsRecorder.record(update)`` once per optimizer update, after the backward
pass(es) and before clipping and the optimizer step, with the update's 1-based number. Inside the
window it appends one line to ``grad_stats.jsonl`` in the run directory:

    {"update": 960, "values": {"fc2": [layer 0, layer 1, ...], "fc1": [...], ...}}

(the per-layer mean |∂L/∂W| of ``grads.per_layer_mean_abs``, L the mean token cross-entropy of the
global batch, as the trainer's backward computes it). Outside the window ``record`` returns at once.
``summary()`` averages each layer over the window's updates, for config.json. A line is written with
one ``os.write`` on an ``O_APPEND`` descriptor; readers skip a last line without its newline (a
killed write) and keep the newest line per update (a resumed run rewrites updates after its checkpoint).

The trainer creates the recorder after its step-time calibration (calibration steps must not be
recorded), with ``clip_window(parse_grad_stats(cfg.grad_stats), total_steps)``, on every process
(``write`` on rank 0 only), and puts ``summary()`` into config.json's ``train`` block.
"""

from __future__ import annotations

import json
import os
from typing import Any

from torch import nn

from ..base.errors import ConfigError, DataError, MissingDataError
from ..engine.config import ModelConfig, load_json
from ..engine.rundir import CONFIG
from .grads import per_layer_mean_abs

GRAD_STATS = "grad_stats.jsonl"
PAPER_WINDOW = "950:1000"  # updates 950–1000, the window of the paper's Figure 7 (Figure 3: early training)


def parse_grad_stats(spec: str) -> tuple[int, int]:
    """Returns (start, end), 1-based inclusive update numbers, of ``START:END``; ConfigError if malformed."""
    start, sep, end = str(spec).partition(":")
    try:
        window = (int(start), int(end))
    except ValueError:
        window = None
    if not sep or window is None or not 1 <= window[0] <= window[1]:
        raise ConfigError(
            f"grad_stats={spec!r}: expected START:END with 1 <= START <= END (e.g. {PAPER_WINDOW})"
        )
    return window


def clip_window(window: tuple[int, int], total_updates: int) -> tuple[int, int]:
    """Returns ``window`` clipped to updates 1..total_updates; a window wholly after the run becomes the
    run's last updates of the same length (so a short run still records its own late-training window)."""
    start, end = window
    if start > total_updates:
        start = max(1, total_updates - (end - start))
    return start, min(end, total_updates)


class GradStatsRecorder:
    """Appends per-layer mean |grad| to ``out_dir/grad_stats.jsonl`` at each update of ``window``.

    ``write=False`` on every process but rank 0 (under FSDP every rank must still call ``record``:
    reducing a sharded gradient is a collective).
    """

    def __init__(self, model: nn.Module, window: tuple[int, int], out_dir: str, write: bool = True):
        self.model, self.window, self.write = model, window, write
        self.path = os.path.join(out_dir, GRAD_STATS)

    def record(self, update: int) -> dict[str, list[float]] | None:
        """Logs the current ``.grad`` values if ``update`` (1-based) is inside the window; returns them
        (None outside the window and on processes that do not write)."""
        if not self.window[0] <= update <= self.window[1]:
            return None
        values = per_layer_mean_abs(self.model, lambda p: p.grad)
        if not self.write:
            return None
        line = json.dumps({"update": update, "values": values}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
        return values

    def summary(self) -> dict[str, Any]:
        """Returns {window, updates recorded, file, mean: {kind: per-layer mean over the window}}."""
        rows = read_grad_stats(self.path) if os.path.isfile(self.path) else []
        rows = [r for r in rows if self.window[0] <= r["update"] <= self.window[1]]
        return {
            "window": list(self.window),
            "updates": len(rows),
            "file": GRAD_STATS,
            "mean": average_rows(rows),
        }


def read_grad_stats(path: str) -> list[dict[str, Any]]:
    """Returns the rows of a grad_stats.jsonl, newest per update, in update order; DataError if malformed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1]:  # a killed write left a partial last line
        lines = lines[:-1]
    rows: dict[int, dict[str, Any]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            update, values = int(row["update"]), row["values"]
            if not isinstance(values, dict):
                raise TypeError
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise DataError(
                f"{path}, line {number}: expected a JSON object with 'update' and 'values'"
            ) from None
        rows[update] = {"update": update, "values": values}
    return [rows[u] for u in sorted(rows)]


def average_rows(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Returns, per kind, the per-layer mean over ``rows`` (kinds present in every row)."""
    if not rows:
        return {}
    kinds = [k for k in rows[0]["values"] if all(k in r["values"] for r in rows)]
    return {
        kind: [sum(layer) / len(rows) for layer in zip(*(r["values"][kind] for r in rows))] for kind in kinds
    }


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
