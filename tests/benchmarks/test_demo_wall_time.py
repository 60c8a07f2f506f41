"""benchmarks/demo_wall_time.py's arithmetic and report, on made-up measurements (the script itself times
a whole demo, which no test runs; ``--dry-run`` checks it at the smallest setting by hand)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import demo_wall_time  # noqa: E402


def test_steal_share_and_report():
    before, after = [0] * 10, [60, 0, 20, 10, 0, 0, 0, 10, 0, 0]
    assert demo_wall_time.steal_share(before, after) == 0.1
    assert demo_wall_time.steal_share(None, after) is None
    summary = {
        "stage_s": {"training": 250.0, "zero-shot": 40.0},
        "models": {"prenorm": {"steps": 3000}, "normformer": {"steps": 2880}},
        "budget": {"how": "--minutes 7: ..."},
    }
    m = {"command": "-m nfeval demo", "wall_s": 420.0, "cpu_s": 400.0, "peak_rss_mb": 900.0}
    m.update(load=(0.1, 1.9), steal=0.02, cores=2, summary=summary)
    text = demo_wall_time.report(m)
    assert "**7.0 min** wall" in text and "training 250 s" in text and "normformer 2880" in text
    assert "stolen by the hypervisor during the run: 2%" in text
