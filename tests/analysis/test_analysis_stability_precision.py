"""The stability test in low-precision autocast and on a given model config (`--set`), as `nfeval
reproduce` runs it for Figure 5."""

from __future__ import annotations

import json

import pytest
from conftest import make_text
from test_analysis_cli import random_batches

from nfeval.analysis.stability import StabilitySettings, lowest_precision, stability_test
from nfeval.cli import main
from nfeval.engine.model.config import preset


def test_bf16_autocast_tracks_fp32_and_probes_logits_in_fp32():
    settings = dict(updates=4, lr_start=1e-4, lr_end=1e-3, batch_size=2, seq_len=16)
    configs = {"prenorm": preset("prenorm-tiny", vocab_size=64, max_seq_len=16)}
    full = stability_test(configs, [1], random_batches(), StabilitySettings(**settings))
    low = stability_test(configs, [1], random_batches(), StabilitySettings(**settings, autocast="bf16"))
    a, b = full["runs"]["prenorm"][0], low["runs"]["prenorm"][0]
    assert b["loss"][0] == pytest.approx(a["loss"][0], rel=2e-2)  # bf16 keeps 8 bits of mantissa
    assert b["loss"][0] != a["loss"][0]  # ... so it did run in bf16
    assert b["attn_logit_max"][0][0] == pytest.approx(a["attn_logit_max"][0][0], rel=5e-2)
    assert low["settings"]["autocast"] == "bf16"
    assert (lowest_precision("cpu"), lowest_precision("cuda:0")) == ("bf16", "fp16")


def test_cli_applies_model_overrides_to_every_preset(tmp_path, capsys):
    out, data = tmp_path / "st.png", tmp_path / "corpus.txt"
    data.write_text("\n\n".join(make_text(300)))
    argv = [
        "analyze",
        "stability",
        "--data",
        str(data),
        "--preset",
        "prenorm-tiny",
        "--preset",
        "normformer-resscale-tiny",
    ]
    argv += ["--seeds", "1", "--updates", "2", "--batch-size", "2", "--seq-len", "16"]
    argv += [
        "--set",
        "n_layer=3",
        "--set",
        "positions=sinusoidal",
        "--autocast",
        "bf16",
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    result = json.loads((tmp_path / "st.json").read_text())
    assert result["model_overrides"] == {"n_layer": 3, "positions": "sinusoidal"}
    for row in result["summary"]:
        assert len(row["attn_logit_max_by_layer"]) == 3
    with pytest.raises(SystemExit):
        main([*argv[:-2], "--autocast", "fp8", "--output", str(out)])
