"""fairseq transformer_lm checkpoints load with the same forward (including the old HeadScale bug) and
score text through GPT-2 BPE + dict.txt exactly as the model fed the hand-mapped ids."""

from __future__ import annotations

import argparse
import json
import os
import random

import pytest
import torch
from lm_eval.api.instance import Instance

from nfeval.base.errors import CheckpointError, ConfigError, DataError
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.checkpoints.fairseq_import import LAYER_NAMES, FairseqConfigWarning
from nfeval.engine.model.config import ModelConfig, preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.text.fairseq_tokenizer import FairseqTokenizer
from nfeval.engine.text.tokenization import gpt2_bpe, train_bpe
from nfeval.model_adapters import NFEvalLM
from nfeval.model_adapters.config import ScoringConfig


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
    if cfg.embedding_norm:
        out["decoder.layernorm_embedding.weight"] = ours["emb_norm.weight"]
        out["decoder.layernorm_embedding.bias"] = ours["emb_norm.bias"]
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


def fairseq_config(cfg: ModelConfig, **changes) -> dict:
    """Returns the saved fairseq config (``cfg["model"]``) of ``cfg``, every setting of the decoder as
    fairseq's transformer_lm_gpt writes it, with ``changes``."""
    activation = {"gelu": "gelu", "gelu_tanh": "gelu_accurate", "relu_squared": "relu_squared"}
    hparams = {
        "_name": "transformer_lm_gpt", "activation_fn": activation[cfg.activation], "dropout": cfg.dropout,
        "attention_dropout": cfg.attn_dropout, "activation_dropout": 0.0, "relu_dropout": 0.0,
        "decoder_embed_dim": cfg.d_model, "decoder_output_dim": cfg.d_model, "decoder_input_dim": cfg.d_model,
        "decoder_ffn_embed_dim": cfg.d_ffn, "decoder_layers": cfg.n_layer,
        "decoder_attention_heads": cfg.n_head, "decoder_normalize_before": cfg.norm_position == "pre",
        "no_decoder_final_norm": not cfg.final_norm, "adaptive_softmax_cutoff": None,
        "adaptive_softmax_dropout": 0, "adaptive_softmax_factor": 4, "no_token_positional_embeddings": False,
        "share_decoder_input_output_embed": True, "character_embeddings": False, "adaptive_input": False,
        "tie_adaptive_weights": False, "tie_adaptive_proj": False,
        "decoder_learned_pos": cfg.positions == "learned", "decoder_layerdrop": 0.0,
        "decoder_layers_to_keep": None, "layernorm_embedding": cfg.embedding_norm,
        "no_scale_embedding": not cfg.scale_embedding, "checkpoint_activations": False,
        "quant_noise_pq": 0.0, "quant_noise_pq_block_size": 8, "quant_noise_scalar": 0.0,
        "add_bos_token": False, "tokens_per_sample": cfg.max_seq_len, "max_target_positions": cfg.max_seq_len,
        "scale_attn": cfg.scale_attn, "scale_fc": cfg.scale_fc, "scale_heads": cfg.scale_heads,
        "scale_resids": cfg.scale_resids,
    }  # fmt: skip
    return {**hparams, **changes}


@pytest.mark.parametrize("arch,positions", [("normformer-resscale", "sinusoidal"), ("postnorm", "learned")])
def test_fairseq_checkpoint_round_trip(tmp_path, arch, positions):
    torch.manual_seed(0)
    model = Transformer(preset(f"{arch}-tiny", positions=positions, scale_embedding=True)).eval()
    if model.cfg.scale_heads:
        for block in model.blocks:
            block.attn.head_gain.data.uniform_(0.5, 1.5)
    path = tmp_path / "checkpoint_last.pt"
    torch.save({"model": to_fairseq(model), "cfg": {"model": fairseq_config(model.cfg)}}, path)
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
    model = Transformer(preset("normformer-tiny"))
    state = to_fairseq(model)
    del state["decoder.layers.1.self_attn.k_proj.bias"]
    path = tmp_path / "bad.pt"
    torch.save({"model": state, "args": argparse.Namespace(**fairseq_config(model.cfg))}, path)
    with pytest.raises(
        ValueError, match=r"bad\.pt: tensor 'decoder\.layers\.1\.self_attn\.k_proj\.bias' is missing"
    ):
        checkpoint.load(str(path))
    torch.save({"weights": {}}, path)
    with pytest.raises(ValueError, match="expected a fairseq checkpoint dict with key 'model'"):
        checkpoint.load(str(path))


# --- fairseq checkpoints scored from text: GPT-2 BPE -> dict.txt -> fairseq indices -----------------------

GPT2_DIR = "/work/shared/data/tokenizer/gpt2"
TEXTS = ["The cat sat on the mat.", "A dog ran under the old tree, and the cat watched."]


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """GPT-2's real BPE files when the shared data has them, else a tiny byte-level BPE saved the same way."""
    if os.path.isfile(os.path.join(GPT2_DIR, "encoder.json")):
        return GPT2_DIR
    from conftest import make_text

    out = tmp_path_factory.mktemp("bpe")
    tok = train_bpe(make_text(200, seed=3), vocab_size=300)
    vocab, merges = tok.model.save(str(out))
    os.replace(vocab, out / "encoder.json")
    os.replace(merges, out / "vocab.bpe")
    return str(out)


def write_fairseq_lm(folder, bpe_dir, positions="learned", final_norm=True, cfg_flags=False):
    """Writes model.pt (fairseq names, hydra-style cfg) and dict.txt (a shuffled subset of the BPE ids of
    TEXTS, one id left out so it maps to <unk>); returns (path, nfeval model, {bpe id: fairseq index})."""
    bpe_ids = sorted({i for t in TEXTS for i in gpt2_bpe(bpe_dir).encode(t).ids})
    random.Random(0).shuffle(bpe_ids)
    listed = bpe_ids[1:]  # bpe_ids[0] is not in dict.txt: <unk>
    lines = [f"{i} {100 - n}" for n, i in enumerate(listed)]
    lines += [f"madeupword{n:04d} 0" for n in range(-(4 + len(lines)) % 8)]  # fairseq pads to 8
    (folder / "dict.txt").write_text("\n".join(lines) + "\n")
    torch.manual_seed(1)
    cfg = preset("prenorm-tiny", vocab_size=4 + len(lines), positions=positions, final_norm=final_norm,
                 scale_embedding=True)  # fmt: skip
    model = Transformer(cfg).eval()
    state = to_fairseq(model)
    if positions == "sinusoidal":
        state["decoder.embed_positions._float_tensor"] = torch.zeros(1)  # fairseq's buffer
    hparams = fairseq_config(cfg, scale_attn=cfg_flags, scale_fc=cfg_flags, scale_heads=cfg_flags)
    path = folder / "model.pt"
    torch.save({"model": state, "cfg": {"model": hparams, "task": {"_name": "language_modeling"}}}, path)
    return str(path), model, {b: 4 + n for n, b in enumerate(listed)}


def by_hand_logprob(model, bpe_dir, index, context, continuation) -> float:
    """Returns log p(continuation | </s> context) with the BPE ids mapped through dict.txt by hand."""
    bpe = gpt2_bpe(bpe_dir)
    ctx = [2] + [index.get(i, 3) for i in bpe.encode(context).ids]
    cont = [index.get(i, 3) for i in bpe.encode(continuation).ids]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ctx + cont]))[0].double(), -1)
    return sum(float(logp[len(ctx) - 1 + k, t]) for k, t in enumerate(cont))


@pytest.mark.parametrize(
    "positions,final_norm", [("learned", True), ("sinusoidal", True), ("learned", False)]
)
def test_fairseq_text_scores_equal_mapped_ids(tmp_path, bpe_dir, positions, final_norm):
    path, model, index = write_fairseq_lm(tmp_path, bpe_dir, positions, final_norm)
    ckpt = checkpoint.load(path, tokenizer=bpe_dir)  # dict.txt beside model.pt
    assert isinstance(ckpt.tokenizer, FairseqTokenizer)
    assert ckpt.config.positions == positions and ckpt.config.final_norm == final_norm
    pairs = [("The cat sat on the", " mat."), ("A dog ran under the old", " tree, and the cat watched.")]
    lm = NFEvalLM(ckpt, ScoringConfig(device="cpu", batch_size=2, progress=False))
    got = lm.loglikelihood(
        [
            Instance("loglikelihood", doc={}, arguments=p, idx=i, metadata=("t", i, 1))
            for i, p in enumerate(pairs)
        ],
        disable_tqdm=True,
    )
    want = [by_hand_logprob(model, bpe_dir, index, *p) for p in pairs]
    assert [g[0] for g in got] == pytest.approx(want, abs=1e-4)
    # the left-out BPE id became <unk> (3): the same ids as the hand mapping, both ways
    text = " ".join(TEXTS)
    ids = ckpt.tokenizer.encode(text).ids
    assert 3 in ids and ids == [index.get(i, 3) for i in gpt2_bpe(bpe_dir).encode(text).ids]
    for known in TEXTS:  # texts without the <unk> id come back whole (</s> dropped)
        if 3 not in ckpt.tokenizer.encode(known).ids:
            assert ckpt.tokenizer.decode([2] + ckpt.tokenizer.encode(known).ids) == known
    assert ckpt.tokenizer.decode(ids).count("<unk>") == ids.count(3)


def test_fairseq_config_flags_without_tensors_warn(tmp_path, bpe_dir):
    from nfeval.commands.info import describe

    path, model, _ = write_fairseq_lm(tmp_path, bpe_dir, cfg_flags=True)
    with pytest.warns(FairseqConfigWarning, match=r"scale_attn=True.*no attn_ln.*the weights decide"):
        ckpt = checkpoint.load(path)
    assert ckpt.config.architecture == model.cfg.architecture and not ckpt.config.scale_attn
    assert "scale_heads=True" in describe(path)["warnings"]
    (tmp_path / "plain").mkdir()
    plain, _, _ = write_fairseq_lm(tmp_path / "plain", bpe_dir)
    assert describe(plain)["warnings"] is None


def test_fairseq_unsupported_tensor_and_missing_bpe(tmp_path, bpe_dir):
    path, _, _ = write_fairseq_lm(tmp_path, bpe_dir)
    ckpt = torch.load(path, weights_only=True)
    ckpt["model"]["decoder.project_in_dim.weight"] = torch.ones(64, 64)
    torch.save(ckpt, tmp_path / "bad.pt")
    with pytest.raises(
        CheckpointError, match=r"bad\.pt: unsupported tensor 'decoder\.project_in_dim\.weight'"
    ):
        checkpoint.load(str(tmp_path / "bad.pt"))
    with pytest.raises(ConfigError, match=r"dict\.txt: a fairseq dictionary needs its BPE: pass --tokenizer"):
        checkpoint.load(path, fairseq_dict=str(tmp_path / "dict.txt"))
    (tmp_path / "dup.txt").write_text("13 5\n13 4\n")
    with pytest.raises(DataError, match=r"dup\.txt: line 2: duplicate symbol '13'"):
        checkpoint.load(path, tokenizer=bpe_dir, fairseq_dict=str(tmp_path / "dup.txt"))


def test_fairseq_cli_zeroshot_generate_info(tmp_path, bpe_dir, monkeypatch, capsys):
    """The commands take a fairseq model.pt + dict.txt + --tokenizer; generation is the greedy
    continuation of the model fed hand-mapped ids."""
    from test_zeroshot_tasks import DOCS, write_jsonl

    from nfeval.cli import main

    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "fs").mkdir()
    path, model, index = write_fairseq_lm(tmp_path / "fs", bpe_dir, cfg_flags=True)
    write_jsonl(tmp_path / "data" / "piqa" / "validation.jsonl", DOCS["piqa"])
    out = tmp_path / "zs.json"
    argv = ["zeroshot", "--ckpt", path, "--tokenizer", bpe_dir, "--tasks", "piqa", "--data-dir",
            str(tmp_path / "data"), "--device", "cpu", "--output", str(out)]  # fmt: skip
    with pytest.warns(FairseqConfigWarning):
        assert main(argv) == 0
    results = json.loads(out.read_text())
    assert results["nfeval"]["model"]["warnings"] and "piqa_local" in results["results"]
    argv = ["generate", "--ckpt", path, "--tokenizer", bpe_dir, "--prompt", "The cat sat",
            "--max-new-tokens", "4", "--device", "cpu", "--output", str(tmp_path / "g.jsonl")]  # fmt: skip
    with pytest.warns(FairseqConfigWarning):
        assert main(argv) == 0
    record = json.loads((tmp_path / "g.jsonl").read_text().splitlines()[1])
    ids = [2] + [index.get(i, 3) for i in gpt2_bpe(bpe_dir).encode("The cat sat").ids]
    with torch.no_grad():
        for _ in range(4):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    with pytest.warns(FairseqConfigWarning):
        tok = checkpoint.load(path, tokenizer=bpe_dir).tokenizer
    assert record["completion"] == tok.decode(ids[-4:]) and record["new_tokens"] == 4
    capsys.readouterr()
    assert main(["info", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "scale_attn=True" in info["warnings"] and info["architecture"] == "prenorm"


def test_export_hf_refuses_a_dict_txt_tokenizer(tmp_path, bpe_dir):
    from nfeval.engine.interop.hf_export import export_hf

    path, _, _ = write_fairseq_lm(tmp_path, bpe_dir)
    with pytest.raises(ConfigError, match=r"model\.pt: has a fairseq dict\.txt beside it"):
        export_hf(path, str(tmp_path / "hf"), tokenizer=bpe_dir)
    assert not (tmp_path / "hf").exists()


FAIRSEQ_ACTIVATION_CASES = [("gelu", "gelu"), ("gelu_accurate", "gelu_tanh"), ("gelu_fast", "gelu_tanh"),
                            ("relu_squared", "relu_squared"), ("relu", None), ("swish", None)]  # fmt: skip


@pytest.mark.parametrize("fn, ours", FAIRSEQ_ACTIVATION_CASES)
def test_fairseq_activation_maps_or_is_refused(fn, ours):
    from nfeval.engine.checkpoints.fairseq_import import _model_config

    cfg = preset("prenorm-tiny", vocab_size=40, positions="learned", scale_embedding=True)
    state = to_fairseq(Transformer(cfg))
    hparams = fairseq_config(cfg, activation_fn=fn)
    if ours is None:  # fairseq's relu (its transformer_lm default) was read as GELU before: now refused
        with pytest.raises(CheckpointError, match=f"activation_fn='{fn}'"):
            _model_config(state, hparams, "model.pt", cfg.n_layer, False)
    else:
        assert _model_config(state, hparams, "model.pt", cfg.n_layer, False).activation == ours
