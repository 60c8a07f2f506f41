"""Checkpoint round trips, fingerprints, HeadScale folding on load, and error messages."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from nfeval.base.fingerprint import fingerprint_model
from nfeval.cli import main
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer


def test_save_load_identical_logits_and_fingerprint(tiny_clm_ckpt):
    ckpt = checkpoint.load(tiny_clm_ckpt)
    again = checkpoint.load(tiny_clm_ckpt)
    idx = torch.randint(0, ckpt.config.vocab_size, (2, 12))
    assert torch.equal(ckpt.model(idx), again.model(idx))
    assert ckpt.fingerprint == again.fingerprint == fingerprint_model(ckpt.model)
    assert ckpt.tokenizer is not None and ckpt.tokenizer.get_vocab_size() == ckpt.config.vocab_size
    assert ckpt.meta["compute"]["tokens"] == 1000


def test_load_computes_what_the_saved_model_computes_and_draws_nothing(tmp_path, tiny_tokenizer):
    """The weights go into the read skeleton (no random init) and the sinusoidal position table, which
    no checkpoint stores, is computed again; the global RNG is left where it was."""
    torch.manual_seed(0)
    cfg = preset("prenorm-tiny", vocab_size=tiny_tokenizer.get_vocab_size(), max_seq_len=64)
    model = Transformer(cfg).eval()
    assert cfg.positions == "sinusoidal"
    checkpoint.save(str(tmp_path), model, tiny_tokenizer)
    rng = torch.get_rng_state()
    loaded = checkpoint.load(str(tmp_path))
    assert torch.equal(torch.get_rng_state(), rng)
    idx = torch.randint(0, cfg.vocab_size, (2, 12))
    assert torch.equal(loaded.model.sin_pos, model.sin_pos)
    assert torch.equal(loaded.model(idx), model(idx))


def test_fingerprint_changes_with_any_weight(tiny_clm_ckpt):
    ckpt = checkpoint.load(tiny_clm_ckpt)
    before = fingerprint_model(ckpt.model)
    with torch.no_grad():
        ckpt.model.blocks[1].fc2.bias[3] += 1e-6
    assert fingerprint_model(ckpt.model) != before


def test_folded_load_matches_unfolded(tiny_clm_ckpt):
    plain = checkpoint.load(tiny_clm_ckpt)
    folded = checkpoint.load(tiny_clm_ckpt, fold_head_scale=True)
    assert plain.model.blocks[0].attn.head_gain is not None
    assert folded.model.blocks[0].attn.head_gain is None
    assert folded.fingerprint == plain.fingerprint  # caches keyed by the stored weights are shared
    idx = torch.randint(0, plain.config.vocab_size, (3, 20))
    torch.testing.assert_close(folded.model(idx), plain.model(idx), rtol=1e-5, atol=1e-5)


def test_mlm_round_trip(tiny_mlm_ckpt):
    ckpt = checkpoint.load(tiny_mlm_ckpt)
    assert ckpt.config.objective == "mlm"
    idx = torch.randint(0, ckpt.config.vocab_size, (1, 8))
    assert ckpt.model(idx).shape == (1, 8, ckpt.config.vocab_size)


@pytest.fixture
def ckpt_copy(tiny_clm_ckpt, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny_clm_ckpt, dst)
    return dst


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        checkpoint.load(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty/model\.safetensors"):
        checkpoint.load(str(tmp_path / "empty"))


def test_truncated_checkpoint_names_file(ckpt_copy):
    weights = ckpt_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors: truncated or corrupt"):
        checkpoint.load(str(ckpt_copy))


def test_shape_mismatch_names_tensor(ckpt_copy):
    weights = str(ckpt_copy / "model.safetensors")
    state = load_file(weights)
    state["blocks.1.fc1.weight"] = state["blocks.1.fc1.weight"][:-1].contiguous()
    save_file(state, weights)
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'blocks\.1\.fc1\.weight' has shape"):
        checkpoint.load(str(ckpt_copy))


def test_missing_tensor_names_tensor(ckpt_copy):
    weights = str(ckpt_copy / "model.safetensors")
    state = load_file(weights)
    del state["blocks.0.attn.head_gain"]
    save_file(state, weights)
    with pytest.raises(ValueError, match=r"tensor 'blocks\.0\.attn\.head_gain' is missing"):
        checkpoint.load(str(ckpt_copy))


def test_bad_config_names_field(ckpt_copy):
    cfg_path = ckpt_copy / "config.json"
    data = json.loads(cfg_path.read_text())
    data["model"]["norm_position"] = "middle"
    cfg_path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="norm_position"):
        checkpoint.load(str(ckpt_copy))
    cfg_path.write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json: invalid JSON at line 1"):
        checkpoint.load(str(ckpt_copy))


def test_run_dir_resolves_to_newest_step(tiny_clm_ckpt, tmp_path):
    run = tmp_path / "run"
    for step in ("step_00000010", "step_00000020"):
        shutil.copytree(tiny_clm_ckpt, run / "checkpoints" / step)
    assert checkpoint.resolve(str(run)).endswith("step_00000020")


def test_info_command(tiny_clm_ckpt, capsys):
    assert main(["info", tiny_clm_ckpt, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    ckpt = checkpoint.load(tiny_clm_ckpt)
    assert info["fingerprint"] == ckpt.fingerprint
    assert info["architecture"] == "normformer"
    assert info["parameters"] == ckpt.model.num_params()
    assert info["normformer_parameters"] == 2 * (2 * 64 + 2 * 256 + 4)
    assert main(["info", "normformer-bogus"]) == 2
    assert "unknown preset" in capsys.readouterr().err
    assert main(["info", os.path.join(tiny_clm_ckpt, "missing")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    assert os.path.basename(tiny_clm_ckpt)


def test_loading_a_checkpoint_does_not_import_dynamo(tiny_clm_ckpt):
    """The meta skeleton ``read`` builds draws no initial weights: a meta ``normal_`` imports
    ``torch._dynamo``, 1.5 s of each command's start. The stored weights load all the same."""
    import subprocess
    import sys

    probe = (
        "import sys, torch\n"
        "from nfeval.engine.checkpoints import checkpoint\n"
        f"ckpt = checkpoint.load({str(tiny_clm_ckpt)!r})\n"
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n"
        "print(ckpt.fingerprint)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == checkpoint.load(tiny_clm_ckpt).fingerprint
