"""`nfeval analyze`: the stability test, learned gains, runs with grad stats, bad input, and the
leaderboard's analysis section."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from conftest import held_elsewhere, make_text
from test_fairseq_import import fairseq_config, to_fairseq

from nfeval.analysis.stability import AttentionLogitProbe, StabilitySettings, stability_test
from nfeval.analysis.tables import stability_table
from nfeval.cli import main
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.text.data import Batches
from nfeval.engine.text.tokenization import SpecialIds
from nfeval.engine.training.grad_stats import GradStatsRecorder

ARCHS = ("postnorm", "prenorm", "normformer")


def random_batches(vocab: int = 64, seed: int = 0) -> Batches:
    tokens = np.random.default_rng(seed).integers(5, vocab, 20_000).astype(np.uint16)
    return Batches(tokens, 16, "clm", SpecialIds(bos=0, eos=2, pad=1, mask=4), vocab, seed)


def tiny_configs():
    return {
        a: preset(f"{a}-tiny", n_layer=2, d_model=32, d_ffn=64, vocab_size=64, max_seq_len=16) for a in ARCHS
    }


def test_stability_diverges_with_a_huge_final_lr():
    settings = StabilitySettings(updates=25, lr_start=1e-3, lr_end=1e3, batch_size=2, seq_len=16)
    result = stability_test(tiny_configs(), [1], random_batches(), settings)
    for row in result["summary"]:
        assert row["survived_all"] == 0 and row["survived_mean"] < 25, row
    for runs in result["runs"].values():
        r = runs[0]
        assert r["diverged_at"] == r["survived"] + 1 and r["reason"]
        assert len(r["loss"]) == r["diverged_at"] and len(r["attn_logit_max"][0]) == 2
        assert r["lr"][0] == pytest.approx(1e-3) and r["lr_at_divergence"] == r["lr"][-1]
    assert "survived all 25" not in "\n".join(stability_table(result))


def test_stability_prints_no_bar_when_progress_is_off(capsys, monkeypatch):
    from nfeval.base import progress

    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)  # a log's lines at once (capsys is no terminal)
    settings = StabilitySettings(updates=3, lr_start=1e-8, lr_end=1e-7, batch_size=2, seq_len=16)
    configs = {"prenorm": tiny_configs()["prenorm"]}
    quiet = stability_test(configs, [1], random_batches(), settings, progress=False)
    assert capsys.readouterr().err == ""
    loud = stability_test(configs, [1], random_batches(), settings)
    assert "prenorm seed 1" in capsys.readouterr().err  # the bar, when on
    assert quiet["runs"]["prenorm"][0]["loss"] == loud["runs"]["prenorm"][0]["loss"]


def test_stability_survives_a_harmless_range_and_says_so():
    # fairseq's init starts from logits of std ~1 (not GPT-2's ~0): on 32-token batches the loss moves
    # ~0.4 nats from batch to batch without any learning; 6 updates lie inside the criterion's noise
    # window (10 updates), so only a non-finite loss or gradient could diverge here
    settings = StabilitySettings(updates=6, lr_start=1e-8, lr_end=1e-7, batch_size=2, seq_len=16)
    result = stability_test(tiny_configs(), [1, 2], random_batches(), settings)
    for row in result["summary"]:
        assert row["survived_all"] == 2 and row["survived_mean"] == 6 and row["survived_std"] == 0
    for runs in result["runs"].values():
        assert all(r["diverged_at"] is None and r["lr"][-1] == pytest.approx(1e-7) for r in runs)
    assert all("survived all 6" in line for line in stability_table(result)[2:5])
    again = stability_test(tiny_configs(), [1, 2], random_batches(), settings)
    assert again["runs"]["prenorm"][0]["loss"] == result["runs"]["prenorm"][0]["loss"]  # reproducible


def test_same_seed_gives_every_architecture_the_same_shared_weights():
    states = {}
    for arch, cfg in tiny_configs().items():
        torch.manual_seed(1)
        states[arch] = Transformer(cfg).state_dict()
    shared = set(states["prenorm"]) & set(states["normformer"]) & set(states["postnorm"])
    assert {"blocks.1.fc2.weight", "blocks.0.attn.qkv.weight", "tok_emb.weight"} <= shared
    for name in shared:
        assert torch.equal(states["prenorm"][name], states["normformer"][name]), name
        assert torch.equal(states["prenorm"][name], states["postnorm"][name]), name


def test_attention_logit_probe_matches_direct_computation_and_flags_fp16_overflow():
    torch.manual_seed(0)
    model = Transformer(preset("prenorm-tiny", n_layer=1, vocab_size=64, max_seq_len=16))
    idx = torch.randint(5, 64, (2, 8))
    captured = {}
    model.blocks[0].attn.register_forward_hook(lambda m, args, out: captured.update(x=args[0]))
    probe = AttentionLogitProbe(model)
    model(idx)
    attn, cfg = model.blocks[0].attn, model.cfg
    q, k, _ = attn.qkv(captured["x"]).split(cfg.d_model, dim=2)
    q = q.view(2, 8, cfg.n_head, cfg.head_dim).transpose(1, 2)
    k = k.view(2, 8, cfg.n_head, cfg.head_dim).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(cfg.head_dim)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    assert probe.maxima[0] == pytest.approx(scores.masked_select(causal.expand_as(scores)).abs().max().item())
    probe.remove()

    settings = StabilitySettings(updates=2, lr_start=1e-9, lr_end=1e-9, batch_size=2, seq_len=16)
    cfg = preset("prenorm-tiny", n_layer=1, vocab_size=64, max_seq_len=16, scale_embedding=True)
    result = stability_test({"big": cfg}, [1], random_batches(), settings)
    assert result["runs"]["big"][0]["fp16_overflow"] == []
    with torch.no_grad():  # q·k grows with the square of the weight scale
        torch.manual_seed(1)
        huge = Transformer(cfg)
        huge.blocks[0].attn.qkv.weight.mul_(2000.0)
    probe = AttentionLogitProbe(huge)
    huge(idx)
    assert probe.maxima[0] > 65504


def _save(path, arch: str, gains: bool = True) -> Transformer:
    torch.manual_seed(0)
    model = Transformer(preset(f"{arch}-tiny", vocab_size=64, max_seq_len=16))
    if gains and model.cfg.scale_fc:
        with torch.no_grad():
            for i, block in enumerate(model.blocks):
                block.ffn_hidden_norm.weight.fill_(0.5 + i)
                block.attn_out_norm.weight.copy_(torch.linspace(0.0, 2.0 * (i + 1), 64))
                block.attn.head_gain.copy_(torch.tensor([0.25, 0.5, 1.5, 2.0]) * (i + 1))
                if block.resid_gain is not None:
                    block.resid_gain.fill_(0.75)
    checkpoint.save(str(path), model)
    return model


def test_gains_reports_hand_set_values_for_nfeval_and_fairseq_checkpoints(tmp_path, capsys):
    model = _save(tmp_path / "nf", "normformer-resscale")
    fs = tmp_path / "fs.pt"
    torch.save({"model": to_fairseq(model), "cfg": {"model": fairseq_config(model.cfg)}}, fs)
    out = tmp_path / "gains.png"
    assert main(["analyze", "gains", str(tmp_path / "nf"), str(fs), "--out", str(out)]) == 0
    data = json.loads((tmp_path / "gains.json").read_text())
    assert out.stat().st_size > 0 and data["provenance"]["nfeval_version"]
    for m in data["models"]:
        g = m["gains"]
        assert g["ffn_ln_mean"] == [0.5, 1.5]
        assert g["attn_ln_mean"] == [pytest.approx(1.0), pytest.approx(2.0)]
        assert g["head_gain"] == [[0.25, 0.5, 1.5, 2.0], [0.5, 1.0, 3.0, 4.0]]
        assert g["resid_gain_mean"] == [0.75, 0.75]
        assert m["info"]["fingerprint"]
    assert "| nf | 1 | 1.5000 | 2.0000 | 0.500 / 2.125 / 4.000 | 0.7500 |" in capsys.readouterr().out


def test_a_second_analysis_writing_one_png_is_refused_at_once(tmp_path, capsys):
    _save(tmp_path / "nf", "normformer-resscale")
    out = tmp_path / "gains.png"
    with held_elsewhere(out, "file_lock") as pid:
        assert main(["analyze", "gains", str(tmp_path / "nf"), "--out", str(out)]) == 2
        assert not (tmp_path / "gains.json").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out}: being written by another nfeval process (pid {pid} on " in err
    assert main(["analyze", "gains", str(tmp_path / "nf"), "--out", str(out)]) == 0  # the holder died
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gains.json", "gains.png", "nf"]  # no lock left


def _assert_fails(tmp_path, capsys, argv: list[str], *needles: str) -> None:
    before = set(os.listdir(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    assert set(os.listdir(tmp_path)) == before  # nothing written


def test_bad_input_names_what_is_missing_and_writes_nothing(tmp_path, capsys):
    _save(tmp_path / "pre", "prenorm")
    (tmp_path / "run").mkdir()
    out = str(tmp_path / "x.png")
    _assert_fails(
        tmp_path,
        capsys,
        ["analyze", "grads", str(tmp_path / "run"), "--out", out],
        "grad_stats.jsonl: not found",
        "--grad-stats",
    )
    _assert_fails(
        tmp_path,
        capsys,
        ["analyze", "gains", str(tmp_path / "pre"), "--out", out],
        "has no NormFormer gains",
        "prenorm",
    )
    _assert_fails(
        tmp_path,
        capsys,
        ["analyze", "stability", "--preset", "normformer-huge", "--out", out],
        "unknown preset 'normformer-huge'",
    )
    _assert_fails(
        tmp_path, capsys, ["analyze", "grads", "--ckpt", "preset:nope", "--out", out], "unknown preset 'nope'"
    )
    _assert_fails(
        tmp_path,
        capsys,
        ["analyze", "gains", str(tmp_path / "missing"), "--out", out],
        "missing: no such checkpoint",
    )


def _fake_run(path, arch: str, scale: float) -> None:
    """A run dir as training with --grad-stats leaves it: config.json + grad_stats.jsonl."""
    torch.manual_seed(0)
    model = Transformer(preset(f"{arch}-tiny", vocab_size=64, max_seq_len=16))
    checkpoint.save(str(path), model)
    recorder = GradStatsRecorder(model, (3, 4), str(path))
    for update in (2, 3, 4):
        for p in model.parameters():
            p.grad = torch.full_like(p, scale * update)
        recorder.record(update)


def test_grads_from_runs_and_at_a_preset_init(tmp_path, capsys):
    _fake_run(tmp_path / "pre", "prenorm", 1.0)
    _fake_run(tmp_path / "nf", "normformer", 2.0)
    data_file = tmp_path / "corpus.txt"
    data_file.write_text("\n\n".join(make_text(300)))
    out = tmp_path / "g.png"
    argv = [
        "analyze",
        "grads",
        str(tmp_path / "pre"),
        str(tmp_path / "nf"),
        "--ckpt",
        "preset:postnorm-tiny",
        "--data",
        str(data_file),
        "--batches",
        "1",
        "--batch-size",
        "2",
        "--seq-len",
        "16",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["baseline"] == "pre" and data["kind"] == "fc2"
    models = {m["name"]: m for m in data["models"]}
    assert models["pre"]["values"]["fc2"] == [3.5, 3.5] and models["pre"]["window"] == [3, 4]
    assert models["nf"]["relative"] == [2.0, 2.0]
    post = models["postnorm-tiny"]
    assert post["info"]["architecture"] == "postnorm" and post["info"]["data_fingerprint"]
    assert all(v > 0 for v in post["values"]["fc2"])
    assert data["provenance"]["data_fingerprint"] and out.stat().st_size > 0


def test_leaderboard_includes_an_analysis_section(tmp_path):
    from test_leaderboard import FULL, zeroshot_file

    _save(tmp_path / "nf", "normformer")
    assert main(["analyze", "gains", str(tmp_path / "nf"), "--out", str(tmp_path / "gains.png")]) == 0
    results = zeroshot_file(tmp_path / "zs.json", "f" * 64, "nf", 1000, FULL)
    board = tmp_path / "board.md"
    argv = ["leaderboard", str(results), "--analysis", str(tmp_path / "gains.json"), "--out", str(board)]
    assert main(argv) == 0
    text = board.read_text()
    assert "## Analyses" in text and "Learned NormFormer gains by layer" in text
    assert "| nf | 0 | 0.5000 | 1.0000 | 0.250 / 1.062 / 2.000 | – |" in text
    (tmp_path / "bad.json").write_text("{}")
    assert main(["leaderboard", str(results), "--analysis", str(tmp_path / "bad.json")]) == 2
