"""``nfeval export-hf``: transformers loads the export; its logits, tokens and lm-eval scores are nfeval's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import lm_eval
import pytest
import torch
from test_fairseq_import import fairseq_config, to_fairseq
from test_zeroshot_cli import data_dir  # noqa: F401  (the fixture: tiny local task files)
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2LMHeadModel, PreTrainedTokenizerFast

from nfeval.cli import main as cli_main
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.interop.hf_export import export_hf, remote_code_files
from nfeval.engine.model import model as model_module
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.model_adapters.config import ScoringConfig
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot.config import ZeroShotConfig

TABLE4_CONTROLS = dict(
    ffn_glu=True, scale_fc=False, qkv_norm=True, scale_resids_attn=True, resid_scale_scalar=True,
    normformer_norm="rmsnorm",
)  # fmt: skip
# (preset, overrides, expected format): every flag the export must carry, alone or combined.
ARCHITECTURES = {
    "prenorm": ("prenorm", {}, "gpt2"),
    "postnorm": ("postnorm", {}, "nfeval"),
    "postnorm-final-norm": ("postnorm", {"final_norm": True}, "nfeval"),
    "normformer": ("normformer", {}, "nfeval"),
    "normformer-before-out-proj": ("normformer", {"head_scale_position": "before_out_proj"}, "nfeval"),
    "normformer-transpose-bug": ("normformer", {"head_scale_transpose_bug": True}, "nfeval"),
    "normformer-resscale-fairseq": (
        "normformer-resscale",
        {"positions": "sinusoidal", "scale_embedding": True},
        "nfeval",
    ),
    "prenorm-sinusoidal": ("prenorm", {"positions": "sinusoidal"}, "nfeval"),
    "prenorm-scaled-embedding": ("prenorm", {"scale_embedding": True}, "nfeval"),
    "prenorm-no-final-norm": ("prenorm", {"final_norm": False}, "nfeval"),
    "prenorm-embedding-norm": ("prenorm", {"embedding_norm": True}, "nfeval"),
    "prenorm-relu-squared": ("prenorm", {"activation": "relu_squared"}, "nfeval"),
    "sandwich": ("sandwich", {}, "nfeval"),
    "olmo2-order-qk-norm-rmsnorm": ("olmo2norm", {"qk_norm": True, "norm": "rmsnorm"}, "nfeval"),
    "deepnorm": ("deepnorm", {}, "nfeval"),
    "qknorm": ("qknorm", {}, "nfeval"),
    "rmsprenorm-no-gain": ("rmsprenorm", {"norm_affine": False}, "nfeval"),
    "normformer-table4-controls": ("normformer", TABLE4_CONTROLS, "nfeval"),
    # issue 42's schemes: each would be GPT-2-shaped but for its own field, so the export must see it
    "periln-embedding-norm": ("periln", {"embedding_norm": True}, "nfeval"),
    "lnscaling": ("lnscaling", {}, "nfeval"),
    "mixln-4-layers": ("mixln", {"n_layer": 4}, "nfeval"),  # one Post-LN block, three Pre-LN
    "dyt": ("dyt", {}, "nfeval"),
    "dyt-alphas-qk-norm-no-gain": (
        "dyt",
        {"dyt_alpha_attn": 0.8, "dyt_alpha_other": 0.2, "qk_norm": True, "norm_affine": False},
        "nfeval",
    ),
    # issue 54's schemes
    "derf": ("derf", {}, "nfeval"),
    "derf-alphas-qk-norm-no-gain": (
        "derf",
        {"dyt_alpha_attn": 0.8, "dyt_alpha_other": 0.2, "qk_norm": True, "norm_affine": False},
        "nfeval",
    ),
    "gatedattn": ("gatedattn", {}, "nfeval"),
    "hybridnorm": ("hybridnorm", {}, "nfeval"),
    "hybridnormstar-rmsnorm-gated": (
        "hybridnormstar",
        {"norm": "rmsnorm", "attn_gate": "headwise"},
        "nfeval",
    ),
    "gatedattnhead-headscale-before": (
        "gatedattnhead",
        {"scale_heads": True, "head_scale_position": "before_out_proj"},
        "nfeval",
    ),
    # nGPT: no norm layer or bias, its scalings (made non-trivial by save_model), s_z in the head
    "ngpt": ("ngpt", {}, "nfeval"),
    "ngpt-swiglu": ("ngpt", {"ffn_glu": True, "activation": "silu"}, "nfeval"),
}


# GPT-2's embeddings: the presets take fairseq's (sinusoidal, sqrt(d)-scaled), which GPT-2 cannot hold;
# the rows above change one flag from here.
GPT2_EMBEDDINGS = {"positions": "learned", "scale_embedding": False}


def save_model(path, tokenizer, arch: str, seed: int = 0, **overrides) -> str:
    """Saves a tiny checkpoint whose gains and biases are all non-trivial, so every op shows in the logits."""
    torch.manual_seed(seed)
    overrides = {**GPT2_EMBEDDINGS, **overrides}
    cfg = preset(f"{arch}-tiny", vocab_size=tokenizer.get_vocab_size(), max_seq_len=64, **overrides)
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.uniform_(0.5, 1.5)
    checkpoint.save(str(path), model, tokenizer)
    return str(path)


def nfeval_logits(path: str, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return checkpoint.load(path).model(idx)


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_export_round_trip_logits_equal(tmp_path, tiny_tokenizer, name):
    arch, overrides, fmt = ARCHITECTURES[name]
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, arch, **overrides)
    summary = export_hf(src, str(tmp_path / "hf"))
    assert summary["format"] == fmt and (summary["not_gpt2_because"] == []) == (fmt == "gpt2")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    idx = torch.randint(0, tiny_tokenizer.get_vocab_size(), (3, 40))
    with torch.no_grad():
        hf_logits = model(idx).logits
    assert (hf_logits - nfeval_logits(src, idx)).abs().max().item() <= 1e-5
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["nfeval_export"]["source"]["fingerprint"] == checkpoint.load(src).fingerprint
    assert cfg["nfeval_export"]["nfeval_version"]
    assert not [f for f in os.listdir(tmp_path) if "tmp" in f]  # the temp folder was renamed away


def test_plain_prenorm_exports_native_gpt2(tmp_path, tiny_tokenizer):
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, "prenorm")
    export_hf(src, str(tmp_path / "hf"))
    assert not list((tmp_path / "hf").glob("*.py"))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()  # no trust_remote_code
    assert type(model) is GPT2LMHeadModel
    assert model.config.activation_function == "gelu"  # exact GELU, not GPT-2's tanh gelu_new
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    idx = torch.randint(0, tiny_tokenizer.get_vocab_size(), (2, 64))
    with torch.no_grad():
        assert (model(idx).logits - nfeval_logits(src, idx)).abs().max().item() <= 1e-5


def test_remote_code_is_generated_from_nfeval_model_source():
    files = remote_code_files()
    model_src = open(os.path.join(os.path.dirname(model_module.__file__), "model.py")).read()
    renamed = re.sub(r"^from \.(\w+) import", r"from .nfeval_\1 import", model_src, flags=re.M)
    assert files["nfeval_model.py"] == renamed
    expected = {"modeling_nfeval.py", "nfeval_model.py", "nfeval_config.py", "nfeval_norms.py"}
    assert set(files) >= expected | {"nfeval_initialisation.py"}
    for source in files.values():
        assert "import nfeval" not in source and "from nfeval" not in source
        assert "mkldnn" not in source  # plain torch: nfeval's CPU kernel is applied where it trains or scores


def test_export_loads_without_nfeval(tmp_path, tiny_tokenizer):
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, "normformer")
    export_hf(src, str(tmp_path / "hf"))
    idx = torch.randint(0, tiny_tokenizer.get_vocab_size(), (2, 20))
    torch.save(idx, tmp_path / "idx.pt")
    script = (
        "import sys, torch; sys.modules['nfeval'] = None\n"  # any 'import nfeval' now fails
        "from transformers import AutoModelForCausalLM\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(tmp_path / 'hf')!r}, trust_remote_code=True)\n"
        f"torch.save(m(torch.load({str(tmp_path / 'idx.pt')!r})).logits, {str(tmp_path / 'out.pt')!r})\n"
    )
    env = {
        **os.environ,
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "",
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (torch.load(tmp_path / "out.pt") - nfeval_logits(src, idx)).abs().max().item() <= 1e-5


def test_tokenizer_round_trip(tmp_path, tiny_tokenizer):
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, "normformer")
    export_hf(src, str(tmp_path / "hf"))
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "The cat sat on the mat because it was big."
    ids = tiny_tokenizer.encode(text).ids
    eos = tiny_tokenizer.token_to_id("</s>")
    assert tok(text).input_ids == [eos] + ids  # </s> first, as fairseq and nfeval score
    assert tok(text, add_special_tokens=False).input_ids == ids
    assert tok.decode(ids) == tiny_tokenizer.decode(ids)
    assert (tok.bos_token, tok.eos_token, tok.pad_token, tok.unk_token) == ("</s>", "</s>", "<pad>", "<unk>")
    assert tok.pad_token_id == tiny_tokenizer.token_to_id("<pad>") and tok.model_max_length == 64
    readme = (tmp_path / "hf" / "README.md").read_text()
    assert "trust_remote_code=True" in readme and "prepends `</s>`" in readme


@pytest.mark.parametrize("arch", ["normformer", "prenorm"])
def test_the_tokenizer_loads_without_remote_code_or_a_prompt(
    tmp_path, tiny_tokenizer, monkeypatch, capfd, arch
):
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, arch)
    export_hf(src, str(tmp_path / "hf"))
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and "auto_map" not in config
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("asked whether to run remote code"))
    capfd.readouterr()
    ids = [tiny_tokenizer.token_to_id("</s>"), *tiny_tokenizer.encode("the cat sat").ids]
    assert PreTrainedTokenizerFast.from_pretrained(tmp_path / "hf")("the cat sat").input_ids == ids
    assert "model of type" not in capfd.readouterr().err  # no blank-model-type warning: config.json unread
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=False)
    assert tok("the cat sat").input_ids == ids and not type(tok).__module__.startswith("transformers_modules")
    if arch == "prenorm":  # GPT-2's own config: AutoTokenizer needs nothing, not even to be told
        capfd.readouterr()
        assert AutoTokenizer.from_pretrained(tmp_path / "hf")("the cat sat").input_ids == ids
        assert "model of type" not in capfd.readouterr().err


@pytest.mark.parametrize("arch", ["normformer", "prenorm"])
def test_lm_eval_hf_matches_nfeval_zeroshot(tmp_path, tiny_tokenizer, data_dir, arch):  # noqa: F811
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, arch)
    summary = export_hf(src, str(tmp_path / "hf"))
    model_args = summary["lm_eval_model_args"]
    assert model_args in (tmp_path / "hf" / "README.md").read_text()  # the documented args, exactly
    tasks = ["piqa", "openbookqa", "winogrande"]
    ours = zeroshot.evaluate(
        src,
        ZeroShotConfig(tasks=tasks, data_dir=data_dir, use_cache=False, scoring=ScoringConfig(device="cpu")),
    )
    lm_eval_task = {t: d["lm_eval_task"] for t, d in ours["nfeval"]["task_data"].items()}  # piqa_local
    names = sorted(lm_eval_task.values())
    manager = zeroshot.task_manager(data_dir, names)
    nf_args = f"pretrained={src},progress=false"
    runs = [
        lm_eval.simple_evaluate(
            model=model,
            model_args=args,
            tasks=names,
            task_manager=manager,
            device="cpu",
            batch_size=4,
            log_samples=True,
        )
        for model, args in (("hf", model_args), ("nfeval", nf_args))
    ]
    theirs, nfeval_samples = runs[0], runs[1]["samples"]
    for ours_key, task in lm_eval_task.items():
        shared = [k for k, v in theirs["results"][task].items() if isinstance(v, float)]
        assert "acc,none" in shared  # nfeval's GPT-3 extras (acc_per_token, ...) are not lm-eval's
        for key in shared:
            mine = ours["results"][ours_key][key]
            assert theirs["results"][task][key] == pytest.approx(mine, abs=1e-9), key
        flat = lambda samples: [float(ll) for s in samples for ll, _ in s["filtered_resps"]]  # noqa: E731
        hf_ll, nf_ll = flat(theirs["samples"][task]), flat(nfeval_samples[task])
        assert len(hf_ll) == len(nf_ll) and max(abs(a - b) for a, b in zip(hf_ll, nf_ll)) <= 1e-4


def test_fairseq_file_exports_without_tokenizer_or_with_given_one(tmp_path, tiny_tokenizer):
    torch.manual_seed(0)
    model = Transformer(preset("normformer-tiny", positions="sinusoidal", scale_embedding=True)).eval()
    for block in model.blocks:
        block.attn.head_gain.data.uniform_(0.5, 1.5)
    path = tmp_path / "checkpoint_last.pt"
    torch.save({"model": to_fairseq(model), "cfg": {"model": fairseq_config(model.cfg)}}, path)
    rc = cli_main(["export-hf", str(path), "--out", str(tmp_path / "hf"), "--fairseq-head-scale-bug"])
    assert rc == 0
    assert not (tmp_path / "hf" / "tokenizer.json").exists()
    assert "no tokenizer" in (tmp_path / "hf" / "README.md").read_text()
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    assert hf.config.head_scale_transpose_bug
    idx = torch.randint(0, model.cfg.vocab_size, (2, 16))
    with torch.no_grad():
        buggy = checkpoint.load(str(path), fairseq_head_scale_bug=True).model(idx)
        assert (hf(idx).logits - buggy).abs().max().item() <= 1e-5
    tiny_tokenizer.save(str(tmp_path / "tokenizer.json"))
    args = [
        "export-hf",
        str(path),
        "--out",
        str(tmp_path / "hf2"),
        "--tokenizer",
        str(tmp_path / "tokenizer.json"),
    ]
    assert cli_main(args) == 0
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf2")
    assert tok("the cat").input_ids == [tok.eos_token_id] + tiny_tokenizer.encode("the cat").ids


def test_bad_input_fails_before_writing(tmp_path, tiny_tokenizer, tiny_mlm_ckpt, capsys):
    out = tmp_path / "hf"
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.pt").write_text("{}")
    cases = [
        (str(tmp_path / "missing"), "no such checkpoint"),
        (str(tmp_path / "notes.pt"), "not a torch checkpoint"),
        (str(tmp_path / "empty"), "model.safetensors"),
        (tiny_mlm_ckpt, "masked-LM checkpoints are not exported"),
    ]
    for src, message in cases:
        assert cli_main(["export-hf", src, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "nfeval export-hf: error:" in err and message in err, err
        assert not out.exists()
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, "prenorm")
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert cli_main(["export-hf", src, "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err and (out / "keep.txt").exists()
    assert cli_main(["export-hf", src, "--out", str(out), "--overwrite", "--tokenizer", str(tmp_path)]) == 2
    assert "--tokenizer" in capsys.readouterr().err and (out / "keep.txt").exists()
    assert cli_main(["export-hf", src, "--out", str(out), "--overwrite"]) == 0
    assert not (out / "keep.txt").exists() and (out / "config.json").exists()


def test_remote_code_generates_greedily(tmp_path, tiny_tokenizer):
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, "normformer")
    export_hf(src, str(tmp_path / "hf"))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    ids = tok("The cat sat", return_tensors="pt").input_ids
    generated = model.generate(ids, max_new_tokens=4, do_sample=False)
    nf = checkpoint.load(src).model
    with torch.no_grad():
        for _ in range(4):
            ids = torch.cat([ids, nf(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, ids)


def test_remote_code_follows_relative_imports_and_refuses_the_rest(tmp_path, monkeypatch):
    """A model.py that grows a module of its own (say a KV cache) still exports; a parent import fails."""
    pkg = tmp_path / "fakepkg" / "engine"
    pkg.mkdir(parents=True)
    for folder in (pkg.parent, pkg):
        (folder / "__init__.py").write_text("")
    (pkg / "config.py").write_text("import dataclasses\n")
    (pkg / "kv_cache.py").write_text("from .config import dataclasses\n")
    (pkg / "model.py").write_text(
        "import torch\nfrom .config import dataclasses\ndef f():\n    from .kv_cache import x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    files = remote_code_files("fakepkg.engine", "model")
    assert sorted(files) == [
        "modeling_nfeval.py",
        "nfeval_config.py",
        "nfeval_kv_cache.py",
        "nfeval_model.py",
    ]
    assert files["nfeval_model.py"].endswith(
        "from .nfeval_config import dataclasses\ndef f():\n    from .nfeval_kv_cache import x\n"
    )
    (pkg.parent / "errors.py").write_text("class E(Exception): pass\n")
    (pkg / "kv_cache.py").write_text("from ..errors import E\n")  # a parent-package module follows too
    files = remote_code_files("fakepkg.engine", "model")
    assert files["nfeval_kv_cache.py"] == "from .nfeval_errors import E\n" and "nfeval_errors.py" in files
    for bad in ("from .. import artifacts\n", "from fakepkg import errors\n", "import fakepkg.engine\n"):
        (pkg / "kv_cache.py").write_text(bad)
        with pytest.raises(RuntimeError, match="kv_cache.py:1"):
            remote_code_files("fakepkg.engine", "model")


def test_resaved_export_loads(tmp_path, tiny_tokenizer):
    src = save_model(tmp_path / "ckpt", tiny_tokenizer, "normformer-resscale", positions="sinusoidal")
    export_hf(src, str(tmp_path / "hf"))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    model.save_pretrained(tmp_path / "resaved")  # as push_to_hub does: the remote code travels along
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "resaved", trust_remote_code=True)
    idx = torch.randint(0, tiny_tokenizer.get_vocab_size(), (2, 12))
    with torch.no_grad():
        assert (again(idx).logits - nfeval_logits(src, idx)).abs().max().item() <= 1e-5


# fields GPT2Config takes over (gpt2_config), and those that change nothing while every GPT2_FIELDS value
# holds: they qualify an op GPT-2 lacks (DyT's α, HeadScale's place, NormFormer's norm kind, a scalar
# λresid) or no forward pass (the init, the padding id)
GPT2_CONFIG_FIELDS = {"vocab_size", "max_seq_len", "d_model", "n_layer", "n_head", "d_ffn", "activation"}
GPT2_CONFIG_FIELDS |= {"dropout", "attn_dropout", "layer_norm_eps"}
QUALIFIERS = {"dyt_alpha_attn", "dyt_alpha_other", "head_scale_position", "head_scale_transpose_bug"}
QUALIFIERS |= {"normformer_norm", "resid_scale_scalar", "init", "pad_token_id"}


def test_every_model_field_is_gpt2s_fixed_or_a_qualifier():
    import dataclasses

    from nfeval.engine.interop.hf_gpt2 import GPT2_FIELDS
    from nfeval.engine.model.config import ModelConfig

    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unplaced = fields - set(GPT2_FIELDS) - GPT2_CONFIG_FIELDS - QUALIFIERS
    assert not unplaced, f"a new ModelConfig field needs its GPT-2 value in GPT2_FIELDS: {sorted(unplaced)}"
    assert not (set(GPT2_FIELDS) | GPT2_CONFIG_FIELDS | QUALIFIERS) - fields  # no stale names
