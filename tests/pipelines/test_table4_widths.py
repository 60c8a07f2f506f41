"""Table 4's controls at the paper's parameters, at the plan level (no training): the hidden size widened
as the paper widened its 125M baseline, the FFN widened to NormFormer's parameter count beside it, and
GeGLU with its FFN narrowed to the Pre-LN baseline's parameter count."""

from __future__ import annotations

import json
import os
from fractions import Fraction

import pytest

from nfeval.pipelines import runs
from nfeval.pipelines.reproduce import ablation_experiment, equal_time, run_specs
from nfeval.pipelines.reproduce.plan import (
    CONTROLS,
    EXPERIMENTS,
    RUNS,
    TABLE4,
    WIDTH_CONTROLS,
    at_equal_updates,
)
from nfeval.pipelines.reproduce.run_overrides import (
    excess,
    paper_widening,
    paper_width_control,
    parameter_count,
    run_model,
    run_model_config,
    widened,
)
from nfeval.pipelines.scales import SCALES

WIDER, WIDE, GLU = (*WIDTH_CONTROLS, "clm-ffn-glu-matched")
SHAPES = ("tiny", "small", "125M")


def test_paper_widening_is_derived_from_the_paper_shape():
    """768 -> 780 at 12 heads, the FFN kept at 4 x d_model (3072 -> 3120): 3.28M parameters, +2.65% of
    the 125M baseline's 123.7M, embeddings included (the paper's "about 3M")."""
    base, wide = paper_width_control()
    assert (base.d_model, base.d_ffn, base.n_head, base.positions) == (768, 3072, 12, "sinusoidal")
    assert (wide.d_model, wide.d_ffn) == (780, 3120)
    assert parameter_count(wide) - parameter_count(base) == 3_280_488
    assert paper_widening() == Fraction(3_280_488, parameter_count(base))
    assert paper_widening() == pytest.approx(0.02652, abs=1e-5)


WIDER_SHAPES = [("tiny", 68, 272), ("small", 132, 528), ("125M", 780, 3120)]


@pytest.mark.parametrize("scale, d_model, d_ffn", WIDER_SHAPES)
def test_wider_control_is_the_smallest_head_divisible_width_meeting_the_paper_share(scale, d_model, d_ffn):
    s = SCALES[scale]
    base, wider = run_model_config(s, "clm-prenorm"), run_model_config(s, WIDER)
    assert (wider.d_model, wider.d_ffn) == (d_model, d_ffn)
    assert (wider.n_head, wider.n_layer) == (base.n_head, base.n_layer)
    assert wider.d_model % wider.n_head == 0 and excess(base, wider) >= paper_widening()
    # every head-divisible width between the baseline's and the chosen one adds less than the paper's share
    for d in range(base.d_model + 1, wider.d_model):
        if d % base.n_head == 0:
            assert excess(base, widened(base, d)) < paper_widening()
    assert run_model(s, WIDER)["d_model"] == d_model  # what the run trains and equal time keys on


@pytest.mark.parametrize("scale", SHAPES)
def test_parameter_matched_control_stays_beside_it_within_one_ffn_unit_per_layer(scale):
    s = SCALES[scale]
    base, wide = run_model_config(s, "clm-prenorm"), run_model_config(s, WIDE)
    target = parameter_count(run_model_config(s, "clm-normformer"))
    assert (wide.d_model, wide.n_head) == (base.d_model, base.n_head) and wide.d_ffn > base.d_ffn
    assert target <= parameter_count(wide) < target + base.n_layer * (2 * base.d_model + 1)
    assert parameter_count(wide) <= 1.01 * target


@pytest.mark.parametrize("scale, d_ffn", [("tiny", 170), ("small", 340), ("125M", 2047)])
def test_geglu_control_matches_the_baseline_parameters(scale, d_ffn):
    s = SCALES[scale]
    base, glu = run_model_config(s, "clm-prenorm"), run_model_config(s, GLU)
    assert glu.ffn_glu and not glu.scale_fc and (glu.d_model, glu.d_ffn) == (base.d_model, d_ffn)
    target = parameter_count(base)
    gap = abs(parameter_count(glu) - target)
    assert 2 * gap <= base.n_layer * (3 * base.d_model + 2)  # within half a GeGLU FFN unit per layer
    assert gap / target < 0.002
    for f in (d_ffn - 1, d_ffn + 1):  # no other width comes nearer
        assert abs(parameter_count(glu.replace(d_ffn=f)) - target) > gap


def test_table4_rows_hold_both_width_controls_and_the_matched_geglu():
    assert CONTROLS.count(GLU) == 1 and "clm-ffn-glu" not in RUNS
    assert TABLE4[-3:] == (WIDER, WIDE, "clm-prenorm")
    table4 = next(e for e in EXPERIMENTS if e.name == "table4")
    assert {WIDER, at_equal_updates(WIDER), GLU, at_equal_updates(GLU)} <= set(table4.runs)
    assert run_model(SCALES["tiny"], at_equal_updates(WIDER)) == run_model(SCALES["tiny"], WIDER)


def _ctx(out: str = "o", **kw) -> run_specs.Context:
    budget = {"max_steps": 100}
    return run_specs.Context(out=out, scale=SCALES["tiny"], budget=budget, seeds=1, tokenizer="t", **kw)


def test_equal_time_times_the_wider_model_as_its_own(tmp_path, monkeypatch):
    """The wider model changes the step time: it is neither the baseline's model nor the FFN-widened one,
    so its step-time ratio is measured, not set to 1 or shared."""
    keys = {k: equal_time.model_key(_ctx(), k) for k in ("clm-prenorm", WIDER, WIDE, GLU, "clm-normformer")}
    assert len(set(keys.values())) == len(keys)

    class Timed:
        def to_dict(self):
            return {"ratio": 1.1, "pairs": 4, "burst": 1}

    timed = []

    def measure(base, cand, **timing):
        timed.append(cand.model)
        return Timed()

    monkeypatch.setattr(runs, "measure_step_ratio", measure)
    ratios = equal_time.measure_ratios(_ctx(str(tmp_path)), ["clm-prenorm", WIDER, "clm-prenorm-gpt3"])
    assert ratios["clm-prenorm"]["ratio"] == 1.0 and ratios["clm-prenorm-gpt3"]["ratio"] == 1.0
    assert ratios[WIDER]["pairs"] == 4 and "shared_with" not in ratios[WIDER]
    assert [m["d_model"] for m in timed] == [68]


def test_table4_section_states_the_rule_and_each_runs_parameter_excess(tmp_path):
    ctx = _ctx(str(tmp_path))
    for key in ("clm-prenorm", WIDER, GLU):
        folder = run_specs.run_dir(ctx, key, 1)
        os.makedirs(folder)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"model": run_model_config(ctx.scale, key).to_dict()}, f)
    assert ablation_experiment._params_cells(ctx, "clm-prenorm") == ["0.431M", ""]
    assert ablation_experiment._params_cells(ctx, WIDER) == ["0.478M", "+10.79%"]
    assert ablation_experiment._params_cells(ctx, GLU) == ["0.432M", "+0.12%"]
    assert ablation_experiment._params_cells(ctx, WIDE) == ["–", "–"]  # not trained yet
    notes = " ".join(ablation_experiment.width_notes(ctx))
    assert "768 → 780" in notes and "3072 → 3120" in notes and "+2.65%" in notes
    assert "d_model 64 → 68, FFN 256 → 272" in notes and "256 → 261" in notes and "256 → 170" in notes
