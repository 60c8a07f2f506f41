"""The demo's stages and its one progress line per stage: what the stage does, how long the demo has
run, and an estimate of what is left.

The estimate starts from each stage's share of the time target (``--minutes``) and is corrected as the
demo goes: the time the finished stages took over the time they were planned for (the pace) scales what
is left, and a stage whose cost is known once its inputs are (training, after the step budget is fixed)
is planned at that cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# (stage, share of the time target) in the order they run; the shares sum to 1
STAGES = (
    ("data", 0.02),  # the embedded slices and the corpus cloze task, checked and laid out
    ("tokenizer", 0.03),
    ("step-time ratio", 0.05),
    ("training", 0.60),
    ("comparison", 0.0),
    ("zero-shot", 0.12),
    ("GLUE", 0.15),
    ("leaderboard", 0.03),
)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


class StagePlan:
    """Prints the stage lines; ``plan(stage, seconds)`` replaces a stage's planned time."""

    def __init__(self, target_s: float, log: Callable[[str], None]) -> None:
        self.planned = {name: share * target_s for name, share in STAGES}
        self.log = log
        self.start = time.time()
        self.done: list[str] = []
        self.took: dict[str, float] = {}
        self._current: tuple[str, float] | None = None

    def plan(self, stage: str, seconds: float) -> None:
        self.planned[stage] = seconds

    def pace(self) -> float:
        """Returns the time the finished stages took over their planned time (1 until a minute of the plan
        is behind), within [0.5, 4]."""
        planned = sum(self.planned[s] for s in self.done)
        if planned < 60:
            return 1.0
        return min(4.0, max(0.5, sum(self.took[s] for s in self.done) / planned))

    def left(self, stage: str) -> float:
        """Returns the estimated seconds from the start of ``stage`` to the end of the demo."""
        names = [name for name, _ in STAGES]
        return self.pace() * sum(self.planned[s] for s in names[names.index(stage) :])

    def begin(self, stage: str, what: str) -> None:
        """Ends the stage in progress and prints the line of ``stage``."""
        self.end()
        names = [name for name, _ in STAGES]
        elapsed = time.time() - self.start
        self.log(
            f"stage {names.index(stage) + 1}/{len(names)} {stage}: {what} "
            f"[{minutes(elapsed)} so far, about {minutes(self.left(stage))} left]"
        )
        self._current = (stage, time.time())

    def end(self) -> None:
        if self._current is not None:
            stage, t0 = self._current
            self.took[stage] = time.time() - t0
            self.done.append(stage)
            self._current = None
