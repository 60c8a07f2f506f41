"""``nfeval train --tensorboard [DIR]``: the scalars of ``metrics.jsonl`` (and gradient statistics) as
TensorBoard events.

TensorBoard is an optional extra (``pip install nfeval[tensorboard]``); ``check_available`` fails
before any work when it is missing. A resumed run purges the events logged after its checkpoint, as
``metrics.jsonl`` is truncated there.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ...base.errors import ConfigError

DEFAULT_DIR = "tensorboard"  # inside the run directory
# metrics.jsonl field -> TensorBoard tag
SCALARS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens_per_s": "train/tokens_per_s",
    "mfu": "train/mfu",
    "val_loss": "valid/loss",
    "val_ppl": "valid/ppl",
}


def check_available(source: str = "--tensorboard") -> None:
    """Raises ConfigError when the ``tensorboard`` package (needed by torch.utils.tensorboard) is missing."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            f"{source}: the tensorboard package is not installed (pip install 'nfeval[tensorboard]')"
        )


def log_dir(setting: str, out_dir: str) -> str:
    """Returns the event folder of a ``tensorboard`` setting: ``""`` means ``RUN/tensorboard``."""
    return setting or os.path.join(out_dir, DEFAULT_DIR)


class TensorBoardLog:
    """Writes metrics rows (``write``) and per-layer gradient statistics (``write_grad_stats``)."""

    def __init__(self, directory: str, first_step: int = 0):
        check_available()
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops events a killed run logged after the checkpoint this run resumes from
        self.writer = SummaryWriter(directory, purge_step=first_step or None)

    def write(self, row: dict[str, Any]) -> None:
        """Logs the row's scalars (those of ``SCALARS`` it has) at its ``step``."""
        for field, tag in SCALARS.items():
            if row.get(field) is not None:
                self.writer.add_scalar(tag, row[field], row["step"])
        self.writer.flush()

    def write_grad_stats(self, update: int, values: dict[str, list[float]]) -> None:
        """Logs {kind: [mean |grad| per layer]} as ``grad_stats/KIND/layer_N`` at ``update``."""
        for kind, per_layer in values.items():
            for layer, value in enumerate(per_layer):
                self.writer.add_scalar(f"grad_stats/{kind}/layer_{layer}", value, update)

    def close(self) -> None:
        """Flushes and closes the event file."""
        self.writer.close()
