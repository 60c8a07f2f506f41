"""Equal time as realised: each seed's step-time ratio against the planned interval, the seeds outside
it flagged and left out of the equal-time test, the claim not readable with fewer than 2 left."""

from __future__ import annotations

import json
import math

import pytest

from nfeval.pipelines import realised_time
from nfeval.pipelines.reproduce.training_experiments import with_realised
from nfeval.report import verdict

PLANNED = {"ratio": 1.04, "ci_low": 1.02, "ci_high": 1.06}


def _times(step_ratios: dict[int, float], base_steps: int = 1000, cand_steps: int = 962) -> dict:
    """{seed: (baseline (s, steps), candidate (s, steps))} with the baseline at 0.1 s a step."""
    return {
        seed: ((0.1 * base_steps, base_steps), (0.1 * r * cand_steps, cand_steps))
        for seed, r in step_ratios.items()
    }


def test_seeds_inside_the_planned_interval_are_kept_and_outside_flagged():
    result = realised_time.check(PLANNED, _times({1: 1.04, 2: 1.19, 3: 1.03, 4: 0.95}))
    assert result["kept"] == [1, 3] and result["excluded"] == [2, 4] and result["readable"]
    rows = {r["seed"]: r for r in result["seeds"]}
    assert rows[2]["step_ratio"] == pytest.approx(1.19)
    assert rows[2]["wall_ratio"] == pytest.approx(1.19 * 962 / 1000)  # 14% over the baseline's time
    assert rows[1]["wall_ratio"] == pytest.approx(1.0, abs=1e-3)  # equal time held
    assert "outside: excluded" in realised_time.seed_text(rows[2])
    assert "inside" in realised_time.seed_text(rows[3])
    text = realised_time.summary_text(result)
    assert "seed 2 (1.190" in text and "seed 4" in text and "not readable" not in text
    json.dumps(result)  # report.json holds it


def test_fewer_than_two_seeds_left_make_the_claim_not_readable():
    result = realised_time.check(PLANNED, _times({1: 1.04, 2: 1.12, 3: 1.15}))
    assert result["kept"] == [1] and not result["readable"]
    claim = {"id": "fig2-clm/equal-time", "measured": "log-PPL gain 0.01", "p": 0.01, "mean": 0.01}
    claim |= {"verdict": verdict.AGREES, "why": "t-test"}
    out = with_realised(claim, result)
    assert out["verdict"] == verdict.INCONCLUSIVE and out["p"] is None and out["readable"] is False
    assert out["why"].startswith("not readable") and "seed(s) 2, 3 left out" in out["measured"]


def test_a_seed_without_a_recorded_time_is_listed_not_judged():
    times = _times({1: 1.04, 2: 1.05}) | {3: (None, (90.0, 962))}
    result = realised_time.check(PLANNED, times)
    assert result["kept"] == [1, 2, 3] and result["excluded"] == []
    assert realised_time.seed_text(result["seeds"][2]) == "no recorded time"


def test_run_time_reads_the_run_record(tmp_path):
    run = tmp_path / "seed1"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"compute": {"wall_s": 12.5, "steps": 40}}))
    assert realised_time.run_time(str(run)) == (12.5, 40)
    assert realised_time.run_time(str(tmp_path / "missing")) is None


def _records(name: str, ppls: list[float]) -> list[dict]:
    return [{"name": name, "seed": s, "status": "finished", "val_ppl": p} for s, p in enumerate(ppls, 1)]


def test_bakeoff_tests_perplexity_on_the_seeds_kept_only():
    from types import SimpleNamespace

    from nfeval.pipelines.bakeoff.results import ppl_tests

    base, cand = SimpleNamespace(name="prenorm"), SimpleNamespace(name="normformer")
    ctx = SimpleNamespace(baseline=base, candidates=[base, cand])
    # seeds 1-3 gain 0.01-0.03 log-PPL; seed 4 (ran 19% slow) loses 0.5
    records = {"prenorm": _records("prenorm", [30.0] * 4)}
    records["normformer"] = _records("normformer", [30 / math.exp(g) for g in (0.01, 0.02, 0.03, -0.5)])
    realised = {"normformer": realised_time.check(PLANNED, _times({1: 1.04, 2: 1.05, 3: 1.03, 4: 1.19}))}
    everything, kept = ppl_tests(ctx, records)[0], ppl_tests(ctx, records, realised)[0]
    assert everything["mean"] < 0 < kept["mean"] == pytest.approx(0.02)
    assert kept["n"] == 3 and kept["seeds_left_out"] == [4] and "seed 4 (1.190" in kept["why"]
    assert len(kept["gains"]) == 4  # every seed still shown
    realised["normformer"] = realised_time.check(PLANNED, _times({1: 1.04, 2: 1.2, 3: 1.2, 4: 1.19}))
    unreadable = ppl_tests(ctx, records, realised)[0]
    assert unreadable["p"] is None and unreadable["why"].startswith("not readable")


def test_a_single_seed_inside_the_interval_is_not_called_unreadable():
    result = realised_time.check(PLANNED, _times({1: 1.04}))
    assert result["readable"] and result["kept"] == [1]
