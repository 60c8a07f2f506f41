"""Every report reads its schemes' token sensitivity at initialisation before training, on its own corpus,
and states it (a stack blind to its input flagged)."""

from __future__ import annotations

import json
import os

from conftest import tiny_train_config

from nfeval.pipelines import init_sensitivity


def test_measure_reads_each_model_once_and_the_header_states_and_flags_it(tmp_path, small_corpus):
    out = str(tmp_path / "report")
    os.makedirs(out)
    configs = {
        "prenorm": tiny_train_config(small_corpus, preset="prenorm-tiny"),
        "postnorm": tiny_train_config(small_corpus, preset="postnorm-tiny"),
    }
    said: list[str] = []
    records = init_sensitivity.measure(out, configs, said.append)
    assert [r["name"] for r in records] == ["prenorm", "postnorm"] and len(said) == 2
    assert all(0 <= r["position_cosine"] <= 1 and r["own_token_change"] > 0 for r in records)
    assert json.load(open(os.path.join(out, init_sensitivity.FILE)))["prenorm"] == records[0]
    assert init_sensitivity.measure(out, configs, said.append) == records and len(said) == 2  # stored
    line = init_sensitivity.lines(records)[0]
    assert line.startswith("**Token sensitivity at initialisation**") and "prenorm " in line
    flagged = [{**records[0], "flagged": True, "name": "blind"}]
    assert (
        "**blind" in init_sensitivity.lines(flagged)[0]
        and "barely depends on its input" in (init_sensitivity.lines(flagged)[0])
    )
    assert init_sensitivity.lines(None) == []
