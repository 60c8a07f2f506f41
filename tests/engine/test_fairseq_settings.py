"""A fairseq-format copy of an nfeval run (fairseq's tensor names, the same weights) imports as the same
model or is refused in one line: its saved config must say what the tensors cannot (norm placement,
embedding scale, activation, dropout), agree with the tensors where both speak, and turn on no option
that nfeval's model lacks; ``nfeval analyze grads`` then gives the run's own gradients."""

from __future__ import annotations

import argparse
import json
import os

import pytest
import torch
from conftest import make_corpus
from test_fairseq_import import fairseq_config, to_fairseq

from nfeval.analysis.grads import grad_norms
from nfeval.cli import main
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.checkpoints.fairseq_import import REQUIRED
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer

# (preset architecture, ModelConfig fields beside the tiny preset's and dropout)
MODELS = [
    ("postnorm", {}),
    ("prenorm", {}),
    ("normformer", {}),
    (
        "prenorm",
        dict(positions="learned", embedding_norm=True, scale_embedding=False, activation="gelu_tanh"),
    ),
]


def save_run(folder, tokenizer, arch: str = "postnorm", **fields) -> Transformer:
    """Saves a tiny nfeval model with dropout on and its gains and biases away from their initial values
    (as training leaves them) to ``folder`` with ``tokenizer``; returns the model."""
    torch.manual_seed(0)
    cfg = preset(
        f"{arch}-tiny", vocab_size=tokenizer.get_vocab_size(), max_seq_len=64, dropout=0.1, attn_dropout=0.1,
        **fields,
    )  # fmt: skip
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    checkpoint.save(str(folder), model, tokenizer)
    return model


def write_copy(path, model: Transformer, drop: tuple[str, ...] = (), **changes) -> str:
    """Writes ``model`` as a fairseq checkpoint (its full saved config with ``changes``, a value of None
    removing the field; the tensors of ``drop`` left out); returns its path."""
    hparams = {k: v for k, v in fairseq_config(model.cfg, **changes).items() if v is not None}
    state = {k: v for k, v in to_fairseq(model).items() if k not in drop}
    torch.save({"model": state, "cfg": {"model": hparams}}, path)
    return str(path)


def refusal(capsys, argv: list[str]) -> str:
    """Returns the one line a command that must refuse printed (exit status 2)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("arch, fields", MODELS)
def test_a_fairseq_copy_imports_as_the_same_model(tmp_path, tiny_tokenizer, arch, fields):
    model = save_run(tmp_path / "run", tiny_tokenizer, arch, **fields)
    run = checkpoint.load(str(tmp_path / "run"))
    copy = checkpoint.load(write_copy(tmp_path / "copy.pt", model))
    assert copy.config == run.config and copy.config.dropout == 0.1 and copy.config.attn_dropout == 0.1
    assert copy.fingerprint == run.fingerprint
    idx = torch.randint(0, model.cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    assert torch.equal(copy.model(idx), run.model(idx))
    grads = []
    for loaded in (run, copy):  # train mode: the same dropout masks from the same seed
        torch.manual_seed(5)
        grads.append(grad_norms(loaded.model.train(), idx[:, :-1], idx[:, 1:]))
    assert grads[0] == grads[1]


@pytest.mark.parametrize("arch", ["postnorm", "prenorm", "normformer"])
def test_analyze_grads_gives_the_runs_own_gradients(tmp_path, tiny_tokenizer, arch):
    model = save_run(tmp_path / "run", tiny_tokenizer, arch)
    copy = write_copy(tmp_path / "copy.pt", model)
    # the copy as the import read it before: dropout off (what made its fc2 gradients differ)
    undropped = write_copy(tmp_path / "undropped.pt", model, dropout=0.0, attention_dropout=0.0)
    (tmp_path / "corpus.txt").write_text(make_corpus(200), encoding="utf-8")
    tiny_tokenizer.save(str(tmp_path / "tokenizer.json"))
    out = tmp_path / "grads.png"
    run = str(tmp_path / "run")
    argv = ["analyze", "grads", "--ckpt", run, "--ckpt", copy, "--ckpt", undropped, "--ckpt", run,
            "--tokenizer", str(tmp_path / "tokenizer.json"), "--data", str(tmp_path / "corpus.txt"),
            "--batches", "2", "--batch-size", "2", "--seq-len", "32", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    models = json.loads((tmp_path / "grads.json").read_text())["models"]
    values = {m["name"]: m["values"] for m in models}
    assert list(values) == ["run", "copy.pt", "undropped.pt", "run#4"]
    assert values["copy.pt"] == values["run"] == values["run#4"]  # seeded dropout: run to run too
    assert values["undropped.pt"]["fc2"] != values["run"]["fc2"]


@pytest.mark.parametrize("field", REQUIRED)
def test_a_missing_setting_is_refused_naming_file_and_field(tmp_path, tiny_tokenizer, capsys, field):
    model = save_run(tmp_path / "run", tiny_tokenizer)
    path = write_copy(tmp_path / "copy.pt", model, **{field: None})
    err = refusal(capsys, ["analyze", "grads", "--ckpt", path, "--out", str(tmp_path / "g.png")])
    assert f"{path}: the saved fairseq config has no '{field}'" in err
    assert sorted(os.listdir(tmp_path)) == ["copy.pt", "run"]


def test_a_file_without_a_saved_config_is_refused(tmp_path, tiny_tokenizer, capsys):
    model = save_run(tmp_path / "run", tiny_tokenizer)
    path = tmp_path / "copy.pt"
    torch.save({"model": to_fairseq(model), "args": None, "cfg": None}, path)
    err = refusal(capsys, ["info", str(path)])
    assert f"{path}: no saved fairseq model config (cfg['model'] or args)" in err
    torch.save({"model": to_fairseq(model), "args": argparse.Namespace(**fairseq_config(model.cfg))}, path)
    assert checkpoint.load(str(path)).config == model.cfg  # fairseq's old args serve as well


CONTRADICTIONS = [  # (architecture, fields, config changes, tensors left out, the refusal's words)
    ("postnorm", {}, dict(decoder_normalize_before=True, no_decoder_final_norm=False), (),
     "means a 'decoder.layer_norm.weight', but the file has none"),
    ("prenorm", {}, dict(decoder_normalize_before=False), (),
     "(decoder_normalize_before=False, no_decoder_final_norm=False) means no 'decoder.layer_norm.weight', "
     "but the file holds one"),
    ("prenorm", {}, dict(no_decoder_final_norm=True), (), "no_decoder_final_norm=True) means no"),
    ("prenorm", {}, dict(decoder_learned_pos=True), (),
     "(decoder_learned_pos=True) means a 'decoder.embed_positions.weight', but the file has none"),
    ("prenorm", dict(positions="learned"), dict(decoder_learned_pos=False), (),
     "(decoder_learned_pos=False) means no 'decoder.embed_positions.weight', but the file holds one"),
    ("prenorm", {}, dict(layernorm_embedding=True), (),
     "(layernorm_embedding=True) means a 'decoder.layernorm_embedding.weight'"),
    ("prenorm", dict(embedding_norm=True), dict(layernorm_embedding=False), (),
     "(layernorm_embedding=False) means no 'decoder.layernorm_embedding.weight'"),
    ("prenorm", {}, dict(share_decoder_input_output_embed=False), ("decoder.output_projection.weight",),
     "(share_decoder_input_output_embed=False) means a 'decoder.output_projection.weight'"),
    ("normformer", {}, dict(decoder_attention_heads=8), (),
     "decoder_attention_heads=8 but the tensors say 4"),
    ("prenorm", {}, dict(decoder_ffn_embed_dim=128), (), "decoder_ffn_embed_dim=128 but the tensors say 256"),
    ("prenorm", {}, dict(decoder_layers=3), (), "decoder_layers=3 but the tensors say 2"),
]  # fmt: skip


@pytest.mark.parametrize("arch, fields, changes, drop, words", CONTRADICTIONS)
def test_a_config_contradicting_the_tensors_is_refused(
    tmp_path, tiny_tokenizer, capsys, arch, fields, changes, drop, words
):
    model = save_run(tmp_path / "run", tiny_tokenizer, arch, **fields)
    path = write_copy(tmp_path / "copy.pt", model, drop, **changes)
    err = refusal(capsys, ["info", path])
    assert f"error: {path}: " in err and words in err, err


UNSUPPORTED = [  # (config changes, the refusal's words)
    (dict(adaptive_input=True), "adaptive_input=True: nfeval's model has no adaptive input embeddings"),
    (dict(adaptive_softmax_cutoff="20000,60000"), "adaptive_softmax_cutoff='20000,60000': nfeval's model"),
    (dict(character_embeddings=True), "character_embeddings=True"),
    (dict(no_token_positional_embeddings=True), "no_token_positional_embeddings=True"),
    (dict(cross_self_attention=True), "cross_self_attention=True: nfeval's model has no cross+self"),
    (dict(activation_dropout=0.1), "activation_dropout=0.1: nfeval's model has no dropout after the FFN"),
    (dict(relu_dropout=0.1), "relu_dropout=0.1"),
    (dict(decoder_layerdrop=0.2), "decoder_layerdrop=0.2: nfeval's model has no LayerDrop"),
    (dict(decoder_layers_to_keep="0"), "decoder_layers_to_keep='0'"),
    (dict(quant_noise_pq=0.1), "quant_noise_pq=0.1: nfeval's model has no quantization noise"),
    (dict(quant_noise_scalar=0.1), "quant_noise_scalar=0.1"),
    (dict(base_layers=1), "base_layers=1: nfeval's model has no BASE layers"),
    (dict(activation_fn="relu"), "activation_fn='relu': nfeval computes gelu"),
    (dict(decoder_input_dim=32), "decoder_input_dim=32 but the tensors say 64"),
    (dict(decoder_output_dim=32), "decoder_output_dim=32 but the tensors say 64"),
    (dict(dropout=1.5), "dropout=1.5: expected a number in [0, 1)"),
    (dict(attention_dropout="0.1"), "attention_dropout='0.1': expected a number in [0, 1)"),
    (dict(decoder_normalize_before="yes"), "decoder_normalize_before='yes': expected true or false"),
]


@pytest.mark.parametrize("changes, words", UNSUPPORTED)
def test_an_option_nfeval_cannot_compute_is_refused(tmp_path, tiny_tokenizer, capsys, changes, words):
    model = save_run(tmp_path / "run", tiny_tokenizer, "prenorm")
    path = write_copy(tmp_path / "copy.pt", model, **changes)
    assert f"{path}: {words}" in refusal(capsys, ["info", path])


def test_analyze_grads_refuses_a_checkpoint_without_a_tokenizer(tmp_path, tiny_tokenizer, capsys):
    model = save_run(tmp_path / "run", tiny_tokenizer)
    path = write_copy(tmp_path / "copy.pt", model)
    err = refusal(capsys, ["analyze", "grads", "--ckpt", path, "--out", str(tmp_path / "g.png")])
    assert f"{path}: the checkpoint carries no tokenizer: pass --tokenizer" in err
    assert sorted(os.listdir(tmp_path)) == ["copy.pt", "run"]
