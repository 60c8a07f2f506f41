"""fairseq transformer_lm checkpoints load with the same forward, including the old HeadScale bug."""

from __future__ import annotations

import pytest
import torch

from nfeval.engine import checkpoint
from nfeval.engine.config import preset
from nfeval.engine.fairseq_import import LAYER_NAMES
from nfeval.engine.model import Transformer


def to_fairseq(model: Transformer) -> dict[str, torch.Tensor]:
    """Returns ``model``'s weights under fairseq's names (the inverse of the importer's table)."""
    cfg, ours = model.cfg, model.state_dict()
    to_fs = {v: k for k, v in LAYER_NAMES.items()}
    out = {"decoder.embed_tokens.weight": ours["tok_emb.weight"], "decoder.version": torch.tensor([3.0])}
    out["decoder.output_projection.weight"] = ours["tok_emb.weight"].clone()
    if cfg.positions == "learned":
        pad_rows = torch.randn(cfg.pad_token_id + 1, cfg.d_model)
        out["decoder.embed_positions.weight"] = torch.cat([pad_rows, ours["pos_emb.weight"]])
    if cfg.final_norm:
        out["decoder.layer_norm.weight"] = ours["final_norm.weight"]
        out["decoder.layer_norm.bias"] = ours["final_norm.bias"]
    for name, t in ours.items():
        if not name.startswith("blocks."):
            continue
        _, i, rest = name.split(".", 2)
        prefix = f"decoder.layers.{i}."
        if rest.startswith("attn.qkv."):
            for proj, part in zip("qkv", t.chunk(3)):
                out[f"{prefix}self_attn.{proj}_proj.{rest.rsplit('.', 1)[1]}"] = part.clone()
        elif rest in to_fs:
            out[prefix + to_fs[rest]] = t
        else:
            base, kind = rest.rsplit(".", 1)
            out[f"{prefix}{to_fs[base]}.{kind}"] = t
    return out


@pytest.mark.parametrize("arch,positions", [("normformer-resscale", "sinusoidal"), ("postnorm", "learned")])
def test_fairseq_checkpoint_round_trip(tmp_path, arch, positions):
    torch.manual_seed(0)
    model = Transformer(preset(f"{arch}-tiny", positions=positions, scale_embedding=True)).eval()
    if model.cfg.scale_heads:
        for block in model.blocks:
            block.attn.head_gain.data.uniform_(0.5, 1.5)
    hparams = {
        "decoder_attention_heads": model.cfg.n_head,
        "decoder_normalize_before": model.cfg.norm_position == "pre",
        "max_target_positions": model.cfg.max_seq_len,
        "no_scale_embedding": False,
    }
    path = tmp_path / "checkpoint_last.pt"
    torch.save({"model": to_fairseq(model), "cfg": {"model": hparams}}, path)
    loaded = checkpoint.load(str(path))
    assert loaded.config.architecture == model.cfg.architecture
    assert loaded.config.positions == positions and loaded.config.scale_embedding
    idx = torch.randint(0, model.cfg.vocab_size, (2, 10))
    assert torch.equal(loaded.model(idx), model(idx))
    if model.cfg.scale_heads:
        buggy = checkpoint.load(str(path), fairseq_head_scale_bug=True)
        assert buggy.config.head_scale_transpose_bug
        assert not torch.allclose(buggy.model(idx), model(idx), atol=1e-4)


def test_fairseq_errors_name_file_and_tensor(tmp_path):
    torch.manual_seed(0)
    state = to_fairseq(Transformer(preset("normformer-tiny")))
    del state["decoder.layers.1.self_attn.k_proj.bias"]
    path = tmp_path / "bad.pt"
    torch.save({"model": state, "args": None}, path)
    with pytest.raises(
        ValueError, match=r"bad\.pt: tensor 'decoder\.layers\.1\.self_attn\.k_proj\.bias' is missing"
    ):
        checkpoint.load(str(path))
    torch.save({"weights": {}}, path)
    with pytest.raises(ValueError, match="expected a fairseq checkpoint dict with key 'model'"):
        checkpoint.load(str(path))
