"""Checkpoints: a directory with ``model.safetensors``, ``config.json`` and ``tokenizer.json``.

``config.json`` is ``{"model": <ModelConfig fields>, ...}``; other top-level keys (training config,
provenance, compute so far) are kept as ``meta``. An nfeval run directory is itself a checkpoint
directory once training has finished; while it runs, its newest ``checkpoints/step_*`` is used.

``nfeval export-hf``'s remote-code folder (config.json ``model_type: nfeval``: ModelConfig's fields at the
top level, tensors named ``transformer.<ours>``) reads natively too, without running its remote code.
Before a model is built, the config's sizes are checked against the tensor shapes in the weights'
header (``check_sizes``), so a damaged config.json can neither hang nor allocate what the weights are not.

``read`` reads and hashes the weights once (the model a meta-device skeleton), ``materialize`` builds
the model from them, ``load`` is both; commands go through ``engine.checkpoints.loading.identify``, which
reads.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from ...base.artifacts import atomic_write_json, atomic_write_text, atomic_write_with
from ...base.errors import CheckpointError, ConfigError, DataError, MissingDataError
from ...base.fingerprint import fingerprint_state_dict
from ...base.jsonio import load_json
from ..model.config import ModelConfig
from ..model.model import Transformer
from ..text.fairseq_tokenizer import dictionary_path, load_fairseq_tokenizer
from ..text.tokenization import load_tokenizer
from . import rundir
from .fairseq_import import load_fairseq
from .rundir import CONFIG, TOKENIZER, WEIGHTS

HF_EXPORT_TYPE = "nfeval"  # config.json's model_type in export-hf's remote-code format
HF_EXPORT_PREFIX = "transformer."  # its tensor names: NFEvalForCausalLM.transformer is our Transformer
_OS_ERROR = re.compile(r"I/O error: (.*) \(os error (\d+)\)")  # how safetensors words a failed write


@dataclass
class Checkpoint:
    model: Transformer
    tokenizer: Tokenizer | None
    config: ModelConfig
    path: str
    fingerprint: str
    meta: dict[str, Any] = field(default_factory=dict)
    # the tensors read by ``read`` while ``model`` is a meta-device skeleton (``materialize`` builds it)
    state: dict[str, torch.Tensor] | None = None


def summary(ckpt: Checkpoint) -> dict[str, Any]:
    """Returns the model block results files carry: path, fingerprint, architecture, sizes, training
    compute."""
    cfg = ckpt.config
    return {
        "path": os.path.abspath(ckpt.path),
        "fingerprint": ckpt.fingerprint,
        "architecture": cfg.architecture,
        "objective": cfg.objective,
        "parameters": ckpt.model.num_params(),
        "n_layer": cfg.n_layer,
        "d_model": cfg.d_model,
        "compute": ckpt.meta.get("compute"),
        **({"warnings": ckpt.meta["warnings"]} if ckpt.meta.get("warnings") else {}),
    }


def save(
    directory: str,
    model: Transformer,
    tokenizer: Tokenizer | None = None,
    meta: dict[str, Any] | None = None,
) -> str:
    """Saves weights, config and tokenizer into ``directory`` (each file atomically); returns the
    fingerprint."""
    os.makedirs(directory, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    fingerprint = fingerprint_state_dict(state)
    save_weights(os.path.join(directory, WEIGHTS), state, {"format": "pt", "fingerprint": fingerprint})
    if tokenizer is not None:
        atomic_write_text(os.path.join(directory, TOKENIZER), tokenizer.to_str(pretty=True))
    atomic_write_json(
        os.path.join(directory, CONFIG),
        {**(meta or {}), "model": model.cfg.to_dict(), "fingerprint": fingerprint},
    )
    return fingerprint


def save_weights(path: str, state: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Writes ``state`` as a safetensors file at ``path`` through the atomic writer (umask permissions; a
    full or read-only disk is its one-line OutputError)."""

    def write(tmp: str) -> None:
        try:
            save_file(state, tmp, metadata=metadata)
        except SafetensorError as e:  # safetensors reports a failed write (a full disk) as its own type
            found = _OS_ERROR.search(str(e))
            if found is None:
                raise
            raise OSError(int(found.group(2)), found.group(1)) from None

    atomic_write_with(path, write)


def resolve(path: str) -> str:
    """Returns the checkpoint directory for ``path``: a checkpoint directory itself, a finished run
    dir itself, or an unfinished run's newest valid ``checkpoints/step_*`` (see ``rundir``)."""
    if not os.path.exists(path):
        raise MissingDataError(
            f"{path}: no such checkpoint (expected a directory with {WEIGHTS} and {CONFIG})"
        )
    has_weights = os.path.isfile(os.path.join(path, WEIGHTS))
    if has_weights and (not rundir.is_run_dir(path) or rundir.completion(path) is not None):
        return path
    newest, _ = rundir.newest_valid_checkpoint(path)
    if newest is not None:
        return newest
    raise MissingDataError(
        f"{os.path.join(path, WEIGHTS)}: not found (is {path} an nfeval run or checkpoint?)"
    )


def is_hf_dir(path: str) -> bool:
    """Returns True when ``path`` is a Hugging Face model directory (config.json with a ``model_type``)
    that nfeval does not read itself (export-hf's nfeval format is an nfeval checkpoint)."""
    try:
        data = load_json(os.path.join(path, "config.json"))
    except (MissingDataError, DataError):  # not HF's: the nfeval loader reports a broken config.json
        return False
    if not isinstance(data, dict) or isinstance(data.get("model"), dict):
        return False
    return "model_type" in data and data["model_type"] != HF_EXPORT_TYPE  # ours reads natively


def refuse_hf_code(path: str) -> None:
    """Raises ConfigError when the Hugging Face folder ``path`` asks to run Python code of its own
    (``auto_map`` in config.json): nfeval never runs a model folder's code, whatever the folder says (its
    own export-hf format is read natively, without that code)."""
    data = load_json(os.path.join(path, "config.json"))
    if isinstance(data, dict) and data.get("auto_map"):
        raise ConfigError(
            f"{path}: config.json's auto_map asks to run Python code shipped in the folder; refused: nfeval "
            "does not run a model folder's code (no flag allows it; load it with transformers yourself if "
            "you trust it)"
        )


def read_config(directory: str) -> tuple[ModelConfig, dict[str, Any]]:
    """Returns (model config, the rest of config.json) of a checkpoint directory, or of an export-hf
    folder (the rest is then ``{"source": "export-hf", "weights_prefix", "exported_from"}``). The
    config's sizes are checked against the weights' header when the weights exist (``check_sizes``)."""
    path = os.path.join(directory, CONFIG)
    data = load_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object (an nfeval checkpoint's config.json)")
    if "model" not in data and data.get("model_type") == HF_EXPORT_TYPE:
        names = {f.name for f in dataclasses.fields(ModelConfig)}
        fields = {k: v for k, v in data.items() if k in names}
        cfg = ModelConfig.from_dict(fields, source=f"{path} (an nfeval export-hf folder)")
        exported = (data.get("nfeval_export") or {}).get("source")
        meta = {"source": "export-hf", "weights_prefix": HF_EXPORT_PREFIX, "exported_from": exported}
    elif "model" not in data and "model_type" in data:
        raise CheckpointError(
            f"{path}: a Hugging Face model folder (model_type {data['model_type']!r}), not an nfeval "
            "checkpoint: zeroshot and generate score it through transformers; info and analyze read "
            "nfeval checkpoints and export-hf's nfeval format"
        )
    elif not isinstance(data.get("model"), dict):
        raise CheckpointError(f"{path}: missing object field 'model' (the model config)")
    else:
        cfg = ModelConfig.from_dict(data["model"], source=f"{path} field 'model'")
        meta = {k: v for k, v in data.items() if k != "model"}
    if os.path.isfile(os.path.join(directory, WEIGHTS)):
        check_sizes(directory, cfg, meta.get("weights_prefix", ""))
    return cfg, meta


def weight_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """Returns {tensor name: shape} from a safetensors file's header (no tensor is read)."""
    try:
        with safe_open(path, framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except FileNotFoundError:
        raise MissingDataError(f"{path}: not found") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file ({e})") from None


def check_sizes(directory: str, cfg: ModelConfig, prefix: str = "") -> None:
    """Raises CheckpointError naming the config.json field (n_layer, vocab_size, d_model, d_ffn,
    max_seq_len) whose value the weights' shapes contradict; reads only the weights' header."""
    weights = os.path.join(directory, WEIGHTS)
    shapes = weight_shapes(weights)
    block = re.compile(re.escape(prefix) + r"blocks\.(\d+)\.")
    found = {"n_layer": len({m.group(1) for k in shapes if (m := block.match(k))})}
    emb, fc2 = shapes.get(prefix + "tok_emb.weight"), shapes.get(prefix + "blocks.0.fc2.weight")
    if emb is not None and len(emb) == 2:
        found["vocab_size"], found["d_model"] = emb
    if fc2 is not None and len(fc2) == 2:  # (d_model, d_ffn), gated FFN or not
        found["d_ffn"] = fc2[1]
    pos = shapes.get(prefix + "pos_emb.weight")
    if cfg.positions == "learned" and pos is not None and len(pos) == 2:
        found["max_seq_len"] = pos[0]
    for name, value in found.items():
        if getattr(cfg, name) != value:
            raise CheckpointError(
                f"{os.path.join(directory, CONFIG)}: {name}={getattr(cfg, name)!r} disagrees with the "
                f"weights in {weights} ({value}); refusing to build a model from it"
            )


def check_fingerprint(directory: str, meta: dict[str, Any], fingerprint: str) -> None:
    """Raises CheckpointError when config.json's recorded fingerprint differs from the weights' one."""
    recorded = meta.get("fingerprint")
    if recorded is not None and recorded != fingerprint:
        raise CheckpointError(
            f"{os.path.join(directory, WEIGHTS)}: fingerprint mismatch: the weights hash to "
            f"{fingerprint[:16]}…, {CONFIG} records {str(recorded)[:16]}… "
            "(the file was modified or damaged after saving)"
        )


def load_state(directory: str, model: torch.nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    """Returns the checkpoint's tensors (``prefix`` stripped from their names: an export-hf folder's
    ``transformer.``) after checking every name and shape against ``model``."""
    path = os.path.join(directory, WEIGHTS)
    try:
        state = load_file(path)
    except FileNotFoundError:
        raise MissingDataError(f"{path}: not found") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file ({e})") from None
    state = {k[len(prefix) :] if prefix and k.startswith(prefix) else k: v for k, v in state.items()}
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise CheckpointError(
            f"{path}: tensor {missing[0]!r} is missing"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise CheckpointError(
            f"{path}: unexpected tensor {unexpected[0]!r} (config.json does not describe it)"
        )
    for name, t in state.items():
        if t.shape != expected[name].shape:
            raise CheckpointError(
                f"{path}: tensor {name!r} has shape {tuple(t.shape)}, config.json implies "
                f"{tuple(expected[name].shape)}"
            )
    return state


def load(
    path: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    fold_head_scale: bool = False,
    **reading: Any,
) -> Checkpoint:
    """Returns the model (eval mode, on ``device`` in ``dtype``), tokenizer, config and fingerprint
    stored at ``path``: ``read`` (``reading`` as it takes them) then ``materialize``."""
    return materialize(read(path, **reading), device, dtype, fold_head_scale)


def read(
    path: str,
    fairseq_head_scale_bug: bool = False,
    trust_checkpoint: bool = False,
    verify: bool = True,
    tokenizer: str | None = None,
    fairseq_dict: str | None = None,
) -> Checkpoint:
    """Returns the checkpoint at ``path`` with its weights read and hashed once; a directory's model is
    a meta-device skeleton holding no memory until ``materialize`` builds it from ``state``.

    ``path`` is a checkpoint/run directory, or a fairseq checkpoint file (converted on load, unpickled
    only as far as ``trust_checkpoint`` allows; ``fairseq_head_scale_bug`` reproduces pre-2021-11-03
    HeadScale; config/weights disagreements are warned about and kept in ``meta["warnings"]``).
    The tokenizer is ``tokenizer`` (a tokenizer.json or GPT-2 folder) when given, else the checkpoint's
    ``tokenizer.json``; a fairseq file with a ``dict.txt`` beside it (or ``fairseq_dict``) and a
    ``tokenizer`` gets a ``FairseqTokenizer``: the BPE of ``tokenizer`` mapped through the dictionary.
    ``verify`` checks the weights against the fingerprint config.json recorded at save time
    (CheckpointError on a mismatch).
    """
    state = None
    if os.path.isfile(path):
        model, notes = load_fairseq(
            path, head_scale_transpose_bug=fairseq_head_scale_bug, trust=trust_checkpoint
        )
        directory, meta = path, {"source": "fairseq", "warnings": notes}
        dict_path = dictionary_path(path, fairseq_dict)
        if dict_path is not None and (tokenizer is not None or fairseq_dict is not None):
            meta["fairseq_dict"] = os.path.abspath(dict_path)
            tok = load_fairseq_tokenizer(dict_path, tokenizer, model.cfg.vocab_size)
        else:
            tok = _plain_tokenizer(tokenizer, os.path.dirname(path))
        fingerprint = fingerprint_state_dict(model.state_dict())
    else:
        if fairseq_dict is not None:
            raise ConfigError(f"--fairseq-dict {fairseq_dict}: only for fairseq checkpoint files, not {path}")
        directory = resolve(path)
        cfg, meta = read_config(directory)
        with torch.device("meta"):
            model = Transformer(cfg)
        state = load_state(directory, model, meta.get("weights_prefix", ""))
        tok = _plain_tokenizer(tokenizer, directory)
        fingerprint = fingerprint_state_dict(state)
    if verify:
        check_fingerprint(directory, meta, fingerprint)
    return Checkpoint(
        model=model, tokenizer=tok, config=model.cfg, path=directory, fingerprint=fingerprint,
        meta=meta, state=state,
    )  # fmt: skip


def materialize(
    ckpt: Checkpoint,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    fold_head_scale: bool = False,
) -> Checkpoint:
    """Returns ``ckpt`` with its model built from the tensors ``read`` kept (released afterwards), moved
    to ``device``/``dtype``, in eval mode. ``fold_head_scale`` folds HeadScale gains into the attention
    output projections (once); the fingerprint stays that of the stored weights, so caches keyed by
    it are shared with the unfolded model."""
    if ckpt.state is not None:
        # the skeleton takes copies in its own dtypes (the read tensors map the file): no random init for
        # the weights to overwrite (0.1 s at 16M parameters), no ``to_empty`` (a meta tensor's
        # ``empty_like`` runs a Python decomposition, 0.4 s)
        dtypes = {name: t.dtype for name, t in ckpt.model.state_dict().items()}
        state = {name: t.to(dtypes[name], copy=True) for name, t in ckpt.state.items()}
        ckpt.model.load_state_dict(state, assign=True)
        ckpt.model.init_buffers()
        ckpt.state = None
    if fold_head_scale:
        ckpt.model.fold_head_scale()
    ckpt.model.to(device=device, dtype=dtype).eval()
    return ckpt


def _plain_tokenizer(tokenizer: str | None, directory: str) -> Tokenizer | None:
    """Returns ``tokenizer`` loaded when given, else ``directory``'s tokenizer.json if any, else None."""
    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    tok_path = os.path.join(directory, TOKENIZER)
    return load_tokenizer(tok_path) if os.path.isfile(tok_path) else None
