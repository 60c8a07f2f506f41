"""nfeval compare --group: seeds of each architecture as mean ± std with t-intervals, on synthetic runs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from test_compare import make_run

from nfeval.base.errors import ConfigError
from nfeval.cli import main
from nfeval.report.seeds import compare_groups, parse_groups


@pytest.fixture
def seed_runs(tmp_path):
    # Baseline seed i: best ppl 20+i at flops 400; candidate seed i reaches 20+i at flops 200, 250, 300.
    for i, (step, flops) in enumerate([(20, 200), (25, 250), (30, 300)]):
        make_run(
            tmp_path, f"pre-s{i}", [(10, 100, 40.0), (20, 200, 30.0), (30, 300, 25.0), (40, 400, 20.0 + i)]
        )
        make_run(
            tmp_path,
            f"norm-s{i}",
            [(10, 100, 30.0), (step, flops, 20.0 + i), (40, 400, 15.0)],
            arch="normformer",
        )
    return tmp_path


def test_groups_pair_seeds_and_give_t_intervals(seed_runs):
    groups = parse_groups([f"prenorm={seed_runs}/pre-s*", f"normformer={seed_runs}/norm-s*"])
    assert [p.rsplit("/", 1)[1] for p in groups["prenorm"]] == ["pre-s0", "pre-s1", "pre-s2"]
    result = compare_groups(groups)
    base, cand = result["groups"]
    assert result["baseline"] == "prenorm" and cand["architecture"] == "normformer" and cand["n"] == 3
    frac = cand["to_target"]["flops"]
    assert frac["values"] == [0.5, 0.625, 0.75] and frac["reached"] == 3
    low, high = stats.t.interval(0.95, 2, loc=0.625, scale=stats.sem([0.5, 0.625, 0.75]))
    assert (frac["mean"], frac["std"]) == (pytest.approx(0.625), pytest.approx(0.125))
    assert (frac["low"], frac["high"]) == (pytest.approx(low), pytest.approx(high))
    assert (
        base["to_target"]["flops"]["values"] == [1.0, 1.0, 1.0] and base["to_target"]["flops"]["low"] == 1.0
    )
    ppl = base["ppl_at_equal"]["flops"]
    assert ppl["values"] == [20.0, 21.0, 22.0] and ppl["std"] == pytest.approx(np.std([20, 21, 22], ddof=1))
    assert cand["ppl_at_equal"]["wall_s"]["mean"] == 15.0


def test_cli_prints_mean_std_interval(seed_runs, capsys):
    rc = main(
        ["compare", "--group", f"prenorm={seed_runs}/pre-s*", "--group", f"normformer={seed_runs}/norm-s*"]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "0.625 ± 0.125 [" in out and "21.00 ± 1.00 [" in out and "baseline group: prenorm" in out


def test_unequal_groups_and_bad_specs_are_refused(seed_runs, capsys):
    with pytest.raises(ConfigError, match="same number of runs"):
        compare_groups(
            {"a": [str(seed_runs / "pre-s0")], "b": [str(seed_runs / f"norm-s{i}") for i in range(2)]}
        )
    assert main(["compare", "--group", "prenorm"]) == 2
    assert "expected NAME=GLOB" in capsys.readouterr().err
    assert main(["compare", "--group", f"x={seed_runs}/nothing-*"]) == 2
    assert "matches no run directory" in capsys.readouterr().err


def test_group_cell_read_mid_schedule_says_so(seed_runs, tmp_path):
    from nfeval.report.seeds import format_groups

    for i in range(3):  # a group stopping at 30 of the others' 40 steps: they are read mid-schedule
        make_run(tmp_path, f"short-s{i}", [(10, 100, 30.0), (30, 300, 18.0)], arch="normformer")
    groups = parse_groups([f"prenorm={seed_runs}/pre-s*", f"short={tmp_path}/short-s*"])
    result = compare_groups(groups)
    base, short = result["groups"]
    assert base["mid_schedule"] == {"flops": 3, "wall_s": 3} and short["mid_schedule"]["wall_s"] == 0
    text = format_groups(result)
    assert "(mid-schedule 3/3)" in text and "not compute-matched (mid-schedule)" in text
