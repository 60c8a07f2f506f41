"""Figure 7's window: the updates whose gradients Figure 7 averages, at the paper's phase of training.

The paper averages updates 950–1000 of its 125M runs: fairseq's ``examples/normformer`` trains them
with ``--warmup-updates 750 --total-num-update 572204``, so the window lies 200–250 updates past the end
of warm-up, with the LR at its peak (99.96% of it at update 1000) and the run 0.17% done. A short run
cannot copy the update numbers (updates 950–1000 of a 1000-update run sit at the end of the decay, LR
near 0), so the window is defined relative to warm-up: the scale's ``fig7_after_warmup`` = (a, b) gives
updates W + a … W + b, W being the *later* warm-up end of the compared runs (the runs of one comparison
train different step counts at equal time, and a warm-up given as a fraction of the run ends a few
updates apart). Every run of the comparison is read over the same update numbers, of the same length;
a run whose schedule ends before the window or that did not record all of it is refused, by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...base.jsonio import load_json
from ...engine.training.budget import lr_at, warmup_steps
from ...engine.training.train_config import TrainConfig

# fairseq examples/normformer (125M): --warmup-updates 750 --total-num-update 572204; Figure 7 reads 950–1000
PAPER = {"updates": (950, 1000), "warmup": 750, "total": 572204}


@dataclass(frozen=True)
class Schedule:
    """The LR schedule a run trained on and the updates it recorded gradients at."""

    name: str  # how the report names the run ("Pre-LN seed 1")
    total: int  # scheduled updates
    warmup: int  # warm-up updates
    end_lr_fraction: float = 0.0  # end_lr ÷ peak lr
    lr_power: float = 1.0
    recorded: frozenset[int] = frozenset()  # updates with a grad_stats row

    def lr_fraction(self, update: int) -> float:
        """Returns the LR of 1-based ``update`` as a fraction of the peak."""
        cfg = TrainConfig(lr=1.0, warmup=self.warmup, end_lr=self.end_lr_fraction, lr_power=self.lr_power)
        return lr_at(cfg, update - 1, self.total)


def paper_phase() -> dict[str, float]:
    """Returns the paper's window as updates past warm-up and its LR ÷ peak at both ends."""
    (first, last), warm, total = PAPER["updates"], PAPER["warmup"], PAPER["total"]
    paper = Schedule("paper", total, warm)
    return {
        "after_warmup": (first - warm, last - warm),
        "lr_first": paper.lr_fraction(first),
        "lr_last": paper.lr_fraction(last),
    }


def fig7_window(after_warmup: tuple[int, int], schedules: list[Schedule]) -> dict[str, Any]:
    """Returns Figure 7's window for ``schedules`` (every seed of both architectures):
    {window: (first, last) or None, after_warmup, warmup_end, lr: {run name: (LR ÷ peak at first, at
    last)}, refused: why the window cannot be read (None when it can)}."""
    a, b = after_warmup
    if not 1 <= a <= b:
        raise ValueError(f"fig7_after_warmup={after_warmup}: expected 1 <= first <= last")
    warm_end = max((s.warmup for s in schedules), default=0)
    window = (warm_end + a, warm_end + b)
    out: dict[str, Any] = {"window": window, "after_warmup": (a, b), "warmup_end": warm_end, "refused": None}
    short = [s for s in schedules if s.total < window[1]]
    wanted = set(range(window[0], window[1] + 1))
    unrecorded = [s.name for s in schedules if s.total >= window[1] and not wanted <= s.recorded]
    if short:
        ends = ", ".join(f"{s.name} ({s.total} updates)" for s in short)
        out["refused"] = f"updates {window[0]}–{window[1]} lie past the end of {ends}"
    elif unrecorded:
        out["refused"] = f"updates {window[0]}–{window[1]} not all recorded by " + ", ".join(unrecorded)
    else:
        out["lr"] = {s.name: (s.lr_fraction(window[0]), s.lr_fraction(window[1])) for s in schedules}
    if out["refused"]:
        out["window"] = None
    return out


def run_schedule(directory: str, name: str, rows: list[dict[str, Any]]) -> Schedule:
    """Returns the Schedule of the run in ``directory`` (its config.json) with ``rows`` (its grad_stats
    rows) as the recorded updates."""
    train = load_json(os.path.join(directory, "config.json"))["train"]
    cfg, total = train["config"], int(train["total_steps"])
    warm = train.get("warmup_steps")
    if warm is None:  # a run recorded before config.json held it
        warm = warmup_steps(TrainConfig(warmup=cfg["warmup"]), total)
    return Schedule(
        name=name,
        total=total,
        warmup=int(warm),
        end_lr_fraction=cfg.get("end_lr", 0.0) / cfg["lr"],
        lr_power=cfg.get("lr_power", 1.0),
        recorded=frozenset(r["update"] for r in rows),
    )


def window_text(result: dict[str, Any], labels: tuple[str, str]) -> str:
    """Returns the report's sentence on the window: which updates, the LR there ÷ peak, the paper's."""
    paper = paper_phase()
    p_first, p_last = PAPER["updates"]
    pa, pb = paper["after_warmup"]
    theirs = (
        f"The paper's window: updates {p_first}–{p_last} of {PAPER['total']} ({pa}–{pb} updates past the end "
        f"of a {PAPER['warmup']}-update warm-up, fairseq examples/normformer), LR {paper['lr_last']:.2%}–"
        f"{paper['lr_first']:.2%} of its peak."
    )
    a, b = result["after_warmup"]
    if result["window"] is None:
        return f"Figure 7 not read: {result['refused']} ({a}–{b} updates past warm-up). {theirs}"
    first, last = result["window"]
    lrs = result["lr"]
    low = min(v for pair in lrs.values() for v in pair)
    high = max(v for pair in lrs.values() for v in pair)
    return (
        f"Figure 7 reads updates {first}–{last} for {labels[0]} and {labels[1]} alike: {a}–{b} updates past "
        f"the end of warm-up (update {result['warmup_end']}, the later of the runs' warm-up ends), LR "
        f"{low:.1%}–{high:.1%} of its peak over the window in every run. {theirs}"
    )
