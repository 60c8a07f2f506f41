"""Re-running a committed run (issue 49, reproducible numbers): the three outcomes of a re-run."""

from __future__ import annotations

import math

from nfeval.pipelines import verify


def test_an_identical_ppl_is_reproduced_exactly():
    out = verify.judge(123.456, "kernel A", {"ppl": 123.456, "compute_path": "kernel A"})
    assert out["outcome"] == verify.EXACT and out["delta_log_ppl"] == 0.0 and "bit for bit" in out["text"]


def test_a_different_ppl_on_the_same_path_is_a_real_discrepancy():
    out = verify.judge(130.0, "kernel A", {"ppl": 123.0, "compute_path": "kernel A"})
    assert out["outcome"] == verify.SAME_PATH
    assert math.isclose(out["delta_log_ppl"], math.log(130 / 123)) and "not rounding" in out["text"]


def test_a_different_ppl_on_another_or_unrecorded_path_says_both_paths():
    out = verify.judge(405.0, "kernel B", {"ppl": 345.0, "compute_path": "kernel A"})
    assert out["outcome"] == verify.OTHER_PATH and "committed on kernel A, re-run on kernel B" in out["text"]
    old = verify.judge(405.0, "kernel B", {"ppl": 345.0, "compute_path": None})
    assert old["outcome"] == verify.OTHER_PATH and "an unrecorded path" in old["text"]
