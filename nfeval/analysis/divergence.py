"""When an update of the rising-LR stability test (Figure 5) has diverged, told apart from batch noise.

The paper states no criterion (it plots loss against the rising LR). Ours, per run:

- a non-finite loss or gradient norm diverges at once;
- the first ``noise_updates`` updates, where the LR is too small to move the model (1e-5 and up), measure
  the batch noise: the mean m and standard deviation σ of their losses (each update sees another batch);
- after them, an update diverges when the running median of the last ``smoothing`` losses exceeds
  m + ``noise_multiple`` × σ. The median ignores a single bad batch; the tolerance grows with the batch
  noise, so a small batch (4 × 64 tokens: σ of tenths of a nat) does not "diverge" at update 1–3, as a
  fixed 0.1-nat tolerance above the first loss did.

A test of no more than ``noise_updates`` updates detects only non-finite values.
"""

from __future__ import annotations

import math
import statistics
from typing import Any


def criterion(noise_updates: int, noise_multiple: float, smoothing: int) -> dict[str, Any]:
    """Returns the criterion's record (its numbers and one sentence), as a result states it."""
    return {
        "noise_updates": noise_updates,
        "noise_multiple": noise_multiple,
        "smoothing": smoothing,
        "text": f"non-finite loss/gradient, or the running median of {smoothing} losses above the mean of "
        f"the first {noise_updates} updates' losses + {noise_multiple:g} × their std (the batch noise)",
    }


class DivergenceDetector:
    """Reads a run's losses and gradient norms one update at a time (``check``); see the module docstring."""

    def __init__(self, noise_updates: int, noise_multiple: float, smoothing: int):
        self.noise_updates, self.noise_multiple, self.smoothing = noise_updates, noise_multiple, smoothing
        self.losses: list[float] = []

    def noise(self) -> dict[str, float] | None:
        """Returns {updates, mean, std, tolerance} of the noise window once it is complete, else None."""
        if len(self.losses) < self.noise_updates:
            return None
        first = self.losses[: self.noise_updates]
        std = statistics.stdev(first)
        return {
            "updates": self.noise_updates,
            "mean": statistics.fmean(first),
            "std": std,
            "tolerance": self.noise_multiple * std,
        }

    def check(self, loss: float, grad_norm: float) -> str | None:
        """Takes the next update's loss and gradient norm; returns why it diverged, or None."""
        if not math.isfinite(loss):
            return "non-finite loss"
        if not math.isfinite(grad_norm):
            return "non-finite gradient"
        self.losses.append(loss)
        if len(self.losses) <= self.noise_updates:
            return None
        noise = self.noise()
        smoothed = statistics.median(self.losses[-self.smoothing :])
        if smoothed > noise["mean"] + noise["tolerance"]:
            return (
                f"running median loss {smoothed:.3f} above {noise['mean']:.3f} + {self.noise_multiple:g} × "
                f"{noise['std']:.3f} (the first {self.noise_updates} updates' mean + the batch noise)"
            )
        return None
