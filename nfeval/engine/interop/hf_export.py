"""Export an nfeval causal LM as a Hugging Face model directory.

Two formats, chosen from the architecture:

- ``gpt2``: when the model is exactly GPT-2 (see ``hf_gpt2.gpt2_mismatches``), transformers' own
  ``GPT2LMHeadModel``: no remote code. GPT-2's ``Conv1D`` stores weights as (in, out), so every
  projection is transposed; the head is tied to the token embedding, as ours is.
- ``nfeval``: everything else (Post-LN, sandwich/Peri-LN, OLMo 2 order, DeepNorm, LayerNorm Scaling,
  Mix-LN, HybridNorm(*), RMSNorm, DyT, Derf, gated attention, QK-norm, NormFormer and its Table 4
  controls, sinusoidal positions, scaled embeddings, ...), as remote code:
  ``modeling_nfeval.py`` (the HF wrapper in ``hf_template/``) over
  ``nfeval_model.py`` and ``nfeval_config.py``, which are generated from nfeval's own ``model.py`` and
  ``config.py`` with their relative imports renamed, so the export runs nfeval's forward pass without
  nfeval installed.

The tokenizer becomes a ``PreTrainedTokenizerFast`` that prepends ``</s>`` (the tokenizer's EOS) as
fairseq and ``nfeval zeroshot`` do, with ``</s>`` as its BOS token (as Hugging Face's OPT tokenizer
does), so lm-eval's stock ``hf`` model scores exactly what ``nfeval zeroshot`` scores. Its
``tokenizer_config.json`` is the standard one, written here rather than by the installed transformers'
``save_pretrained`` (transformers 5 names its own ``TokenizersBackend``, which 4.x cannot load): a
built-in ``tokenizer_class`` and no ``auto_map``, so no tokenizer code is remote.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
from typing import Any

import torch
from tokenizers import Tokenizer, processors

from ...base.artifacts import atomic_write_json, atomic_write_text, provenance
from ...base.errors import CheckpointError, ConfigError, MissingDataError, UserError
from ...base.home import hf_cache_error
from ...base.sweep_lock import LOCK, folder_lock
from ..checkpoints import checkpoint
from ..model.config import ModelConfig
from ..text.fairseq_tokenizer import dictionary_path
from ..text.tokenization import load_tokenizer, special_ids
from .hf_gpt2 import gpt2_config, gpt2_mismatches, gpt2_state_dict

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_template", "modeling_nfeval.py")
GENERATED_PREFIX = "nfeval_"  # engine/model/model.py is written as nfeval_model.py, and so on
LM_EVAL_MODEL_ARGS = "pretrained={dir},dtype=float32"  # + trust_remote_code=True for the nfeval format
VERIFY_TOLERANCE = 1e-5
TOKENIZER_CLASS = "PreTrainedTokenizerFast"  # built into every transformers version: no remote tokenizer code


def remote_code_files(package: str = "nfeval.engine.model", root: str = "model") -> dict[str, str]:
    """Returns {file name: source} of the remote code: the HF wrapper plus nfeval's model modules.

    Starts from ``package.root`` (``engine/model/model.py``) and follows its relative imports (``from .config
    import ...``, ``from ..base.errors import ...``), renaming each module ``nfeval_<name>`` so the files
    stand alone in the export. An import of nfeval itself (``import nfeval``) fails.
    """
    top = package.split(".")[0]
    files = {"modeling_nfeval.py": open(TEMPLATE, encoding="utf-8").read()}
    todo, seen = [f"{package}.{root}"], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = importlib.util.find_spec(module).origin
        source = open(path, encoding="utf-8").read()
        parent = module.rpartition(".")[0]
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                if node.module is None:
                    raise RuntimeError(
                        f"{path}:{node.lineno}: only 'from .module import ...' can be exported"
                    )
                todo.append(importlib.util.resolve_name("." * node.level + node.module, parent))
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.append(node.module)
            if any(m.split(".")[0] == top for m in modules):
                raise RuntimeError(f"{path}:{node.lineno}: imports {top}, which an export cannot")
        renamed = re.sub(  # from ..base.errors import -> from .nfeval_errors import
            r"^(\s*)from \.+(?:\w+\.)*(\w+) import",
            rf"\1from .{GENERATED_PREFIX}\2 import",
            source,
            flags=re.M,
        )
        name = GENERATED_PREFIX + module.rpartition(".")[2] + ".py"
        if name in files:
            raise RuntimeError(f"{path}: two exported modules would both be named {name}")
        files[name] = renamed
    return files


def nfeval_config_json(cfg: ModelConfig, **extra: Any) -> dict[str, Any]:
    """Returns the remote-code ``config.json``: nfeval's fields plus what transformers needs."""
    return {
        "architectures": ["NFEvalForCausalLM"],
        "auto_map": {
            "AutoConfig": "modeling_nfeval.NFEvalConfig",
            "AutoModelForCausalLM": "modeling_nfeval.NFEvalForCausalLM",
        },
        "model_type": "nfeval",
        **cfg.to_dict(),
        "tie_word_embeddings": True,
        "dtype": "float32",
        **extra,
    }


def write_model(out: str, ckpt: checkpoint.Checkpoint, extra: dict[str, Any], pad_id: int | None) -> str:
    """Writes config.json, weights and (for the nfeval format) the remote code; returns the format.

    ``pad_id`` (the tokenizer's) goes into GPT-2's config only: nfeval's own ``pad_token_id`` also
    offsets sinusoidal positions, so the remote-code config keeps the model's.
    """
    cfg = ckpt.config
    state = {k: v.detach().float().cpu().contiguous() for k, v in ckpt.model.state_dict().items()}
    weights = os.path.join(out, "model.safetensors")
    if not gpt2_mismatches(cfg):  # GPT2LMHeadModel's files: its config, its tensors (the head tied)
        config = gpt2_config(cfg, pad_token_id=pad_id, architectures=["GPT2LMHeadModel"], **extra)
        atomic_write_text(os.path.join(out, "config.json"), config.to_json_string())
        checkpoint.save_weights(weights, gpt2_state_dict(state, cfg.n_layer), {"format": "pt"})
        return "gpt2"
    prefixed = {checkpoint.HF_EXPORT_PREFIX + k: v for k, v in state.items()}
    checkpoint.save_weights(weights, prefixed, {"format": "pt"})
    atomic_write_json(os.path.join(out, "config.json"), nfeval_config_json(cfg, **extra))
    for name, source in remote_code_files().items():
        atomic_write_text(os.path.join(out, name), source)
    return "nfeval"


def write_tokenizer(out: str, tok: Tokenizer, max_length: int) -> dict[str, int | None]:
    """Writes ``tokenizer.json`` (prepending ``</s>``) and a standard ``tokenizer_config.json`` (class
    ``TOKENIZER_CLASS``, its special tokens and length, no ``auto_map``); returns the special token ids."""
    tok = Tokenizer.from_str(tok.to_str())  # a copy: the checkpoint's tokenizer stays as it is
    ids = special_ids(tok)
    prefix = tok.id_to_token(ids.eos)
    prepend = processors.TemplateProcessing(
        single=f"{prefix} $A", pair=f"{prefix} $A $B", special_tokens=[(prefix, ids.eos)]
    )
    tok.post_processor = (
        prepend if tok.post_processor is None else processors.Sequence([tok.post_processor, prepend])
    )
    vocab = tok.get_vocab(with_added_tokens=True)
    names = {
        "bos_token": prefix,
        "eos_token": prefix,
        "pad_token": tok.id_to_token(ids.pad),
        "unk_token": "<unk>" if "<unk>" in vocab else None,
        "mask_token": None if ids.mask is None else tok.id_to_token(ids.mask),
    }
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {"tokenizer_class": TOKENIZER_CLASS, "model_max_length": max_length}
    atomic_write_json(
        os.path.join(out, "tokenizer_config.json"), config | {k: v for k, v in names.items() if v}
    )
    return {k.removesuffix("_token") + "_token_id": (vocab[v] if v else None) for k, v in names.items()}


@torch.no_grad()
def verify(out: str, ckpt: checkpoint.Checkpoint, fmt: str) -> float:
    """Returns the largest |logit difference| between the export (loaded by transformers) and nfeval.

    Raises RuntimeError when it exceeds ``VERIFY_TOLERANCE``: the export is then not written.
    """
    from transformers import AutoModelForCausalLM
    from transformers.utils import HF_MODULES_CACHE

    try:
        hf = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=fmt == "nfeval", dtype=torch.float32)
    except OSError as e:  # the remote code is copied into transformers' module cache (under HF_HOME)
        variable = "HF_MODULES_CACHE" if os.environ.get("HF_MODULES_CACHE") else "HF_HOME"
        why = "transformers copies the export's remote code to load and check it"
        user = hf_cache_error(e, HF_MODULES_CACHE, why, variable)
        if user is None:
            raise
        raise user from e
    model = ckpt.model.float().eval()
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, ckpt.config.vocab_size, (2, min(32, ckpt.config.max_seq_len)), generator=g)
    diff = (hf.eval()(idx).logits - model(idx)).abs().max().item()
    if diff > VERIFY_TOLERANCE:
        raise RuntimeError(
            f"{out}: exported logits differ from nfeval's by {diff:.2e} (> {VERIFY_TOLERANCE})"
        )
    return diff


def load_source(path: str, tokenizer: str | None, fairseq_head_scale_bug: bool) -> checkpoint.Checkpoint:
    """Returns the checkpoint to export (fp32, HeadScale unfolded), checked to be an exportable causal LM."""
    if not os.path.exists(path):
        raise MissingDataError(
            f"{path}: no such checkpoint (expected an nfeval run/checkpoint dir or a fairseq .pt)"
        )
    ckpt = checkpoint.load(path, dtype=torch.float32, fairseq_head_scale_bug=fairseq_head_scale_bug)
    if ckpt.config.objective != "clm":
        raise CheckpointError(
            f"{ckpt.path}: objective {ckpt.config.objective!r}: export-hf writes causal LMs "
            "(AutoModelForCausalLM); masked-LM checkpoints are not exported"
        )
    if tokenizer is not None and os.path.isfile(path) and dictionary_path(path, None) is not None:
        raise ConfigError(
            f"{path}: has a fairseq dict.txt beside it: its ids are dict.txt indices, not the --tokenizer's; "
            "exporting that two-step tokenizer is not supported (export without --tokenizer)"
        )
    if tokenizer is not None:
        try:
            ckpt.tokenizer = load_tokenizer(tokenizer)
        except UserError as e:  # name the flag: the checkpoint's own tokenizer is not the one at fault
            raise type(e)(f"--tokenizer: {e}") from None
        if ckpt.tokenizer.get_vocab_size() > ckpt.config.vocab_size:
            raise ConfigError(
                f"--tokenizer {tokenizer}: {ckpt.tokenizer.get_vocab_size()} tokens, more than the model's "
                f"vocab_size {ckpt.config.vocab_size}: its ids are not the model's"
            )
    return ckpt


def check_out(out_dir: str, overwrite: bool) -> None:
    """Raises ConfigError when ``out_dir`` holds files and ``overwrite`` is off, or is not a folder."""
    if os.path.isfile(out_dir):
        raise ConfigError(f"--out {out_dir}: is a file, expected a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not overwrite:
        raise ConfigError(f"--out {out_dir}: exists and is not empty (pass --overwrite to replace it)")


def replace_dir(tmp: str, out_dir: str) -> None:
    """Moves the finished ``tmp`` folder to ``out_dir``, replacing what was there only at the end."""
    old = None
    if os.path.exists(out_dir):
        old = f"{out_dir.rstrip(os.sep)}.old-{os.getpid()}"
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old:
        shutil.rmtree(old)


def export_hf(
    path: str,
    out_dir: str,
    tokenizer: str | None = None,
    overwrite: bool = False,
    fairseq_head_scale_bug: bool = False,
) -> dict[str, Any]:
    """Exports the causal LM at ``path`` to ``out_dir``; returns a summary (format, files, max logit diff).

    Everything is written into a temp folder beside ``out_dir``, loaded back with transformers and
    compared with nfeval's logits, and only then renamed into place. One export into ``out_dir`` at a
    time: the temp folder's lock (``sweep_lock.folder_lock``) is held throughout, and another export
    there is refused at once.
    """
    full = os.path.abspath(out_dir)
    tmp = os.path.join(os.path.dirname(full), f".{os.path.basename(full)}.tmp-export")
    with folder_lock(tmp):
        check_out(out_dir, overwrite)
        ckpt = load_source(path, tokenizer, fairseq_head_scale_bug)
        _clear(tmp)  # what a killed export left
        return _export_into(tmp, full, path, ckpt)


def _clear(folder: str) -> None:
    """Deletes everything in ``folder`` but its lock file; returns None."""
    for name in set(os.listdir(folder)) - {LOCK}:
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _export_into(tmp: str, out_dir: str, path: str, ckpt) -> dict[str, Any]:
    """Writes and checks the export in ``tmp`` (holding its lock), then renames it to ``out_dir``;
    returns the summary."""
    try:
        tokens: dict[str, int | None] = {}
        if ckpt.tokenizer is not None:
            tokens = write_tokenizer(tmp, ckpt.tokenizer, ckpt.config.max_seq_len)
        source = {
            "path": os.path.abspath(path),
            "fingerprint": ckpt.fingerprint,
            "architecture": ckpt.config.architecture,
        }
        extra = {
            "bos_token_id": tokens.get("bos_token_id"),
            "eos_token_id": tokens.get("eos_token_id"),
            "nfeval_export": provenance(source=source),
        }
        fmt = write_model(tmp, ckpt, extra, tokens.get("pad_token_id"))
        summary = {
            "out": out_dir,
            "format": fmt,
            "class": "GPT2LMHeadModel" if fmt == "gpt2" else "NFEvalForCausalLM",
            "trust_remote_code": fmt == "nfeval",
            "not_gpt2_because": gpt2_mismatches(ckpt.config),
            "tokenizer": bool(tokens),
            "source": source,
            "max_abs_logit_diff": verify(tmp, ckpt, fmt),
            "lm_eval_model_args": LM_EVAL_MODEL_ARGS.format(dir=out_dir)
            + (",trust_remote_code=True" if fmt == "nfeval" else ""),
        }
        atomic_write_text(os.path.join(tmp, "README.md"), readme(summary))
        summary["files"] = sorted(set(os.listdir(tmp)) - {LOCK})
        replace_dir(tmp, out_dir)
    except BaseException:
        if os.path.isdir(tmp):  # not yet renamed into place
            _clear(tmp)
        raise
    os.unlink(os.path.join(out_dir, LOCK))  # renamed with the folder; still held until the lock's block ends
    return summary


def _loading(summary: dict[str, Any]) -> tuple[str, str, str, str]:
    """Returns what the README says on loading the export: ``from_pretrained``'s extra argument, the code
    the model runs, the line that loads its tokenizer and, for remote code, the note on transformers 5's
    ``AutoTokenizer``."""
    if summary["trust_remote_code"]:
        remote = ", trust_remote_code=True"
        code = "remote code: modeling_nfeval.py over nfeval_model.py and nfeval_config.py; nfeval not needed"
    else:
        remote, code = "", "transformers' own GPT-2; no remote code"
    if summary["tokenizer"] and summary["trust_remote_code"]:
        tok_load = (
            "tok = PreTrainedTokenizerFast.from_pretrained(DIR)  # prepends </s>, as fairseq and nfeval\n"
        )
    elif summary["tokenizer"]:
        tok_load = "tok = AutoTokenizer.from_pretrained(DIR)  # prepends </s>, as fairseq and nfeval do\n"
    else:
        tok_load = "# no tokenizer: the source carried none (a fairseq checkpoint); export with --tokenizer\n"
    auto_tokenizer_note = (
        "transformers 5's `AutoTokenizer` reads config.json first, and config.json names remote code (the "
        "model's): without `trust_remote_code=True` it asks whether to run it, and warns of a blank model "
        "type when told no; the tokenizer loads either way."
        if summary["trust_remote_code"]
        else ""
    )
    return remote, code, tok_load, auto_tokenizer_note


def readme(summary: dict[str, Any]) -> str:
    """Returns the README.md written into the export: how to load it and score it as nfeval does."""
    source = summary["source"]
    remote, code, tok_load, auto_tokenizer_note = _loading(summary)
    why = "; ".join(summary["not_gpt2_because"]) or "—"
    return f"""# nfeval export: {source["architecture"]} causal LM

Exported by `nfeval export-hf` from `{source["path"]}` (weights sha256 `{source["fingerprint"]}`).

- Format: `{summary["format"]}`, class `{summary["class"]}` ({code}).
- Not GPT-2 because: {why}.
- Logits checked against nfeval's at export time: max |diff| = {summary["max_abs_logit_diff"]:.2e} (fp32).

```python
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
model = AutoModelForCausalLM.from_pretrained(DIR{remote})
{tok_load}```

## Tokenizer

nfeval, like fairseq, scores every text as `</s>` followed by the text's tokens. The exported tokenizer
does the same: `tok(text)` prepends `</s>` (add_special_tokens=True, the default), and its `bos_token`
is `</s>` (as in Hugging Face's OPT tokenizer), so lm-eval uses `</s>` for empty contexts too. With
`add_special_tokens=False` nothing is added. It is a plain `PreTrainedTokenizerFast` (named in
tokenizer_config.json; no remote code): `PreTrainedTokenizerFast.from_pretrained(DIR)` loads it with any
transformers version, and so does `AutoTokenizer.from_pretrained(DIR)` with transformers 4.x.
{auto_tokenizer_note}

## lm-evaluation-harness

lm-eval's stock `hf` model gives the same zero-shot metrics as `nfeval zeroshot` on the source
checkpoint with these model arguments (`add_bos_token` unset or True; False would drop the `</s>`
and change every score):

```
lm_eval --model hf --model_args {summary["lm_eval_model_args"]} --tasks ...
```

nfeval's extra GPT-3-convention metrics (`acc_per_token`, `acc_uncond`, ...) come from nfeval's own
model adapter; lm-eval's `hf` model reports lm-eval's `acc`/`acc_norm`, equal to nfeval's.
The remote-code model ignores `attention_mask`: right padding (lm-eval's, for scoring) is fine;
generation recomputes the whole prefix each step (no KV cache) and left-padded batches are unsupported.
"""
