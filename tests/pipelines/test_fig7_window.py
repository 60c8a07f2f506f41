"""Figure 7's window: one window at the paper's phase (a fixed number of updates past warm-up, LR near
its peak) for the baseline and NormFormer alike, refused when a run cannot hold it."""

from __future__ import annotations

import pytest

from nfeval.engine.training.budget import warmup_steps
from nfeval.engine.training.step_ratio import equal_time_steps
from nfeval.engine.training.train_config import TrainConfig, parse_grad_stats
from nfeval.pipelines.reproduce.fig7_window import Schedule, fig7_window, paper_phase, window_text
from nfeval.pipelines.scales import SCALES


def _run(name: str, total: int, warmup: int, recorded: int | None = None) -> Schedule:
    return Schedule(name, total, warmup, recorded=frozenset(range(1, (recorded or total) + 1)))


def test_both_architectures_get_the_same_window_after_warmup_and_before_the_end():
    base, nf = _run("Pre-LN", 1000, 50), _run("NormFormer", 964, 48)  # equal time, warm-up 5% of each
    found = fig7_window((1, 51), [base, nf])
    assert found["refused"] is None
    first, last = found["window"]
    assert (first, last) == (51, 101)  # past the later warm-up end (50), 51 updates long as 950–1000
    assert first > max(base.warmup, nf.warmup) and last <= min(base.total, nf.total)
    lr = found["lr"]
    assert lr["Pre-LN"][0] == pytest.approx(1.0)  # the first update after warm-up runs at the peak
    assert all(0.9 < v <= 1.0 for pair in lr.values() for v in pair)  # near the peak throughout
    text = window_text(found, ("Pre-LN", "NormFormer"))
    assert "updates 51–101 for Pre-LN and NormFormer alike" in text and "950–1000 of 572204" in text


def test_a_run_too_short_or_not_recorded_is_refused_by_name():
    short = fig7_window((1, 51), [_run("Pre-LN", 1000, 50), _run("NormFormer", 90, 5)])
    assert short["window"] is None and "NormFormer (90 updates)" in short["refused"]
    assert "Figure 7 not read" in window_text(short, ("Pre-LN", "NormFormer"))
    gap = fig7_window((1, 51), [_run("Pre-LN", 1000, 50), _run("NormFormer", 964, 48, recorded=80)])
    assert gap["window"] is None and "not all recorded by NormFormer" in gap["refused"]
    with pytest.raises(ValueError):
        fig7_window((0, 5), [_run("Pre-LN", 1000, 50)])


def test_the_paper_window_lies_200_to_250_updates_past_warmup_at_the_peak():
    phase = paper_phase()
    assert phase["after_warmup"] == (200, 250)
    assert phase["lr_last"] > 0.999


@pytest.mark.parametrize("name", ["smoke", "tiny", "small", "125M"])
def test_every_scale_records_its_figure7_window(name):
    s = SCALES[name]
    if "max_steps" not in s.budget:  # a time budget: the steps are known after training (125M: 750 warm-up)
        assert s.warmup + s.fig7_after_warmup[1] <= parse_grad_stats(s.grad_stats)[1]
        return
    base, recorded = int(s.budget["max_steps"]), parse_grad_stats(s.grad_stats)[1]
    runs = [
        _run(f"ratio {ratio}", steps, warmup_steps(TrainConfig(warmup=s.warmup), steps), min(steps, recorded))
        for ratio in (1.0, 1.1)
        for steps in [equal_time_steps(base, ratio)]
    ]
    found = fig7_window(s.fig7_after_warmup, runs)
    assert found["refused"] is None, found
    assert found["window"][1] <= recorded
