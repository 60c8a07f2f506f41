"""Gradient statistics during training (``nfeval train --grad-stats START:END``), and the per-layer
statistic itself (``per_layer_mean_abs``, also what ``nfeval analyze grads`` computes at a checkpoint).

The trainer calls ``GradStatsRecorder.record(update)`` once per optimizer update, after the backward
pass(es) and before clipping and the optimizer step, with the update's 1-based number. Inside the
window it appends one line to ``grad_stats.jsonl`` in the run directory:

    {"update": 960, "values": {"fc2": [layer 0, layer 1, ...], "fc1": [...], ...}}

(the per-layer mean |∂L/∂W| of ``per_layer_mean_abs``, L the mean token cross-entropy of the
global batch, as the trainer's backward computes it). Each statistic is a float32 and is written as
the shortest decimal that reads back as that float32 (``row_line``), about half the digits of its
float64 repr: a committed report keeps thousands of these rows. ``read_grad_stats`` rounds each value
it reads to float32 again, so a row reads back as exactly the floats that were recorded. Outside the
window ``record`` returns at once.
``summary()`` averages each layer over the window's updates, for config.json. A line is written with
one ``base.jsonio.append_line``; readers skip a last line without its newline (a
killed write) and keep the newest line per update (a resumed run rewrites updates after its checkpoint).

The trainer creates the recorder after its step-time calibration (calibration steps must not be
recorded), with ``clip_window(parse_grad_stats(cfg.grad_stats), total_steps)`` (both in
``train_config``, beside the field they read), on every process (``write`` on rank 0 only), and puts
``summary()`` into config.json's ``train`` block.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ...base.errors import DataError
from ...base.jsonio import append_line, read_jsonl

WEIGHT_KINDS = ("fc1", "fc2", "q", "k", "v", "out_proj")
GAIN_KINDS = ("attn_out_norm", "ffn_hidden_norm", "head_gain", "resid_gain")


def _gain_tensors(block: nn.Module) -> dict[str, torch.Tensor | None]:
    return {
        "attn_out_norm": block.attn_out_norm.weight if block.attn_out_norm is not None else None,
        "ffn_hidden_norm": block.ffn_hidden_norm.weight if block.ffn_hidden_norm is not None else None,
        "head_gain": block.attn.head_gain,
        "resid_gain": block.resid_gain,
    }


def tracked_parameters(model: nn.Module) -> list[torch.Tensor]:
    """Returns every parameter ``per_layer_mean_abs`` reads (one list, block by block)."""
    params = []
    for block in model.blocks:
        params += [block.attn.qkv.weight, block.attn.out_proj.weight, block.fc1.weight, block.fc2.weight]
        params += [t for t in _gain_tensors(block).values() if t is not None]
    return params


def per_layer_mean_abs(
    model: nn.Module, grad_of: Callable[[torch.Tensor], torch.Tensor]
) -> dict[str, list[float]]:
    """Returns {kind: [mean |grad| of layer 0, layer 1, ...]} where ``grad_of(param)`` gives a gradient."""

    def mean_abs(g: torch.Tensor) -> torch.Tensor:
        m = g.detach().abs().float().mean()
        return m.full_tensor() if hasattr(m, "full_tensor") else m  # a sharded (FSDP) gradient

    stats: dict[str, list[torch.Tensor]] = {}
    for block in model.blocks:
        q, k, v = grad_of(block.attn.qkv.weight).chunk(3)
        weights = {
            "fc1": grad_of(block.fc1.weight),
            "fc2": grad_of(block.fc2.weight),
            "q": q,
            "k": k,
            "v": v,
            "out_proj": grad_of(block.attn.out_proj.weight),
        }
        gains = {kind: grad_of(t) for kind, t in _gain_tensors(block).items() if t is not None}
        for kind, g in {**weights, **gains}.items():
            stats.setdefault(kind, []).append(mean_abs(g))
    values = torch.stack([torch.stack(v) for v in stats.values()]).tolist()  # one device sync
    return dict(zip(stats, values))


GRAD_STATS = "grad_stats.jsonl"


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
        append_line(self.path, row_line(update, values))
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


def float32_text(value: float) -> str:
    """Returns the JSON text of ``value`` (a float32's value) that reads back, through float64 and a
    rounding to float32, as that float32: its shortest float32 decimal, or 9 significant digits (always
    enough) where the shortest one would not survive the read; ``json.dumps``'s text when not finite."""
    single = np.float32(value)
    if not np.isfinite(single):
        return json.dumps(float(value))
    shortest = str(single)
    return shortest if np.float32(float(shortest)) == single else f"{float(single):.9g}"


def row_line(update: int, values: dict[str, list[float]]) -> str:
    """Returns the grad_stats.jsonl line of ``update``'s ``values`` ({kind: per-layer float32 values}),
    each value written by ``float32_text``."""
    kinds = ", ".join(
        f"{json.dumps(kind)}: [{', '.join(float32_text(v) for v in layer)}]" for kind, layer in values.items()
    )
    return f'{{"update": {int(update)}, "values": {{{kinds}}}}}\n'


def read_grad_stats(path: str) -> list[dict[str, Any]]:
    """Returns the rows of a grad_stats.jsonl, newest per update, in update order, each value rounded to
    float32 (what was recorded: ``row_line``); DataError if malformed."""
    records, _ = read_jsonl(path, tolerate_torn_last_line=True)  # a killed write left a partial last line
    rows: dict[int, dict[str, Any]] = {}
    for number, row in records:
        try:
            update, values = int(row["update"]), row["values"]
            values = {kind: np.asarray(layer, dtype=np.float32).tolist() for kind, layer in values.items()}
        except (KeyError, TypeError, ValueError, AttributeError):
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
