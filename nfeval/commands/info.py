"""``nfeval info``: what a checkpoint or preset is, in numbers."""

from __future__ import annotations

import argparse
import json
import os
import warnings
from dataclasses import dataclass
from typing import Any

from ..base.config_flags import add_config_flags, config_from_args, flag_field
from ..engine.checkpoints import loading, torch_files
from ..engine.checkpoints.fairseq_import import FairseqConfigWarning
from ..engine.model.config import preset
from ..engine.model.model import Transformer
from ..engine.text.fairseq_tokenizer import HEAD_SCALE_BUG_HELP
from ..engine.training.train_config import TrainConfig, training_recipe


def describe(
    target: str, trust_checkpoint: bool = False, fairseq_head_scale_bug: bool = False
) -> dict[str, Any]:
    """Returns architecture, sizes, parameter counts and (for checkpoints) the fingerprint of ``target``.

    A checkpoint whose weights no longer match the fingerprint its config.json recorded is described
    anyway, its fingerprint marked "fingerprint mismatch". A fairseq checkpoint whose config disagrees
    with its weights (NormFormer flags set, tensors absent) has the disagreement under ``warnings``.
    """
    warnings_: list[str] = []
    if os.path.exists(target) or os.sep in target or target.endswith(".pt"):  # a path, even a missing one
        with warnings.catch_warnings():  # shown in the table instead
            warnings.simplefilter("ignore", FairseqConfigWarning)
            ckpt = loading.identify(
                target,
                trust_checkpoint=trust_checkpoint,
                verify=False,
                fairseq_head_scale_bug=fairseq_head_scale_bug,
                allow_hf=False,
            ).loaded
        model, fingerprint, source = ckpt.model, ckpt.fingerprint, ckpt.path
        warnings_ = ckpt.meta.get("warnings", [])
        train = ckpt.meta.get("train") or {}
        recorded = ckpt.meta.get("fingerprint")
        if recorded is not None and recorded != fingerprint:
            fingerprint = f"{fingerprint} (fingerprint mismatch: config.json records {recorded})"
    else:
        model, fingerprint, source = Transformer(preset(target)), None, f"preset {target}"
        train = {"recipe": training_recipe(TrainConfig(preset=target), model.cfg.max_seq_len)}
    cfg = model.cfg
    return {
        "source": source,
        "architecture": cfg.architecture,
        "objective": cfg.objective,
        "layers": cfg.n_layer,
        "d_model": cfg.d_model,
        "d_ffn": cfg.d_ffn,
        "heads": cfg.n_head,
        "vocab_size": cfg.vocab_size,
        "max_seq_len": cfg.max_seq_len,
        "init": cfg.init,
        "positions": cfg.positions,
        "embedding_scale": cfg.scale_embedding,
        "embedding_norm": cfg.embedding_norm,
        "final_norm": cfg.final_norm,
        **optimizer_recipe(train),
        "head_scale_position": cfg.head_scale_position if cfg.scale_heads else None,
        "head_scale_transpose_bug": cfg.head_scale_transpose_bug if cfg.scale_heads else None,
        "parameters": model.num_params(),
        "normformer_parameters": cfg.normformer_param_count(),
        "fingerprint": fingerprint,
        "warnings": "; ".join(warnings_) or None,
    }


def optimizer_recipe(train: dict[str, Any]) -> dict[str, Any]:
    """Returns the optimizer recipe of a run's config.json ``train`` block ({} for no training run):
    the resolved ``train.recipe``, or (a run saved before it existed) the ``train.config`` values."""
    recipe = train.get("recipe") or train.get("config")
    if not recipe:
        return {}
    return {
        "recipe": recipe.get("name"),
        "adam_betas": f"({recipe.get('beta1')}, {recipe.get('beta2')})",
        "adam_eps": recipe.get("eps"),
        "weight_decay": recipe.get("weight_decay"),
    }


@dataclass(frozen=True)
class InfoOptions:
    """``nfeval info``'s flags (``base.config_flags``): JSON output, and how a checkpoint file is read."""

    json: bool = flag_field(False, "print JSON instead of a table", action="store_true")
    trust_checkpoint: bool = flag_field(False, torch_files.TRUST_HELP, action="store_true")
    fairseq_head_scale_bug: bool = flag_field(False, HEAD_SCALE_BUG_HELP, action="store_true")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval info``'s target and InfoOptions' flags."""
    p.add_argument(
        "target", metavar="PATH_OR_PRESET", help="checkpoint/run dir, or preset such as normformer-125M"
    )
    add_config_flags(p, InfoOptions)


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval info``: prints what the target is."""
    opts = config_from_args(args, InfoOptions)
    info = describe(
        args.target,
        trust_checkpoint=opts.trust_checkpoint,
        fairseq_head_scale_bug=opts.fairseq_head_scale_bug,
    )
    if opts.json:
        print(json.dumps(info, indent=2))
        return 0
    width = max(map(len, info))
    for key, value in info.items():
        if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
            value = f"{value:,}"
        print(f"{key:<{width}}  {'—' if value is None else value}")
    return 0
