"""The paper's recipes: each init scheme's per-kind weight statistics against their analytic values
(and GPT-2's against Hugging Face's own init), the presets' recipe per objective, the training recipe
(RoBERTa's Adam eps and blocks for masked LMs), user overrides winning, and config.json stating it all."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch
from conftest import make_corpus, tiny_train_config

from nfeval.base.fingerprint import fingerprint_model
from nfeval.cli import main
from nfeval.commands.train import add_arguments
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.model.config import ARCHITECTURES, RECIPES, SIZES, ModelConfig, preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.training.run_inputs import model_config
from nfeval.engine.training.train import train
from nfeval.engine.training.train_config import TrainConfig, training_recipe
from nfeval.engine.training.train_flags import config_from_args

SHAPES = [
    dict(n_layer=2, d_model=64, n_head=4, d_ffn=256, vocab_size=512, max_seq_len=256),
    dict(n_layer=3, d_model=128, n_head=8, d_ffn=384, vocab_size=1000, max_seq_len=128),
]


def weight_kinds(model: Transformer) -> dict[str, torch.Tensor]:
    """Returns every weight kind pooled over the layers, flattened (token embeddings without the
    padding row)."""
    d, blocks = model.cfg.d_model, model.blocks

    def pool(get) -> torch.Tensor:
        return torch.cat([get(b).detach().flatten() for b in blocks])

    kinds = {
        "q": pool(lambda b: b.attn.qkv.weight[:d]),
        "k": pool(lambda b: b.attn.qkv.weight[d : 2 * d]),
        "v": pool(lambda b: b.attn.qkv.weight[2 * d :]),
        "qkv_bias": pool(lambda b: b.attn.qkv.bias),
        "out_proj": pool(lambda b: b.attn.out_proj.weight),
        "out_proj_bias": pool(lambda b: b.attn.out_proj.bias),
        "fc1": pool(lambda b: b.fc1.weight),
        "fc1_bias": pool(lambda b: b.fc1.bias),
        "fc2": pool(lambda b: b.fc2.weight),
        "fc2_bias": pool(lambda b: b.fc2.bias),
        "tok_emb": torch.cat(
            [
                model.tok_emb.weight[: model.cfg.pad_token_id],
                model.tok_emb.weight[model.cfg.pad_token_id + 1 :],
            ]
        )
        .detach()
        .flatten(),
        "pos_emb": model.pos_emb.weight.detach().flatten(),
    }
    if model.cfg.objective == "mlm":
        kinds["mlm_dense"] = model.mlm_dense.weight.detach().flatten()
        kinds["mlm_dense_bias"] = model.mlm_dense.bias.detach().flatten()
    return kinds


def expected_stats(cfg: ModelConfig) -> dict[str, tuple[float, float | None]]:
    """Returns {kind: (std, bound of a uniform draw or None)} for ``cfg.init``."""
    d, f, L = cfg.d_model, cfg.d_ffn, cfg.n_layer
    if cfg.init == "fairseq":

        def uniform(bound: float) -> tuple[float, float]:
            return bound / math.sqrt(3), bound

        qkv = uniform((1 / math.sqrt(2)) * math.sqrt(6 / (2 * d)))  # xavier, gain 1/sqrt(2)
        return {
            **dict.fromkeys("qkv", qkv),
            "qkv_bias": uniform(1 / math.sqrt(d)),  # nn.Linear's default
            "out_proj": uniform(math.sqrt(6 / (2 * d))),  # xavier, gain 1
            "out_proj_bias": (0.0, None),
            "fc1": uniform(1 / math.sqrt(d)),  # nn.Linear's default: kaiming(a=sqrt 5) = U(+-1/sqrt(fan_in))
            "fc1_bias": uniform(1 / math.sqrt(d)),
            "fc2": uniform(1 / math.sqrt(f)),
            "fc2_bias": uniform(1 / math.sqrt(f)),
            "tok_emb": (d**-0.5, None),
            "pos_emb": (d**-0.5, None),
            "mlm_dense": uniform(1 / math.sqrt(d)),
            "mlm_dense_bias": uniform(1 / math.sqrt(d)),
        }
    if cfg.init == "megatron":  # N(0, σ²) truncated at ±3σ, σ = sqrt(2/(5d)); residual σ/sqrt(2L)
        cut = math.exp(-4.5) / math.sqrt(2 * math.pi) / math.erf(3 / math.sqrt(2))
        shrink = math.sqrt(1 - 6 * cut)  # the std of a unit normal truncated at ±3

        def truncated(std: float) -> tuple[float, float]:
            return shrink * std, 3 * std

        std = math.sqrt(2 / (5 * d))
        return {
            **dict.fromkeys(("q", "k", "v", "fc1", "mlm_dense", "tok_emb", "pos_emb"), truncated(std)),
            **dict.fromkeys(("out_proj", "fc2"), truncated(std / math.sqrt(2 * L))),
            **dict.fromkeys(
                ("qkv_bias", "out_proj_bias", "fc1_bias", "fc2_bias", "mlm_dense_bias"), (0.0, None)
            ),
        }
    residual = 0.02 / math.sqrt(2 * L) if cfg.init == "gpt2" else 0.02
    return {
        **dict.fromkeys(("q", "k", "v", "fc1", "mlm_dense"), (0.02, None)),
        **dict.fromkeys(("qkv_bias", "out_proj_bias", "fc1_bias", "fc2_bias", "mlm_dense_bias"), (0.0, None)),
        "out_proj": (residual, None),
        "fc2": (residual, None),
        "tok_emb": (d**-0.5 if cfg.init == "gpt2" and cfg.scale_embedding else 0.02, None),
        "pos_emb": (0.02, None),
    }


def assert_stats(name: str, t: torch.Tensor, std: float, bound: float | None) -> None:
    """Asserts mean 0 and std ``std`` within 6 sampling errors; a uniform draw also fills its bound."""
    n = t.numel()
    if std == 0:
        assert torch.count_nonzero(t) == 0, name
        return
    assert abs(float(t.mean())) < 6 * std / math.sqrt(n), name
    assert float(t.std()) == pytest.approx(std, rel=6 / math.sqrt(2 * n)), name
    if bound is not None:
        assert float(t.abs().max()) <= bound and float(t.abs().max()) > 0.95 * bound, name


@pytest.mark.parametrize("shape", SHAPES, ids=["d64", "d128"])
@pytest.mark.parametrize(
    "init, overrides",
    [
        ("fairseq", {}),
        ("fairseq", {"objective": "mlm"}),
        ("gpt2", {}),
        ("gpt2", {"scale_embedding": True}),
        ("bert", {"objective": "mlm"}),
        ("megatron", {}),
        ("megatron", {"objective": "mlm", "scale_embedding": True}),
    ],
)
def test_init_statistics_equal_the_analytic_values(shape, init, overrides):
    torch.manual_seed(0)
    cfg = ModelConfig(**shape, positions="learned", init=init, **overrides)
    model = Transformer(cfg)
    expected = expected_stats(cfg)
    for name, t in weight_kinds(model).items():
        assert_stats(name, t, *expected[name])
    pad_row = model.tok_emb.weight[cfg.pad_token_id]
    # fairseq's Embedding zeroes padding; GPT-2 and OLMo have no padding row
    assert (torch.count_nonzero(pad_row) == 0) == (init not in ("gpt2", "megatron"))
    for name, p in model.named_parameters():  # norms, HeadScale/ResScale gains, the MLM bias
        if p.ndim == 1 and not name.endswith(
            ("qkv.bias", "out_proj.bias", "fc1.bias", "fc2.bias", "dense.bias")
        ):
            assert torch.all(p == (1.0 if name.endswith(("norm.weight", "gain")) else 0.0)), name


@pytest.mark.parametrize("shape", SHAPES, ids=["d64", "d128"])
def test_gpt2_init_matches_hugging_face_gpt2(shape):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    ours = weight_kinds(Transformer(ModelConfig(**shape, positions="learned", init="gpt2")))
    hf_cfg = GPT2Config(
        n_embd=shape["d_model"],
        n_layer=shape["n_layer"],
        n_head=shape["n_head"],
        n_inner=shape["d_ffn"],
        vocab_size=shape["vocab_size"],
        n_positions=shape["max_seq_len"],
        bos_token_id=0,
        eos_token_id=0,
    )
    hf = GPT2LMHeadModel(hf_cfg).transformer
    pairs = {
        "q": torch.cat([h.attn.c_attn.weight.flatten() for h in hf.h]),  # c_attn is q, k, v
        "out_proj": torch.cat([h.attn.c_proj.weight.flatten() for h in hf.h]),
        "fc1": torch.cat([h.mlp.c_fc.weight.flatten() for h in hf.h]),
        "fc2": torch.cat([h.mlp.c_proj.weight.flatten() for h in hf.h]),
        "tok_emb": hf.wte.weight.flatten(),
        "pos_emb": hf.wpe.weight.flatten(),
    }
    ours["q"] = torch.cat([ours["q"], ours["k"], ours["v"]])
    for name, theirs in pairs.items():
        a, b = ours[name], theirs.detach()
        error = math.sqrt(1 / (2 * a.numel()) + 1 / (2 * b.numel()))
        assert float(a.std()) == pytest.approx(float(b.std()), rel=6 * error), name


def test_init_does_not_change_loading(tmp_path, tiny_tokenizer):
    """A stored config without ``init`` loads as gpt2 (what trained it); the weights load as stored
    whatever the config's init says."""
    torch.manual_seed(0)
    model = Transformer(preset("normformer-tiny", vocab_size=tiny_tokenizer.get_vocab_size()))
    path = tmp_path / "ckpt"
    checkpoint.save(str(path), model, tiny_tokenizer)
    config = json.loads((path / "config.json").read_text())
    assert config["model"]["init"] == "fairseq"
    del config["model"]["init"]
    (path / "config.json").write_text(json.dumps(config))
    loaded = checkpoint.load(str(path))
    assert loaded.config.init == "gpt2"
    assert loaded.fingerprint == fingerprint_model(model)
    assert ModelConfig.from_dict({**config["model"], "init": "bert"}).init == "bert"


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
@pytest.mark.parametrize("size", list(SIZES))
def test_every_preset_takes_its_objectives_recipe(arch, size):
    clm = preset(f"{arch}-{size}")
    assert (clm.positions, clm.scale_embedding, clm.init, clm.embedding_norm) == (
        "sinusoidal",
        True,
        "fairseq",
        False,
    )
    # fairseq: a final LayerNorm for Pre-LN (and for sandwich, OLMo 2's order and HybridNorm, whose blocks
    # end with an add, as its authors' OLMo code keeps), none for Post-LN/DeepNorm
    assert clm.final_norm == (clm.norm_position in ("pre", "sandwich", "olmo2", "hybrid"))
    if clm.ngpt:  # a causal LM only: no masked-LM recipe
        return
    mlm = preset(f"{arch}-{size}", objective="mlm")
    assert (mlm.positions, mlm.scale_embedding, mlm.init, mlm.embedding_norm) == (
        "learned",
        False,
        "bert",
        True,
    )
    mine = preset(
        f"{arch}-{size}", objective="mlm", positions="sinusoidal", init="gpt2", embedding_norm=False
    )
    assert (mine.positions, mine.init, mine.embedding_norm) == ("sinusoidal", "gpt2", False)


def test_training_recipe_per_objective_and_overrides():
    clm = training_recipe(TrainConfig(), max_seq_len=2048)
    both = dict(beta1=0.9, beta2=0.98, weight_decay=0.01, warmup=0.01)
    assert clm == dict(name="fairseq_lm", eps=1e-8, seq_len=2048, **both)
    mlm = training_recipe(TrainConfig(objective="mlm"), max_seq_len=2048)
    assert mlm == dict(name="roberta", eps=1e-6, seq_len=512, **both)
    assert training_recipe(TrainConfig(model={"objective": "mlm"}), 256)["seq_len"] == 256  # capped
    mine = training_recipe(TrainConfig(objective="mlm", eps=1e-8, beta2=0.95, seq_len=128), 2048)
    assert (mine["eps"], mine["beta2"], mine["seq_len"], mine["beta1"]) == (1e-8, 0.95, 128, 0.9)


def test_command_line_overrides_win_over_the_recipe(tmp_path):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--out", str(tmp_path), "--max-steps", "1", "--objective", "mlm", "--eps", "1e-7"]
    argv += ["--set", "positions=sinusoidal", "--set", "init=fairseq"]
    cfg = config_from_args(parser.parse_args(argv))
    mcfg = model_config(cfg, tok_vocab=300, pad_id=1)
    assert (mcfg.objective, mcfg.positions, mcfg.init, mcfg.scale_embedding) == (
        "mlm",
        "sinusoidal",
        "fairseq",
        False,
    )
    assert training_recipe(cfg, mcfg.max_seq_len)["eps"] == 1e-7
    with pytest.raises(ValueError, match="init='xavier': expected one of"):
        config_from_args(parser.parse_args([*argv, "--set", "init=xavier"]))


def test_run_config_states_its_recipe(tmp_path, capsys):
    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(300), encoding="utf-8")
    for objective, init, eps in (("clm", "fairseq", 1e-8), ("mlm", "bert", 1e-6)):
        run = tmp_path / objective
        train(tiny_train_config(str(corpus), objective=objective, max_steps=1, seq_len=None), str(run))
        config = json.loads((run / "config.json").read_text())
        assert config["model"]["init"] == init
        recipe = config["train"]["recipe"]
        assert recipe["eps"] == eps and recipe["name"] == ("roberta" if objective == "mlm" else "fairseq_lm")
        assert recipe["seq_len"] == config["train"]["seq_len"] == 256  # tiny: max_seq_len 256 < 512
        capsys.readouterr()  # train's log lines
        assert main(["info", str(run), "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert (info["init"], info["adam_eps"], info["adam_betas"]) == (init, eps, "(0.9, 0.98)")


def test_every_reproduce_run_takes_its_objectives_recipe():
    from nfeval.pipelines.reproduce.plan import RUNS
    from nfeval.pipelines.reproduce.run_specs import Context, train_config
    from nfeval.pipelines.scales import SCALES

    for scale in SCALES.values():
        ctx = Context(out="unused", scale=scale, budget=scale.budget, seeds=1, tokenizer="unused")
        for key, spec in RUNS.items():
            cfg = train_config(ctx, key, seed=1)
            mcfg = model_config(cfg, tok_vocab=300, pad_id=1)
            recipe = preset(f"{spec.arch}-{scale.size}", objective=spec.objective)
            for name in ("positions", "scale_embedding", "init", "embedding_norm"):
                assert getattr(mcfg, name) == getattr(recipe, name), (scale.name, key, name)
            if scale.name == "125M":
                assert mcfg.dropout == mcfg.attn_dropout == 0.1


def test_a_run_saved_under_the_old_recipe_resumes_as_it_started(tmp_path, monkeypatch):
    """A run nfeval saved before the recipe (GPT-2 embeddings and init, no ``init`` field, FLOPs
    counted otherwise) resumes with its own model, blocks and FLOP count, bitwise as if never stopped."""
    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(300), encoding="utf-8")
    cfg = tiny_train_config(str(corpus), max_steps=4, ckpt_interval=2)
    run, reference = tmp_path / "run", tmp_path / "reference"
    old = dict(positions="learned", scale_embedding=False, init="gpt2", embedding_norm=False)
    with monkeypatch.context() as m:
        m.setitem(RECIPES["fairseq_lm"], "model", old)
        train(cfg, str(reference))
        train(cfg, str(run))
    step2 = run / "checkpoints" / "step_00000002"
    for folder in (run, step2):  # as the old version wrote them
        config = json.loads((folder / "config.json").read_text())
        del config["model"]["init"]
        config["train"]["flops_per_token"] = 12345.0
        (folder / "config.json").write_text(json.dumps(config))
    (run / "model.safetensors").unlink()  # killed before its final save
    summary = train(cfg, str(run), resume=True)
    loaded = checkpoint.load(str(run))
    assert (loaded.config.positions, loaded.config.init) == ("learned", "gpt2")
    assert json.loads((run / "config.json").read_text())["model"]["init"] == "gpt2"  # now stated
    assert summary["flops"] == 4 * 2 * 32 * 12345.0  # steps x tokens per step x the run's own count

    def losses(folder):
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"]) for r in rows if r["kind"] == "train"]

    assert losses(run) == losses(reference)
