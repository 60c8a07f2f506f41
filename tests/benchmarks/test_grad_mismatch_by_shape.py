"""benchmarks/grad_mismatch_by_shape.py at the smallest setting: two tiny shapes' first 3 updates of a
10-update schedule on this test's own corpus, two seeds, and the JSON it writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import grad_mismatch_by_shape  # noqa: E402


def test_table_of_whole_seeds(small_corpus, tmp_path):
    out = tmp_path / "shapes.json"
    argv = ["--shapes", "2x32,3x64", "--seeds", "1,2", "--updates", "3", "--schedule", "10"]
    argv += ["--train-data", small_corpus, "--vocab-size", "300", "--seq-len", "32", "--json", str(out)]
    result = grad_mismatch_by_shape.main(argv)
    assert json.loads(out.read_text(encoding="utf-8")) == result
    assert set(result) == {"settings", "command", "rows", "cells"}
    assert result["settings"]["schedule"] == 10 and result["settings"]["warmup"] == 0.05
    assert len(result["rows"]) == 2 * 2 * 2  # shapes × archs × seeds
    row = result["rows"][0]
    assert row["n_head"] == 1 and row["d_ffn"] == 128  # head dim 32 (at least one head), FFN 4d
    assert {"update_1", "updates_1_3", "fc2_mean_by_layer", "loss_last", "lr_last", "step_s"} <= set(row)
    assert len(row["fc2_mean_by_layer"]) == 2 and row["updates_1_3"] > 0
    # the 3 updates run on the 10-update schedule: warm-up 1 update (5% of 10), then decay over 10
    assert row["lr_last"] == pytest.approx(grad_mismatch_by_shape.LR * (1 - 1 / 9))
    assert [(c["shape"], c["arch"]) for c in result["cells"]] == [
        ("2x32", "prenorm"),
        ("2x32", "normformer"),
        ("3x64", "prenorm"),
        ("3x64", "normformer"),
    ]
    cell = result["cells"][0]
    assert cell["seeds"] == [1, 2] and len(cell["update_1"]["per_seed"]) == 2
    assert {"mean", "std", "min", "max"} <= set(cell["updates_1_3"])
    # the RESULTS.md table, rendered again from the JSON alone (--render trains nothing)
    table = grad_mismatch_by_shape.markdown(result).splitlines()
    assert len(table) == 2 + 4 and table[2].startswith("| 2 × 32 | Pre-LN | 2 | ")
    assert grad_mismatch_by_shape.main(["--render", str(out)]) == result
