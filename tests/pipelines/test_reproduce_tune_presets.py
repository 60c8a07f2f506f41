"""A narrower ``reproduce --only`` keeps the presets an earlier invocation tuned into the same folder:
docs/reproduce_small's tune.json lost Post-LN when ``--only fig2-clm`` re-read Figure 2 alone."""

from __future__ import annotations

import json

from nfeval.pipelines.reproduce.tuning import tuned_presets

GRID = {"lrs": (1e-3, 3e-3), "seeds": [101, 102, 103], "budget": "steps=1000"}


def _write(tmp_path, presets, lrs=(1e-3, 3e-3), seeds=(101, 102, 103), budget="steps=1000"):
    summary = {
        "grid": {"presets": presets, "lrs": list(lrs), "seeds": list(seeds)},
        "budget": {"spec": budget},
    }
    (tmp_path / "tune.json").write_text(json.dumps(summary))


def test_earlier_presets_of_the_same_grid_are_kept_first(tmp_path):
    assert tuned_presets(str(tmp_path), ["prenorm-small"], GRID) == ["prenorm-small"]  # no tune yet
    _write(tmp_path, ["prenorm-small", "normformer-small", "postnorm-small"])
    kept = tuned_presets(str(tmp_path), ["prenorm-small", "normformer-small"], GRID)
    assert kept == ["prenorm-small", "normformer-small", "postnorm-small"]
    assert (
        tuned_presets(str(tmp_path), ["normformer-resscale-small"], GRID)[-1] == "normformer-resscale-small"
    )


def test_a_tune_of_another_grid_seeds_or_budget_is_not_carried_over(tmp_path):
    for other in ({"lrs": (1e-3,)}, {"seeds": (101,)}, {"budget": "steps=500"}):
        _write(tmp_path, ["prenorm-small", "postnorm-small"], **other)
        assert tuned_presets(str(tmp_path), ["prenorm-small"], GRID) == ["prenorm-small"]
