"""The one definition of "time to the baseline's best": how every report (``nfeval compare``,
``nfeval leaderboard --runs``, the demo) clocks the time a run needed to reach the baseline's best
validation perplexity, as a fraction of the baseline's own time to it.

Paired clock, when the runs' records (``rundir.record_path``: the record reproduce, bakeoff and the demo
keep beside a run folder) hold each run's paired step-time ratio to one reference run: a run's time at
step s is s × its ratio (the reference's is 1). The ratio was measured before training in interleaved
bursts on one machine, so the machine's load cancels; it is the ratio the runs' equal-time budgets were
fixed from. Measured clock, otherwise: the training seconds each run logged, which count whatever else
the machine was doing while each run trained.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ..base.errors import DataError
from ..base.jsonio import load_json
from ..engine.checkpoints import rundir

PAIRED = "paired"
MEASURED = "measured"
DEFINITIONS = {
    PAIRED: "time = steps × each run's paired step-time ratio, measured before training (from the runs' "
    "records)",
    MEASURED: "time = measured training seconds (the runs' records hold no paired step-time ratio)",
}


def read_timing(run_dir: str) -> dict[str, Any] | None:
    """Returns what the record beside ``run_dir`` says of its step time: {"run": the name the record
    gives the run, "ratio": its paired step-time ratio (None: it was not timed against another run),
    "against": the run it was timed against}; None when the run has no record. A malformed ratio is a
    DataError naming the file and the key."""
    path = rundir.record_path(run_dir)
    if not os.path.isfile(path):
        return None
    record = load_json(path)
    name = record.get("name") or record.get("key")
    step_ratio = record.get("step_ratio")
    if step_ratio is None:
        return {"run": name, "ratio": None, "against": None}
    if not isinstance(step_ratio, dict):
        raise DataError(f"{path}: key 'step_ratio' is {step_ratio!r}; expected a step-time ratio record")
    ratio, against = step_ratio.get("ratio"), step_ratio.get("baseline")
    number = isinstance(ratio, (int, float)) and not isinstance(ratio, bool)
    if not number or not math.isfinite(ratio) or ratio <= 0:
        raise DataError(f"{path}: key 'step_ratio.ratio' is {ratio!r}; expected a positive number")
    if not isinstance(against, str):
        raise DataError(
            f"{path}: key 'step_ratio.baseline' is {against!r}; expected the name of the run it was timed "
            "against"
        )
    return {"run": name, "ratio": float(ratio), "against": against}


def paired_ratios(timings: dict[str, dict[str, Any] | None]) -> dict[str, float] | None:
    """Returns {run: its paired step-time ratio} when every run's timing (``read_timing``) gives one to a
    single reference run (the reference itself: ratio 1, or no ratio); None otherwise: the runs are
    clocked by their measured seconds."""
    if any(t is None for t in timings.values()):
        return None
    references = {t["against"] for t in timings.values() if t["ratio"] is not None}
    if len(references) != 1:
        return None
    (reference,) = references
    ratios = {}
    for name, t in timings.items():
        if t["ratio"] is None and t["run"] != reference:
            return None  # a run timed against nothing, and not the reference: no common clock
        ratios[name] = 1.0 if t["ratio"] is None else t["ratio"]
    return ratios


def fraction(
    reached: dict[str, Any] | None,
    target: dict[str, Any],
    ratios: dict[str, float] | None,
    run: str,
    base: str,
) -> float | None:
    """Returns the fraction of the baseline's time to its best PPL that ``run`` needed to reach that PPL.

    ``reached``: where the run reached it (``compare.crossing``; None: it did not); ``target``: where the
    baseline ``base`` reached its best (step, wall_s). With paired step-time ratios (``ratios``:
    ``paired_ratios``): the run's step × its ratio ÷ (the baseline's step × its ratio); without (None):
    the run's training seconds ÷ the baseline's. None when the run did not reach it."""
    if reached is None:
        return None
    if ratios is None:
        return reached["wall_s"] / target["wall_s"]
    return reached["step"] * ratios[run] / (target["step"] * ratios[base])
