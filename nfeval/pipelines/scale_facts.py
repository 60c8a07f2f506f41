"""What a report measured, beside what the paper measured: parameters, shape, tokens, corpus, time.

Every ``reproduce`` and ``bakeoff`` report opens with these facts, read from its own baseline run
(``facts``) and set beside the paper's 125M causal LM (``paper_facts``: nfeval's ``prenorm-125M``
preset and fairseq's ``examples/normformer/train_lm.sh``: 572,204 updates of 16 sequences × 2 updates
accumulated × 8 GPUs × 2,048 tokens), with one sentence on what a verdict at this scale can say.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..engine.checkpoints.checkpoint import read_config
from ..engine.model.config import ModelConfig, preset
from ..engine.model.model import Transformer

PAPER_UPDATES = 572_204  # --max-update of train_lm.sh
PAPER_TOKENS_PER_UPDATE = 16 * 2 * 8 * 2048  # --batch-size × --update-freq × GPUs × --tokens-per-sample
PAPER_SOURCE = "fairseq examples/normformer/train_lm.sh (train_125M)"


def parameters(cfg: ModelConfig) -> tuple[int, int]:
    """Returns (total, non-embedding) parameters of a model of ``cfg``; the tied token embedding and
    learned positions are the embedding."""
    with torch.device("meta"):
        total = sum(p.numel() for p in Transformer(cfg).parameters())
    embedding = cfg.vocab_size * cfg.d_model + (
        cfg.max_seq_len * cfg.d_model if cfg.positions == "learned" else 0
    )
    return total, total - embedding


def _shape(cfg: ModelConfig) -> dict[str, Any]:
    total, non_embedding = parameters(cfg)
    return {
        "parameters": total,
        "non_embedding_parameters": non_embedding,
        "layers": cfg.n_layer,
        "d_model": cfg.d_model,
        "heads": cfg.n_head,
        "d_ffn": cfg.d_ffn,
        "vocab_size": cfg.vocab_size,
    }


def facts(run_dir: str) -> dict[str, Any]:
    """Returns the scale facts of the finished run in ``run_dir``: its shape and parameters, tokens
    trained, tokens per parameter, corpus (name and training tokens) and training seconds."""
    cfg, meta = read_config(run_dir)
    compute, data = meta.get("compute") or {}, (meta.get("train") or {}).get("data") or {}
    tokens = int(compute.get("tokens") or 0)
    out = _shape(cfg)
    return {
        **out,
        "steps": compute.get("steps"),
        "tokens": tokens,
        "tokens_per_parameter": tokens / out["parameters"],
        "corpus": _corpus_name((data.get("corpus") or {}).get("name")),
        "corpus_tokens": (data.get("tokens") or {}).get("train_tokens"),
        "train_seconds": compute.get("wall_s"),
    }


def _corpus_name(name: str | None) -> str:
    """Returns a corpus's name as a reader knows it: a file path as its folder and file name."""
    if not name:
        return "unknown"
    return "/".join(name.split(os.sep)[-2:]) if os.sep in name else name


def paper_facts() -> dict[str, Any]:
    """Returns the same facts for the paper's 125M causal LM (as nfeval's ``prenorm-125M`` builds it)."""
    out = _shape(preset("prenorm-125M"))
    tokens = PAPER_UPDATES * PAPER_TOKENS_PER_UPDATE
    return {
        **out,
        "steps": PAPER_UPDATES,
        "tokens": tokens,
        "tokens_per_parameter": tokens / out["parameters"],
    }


def _count(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:g}"


def table(this: dict[str, Any], paper: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Returns (columns, rows) of the scale table: this report's baseline beside the paper's 125M."""

    def shape(f: dict[str, Any]) -> str:
        return f"{f['layers']} × {f['d_model']} ({f['heads']} heads, FFN {f['d_ffn']})"

    rows = [
        [
            "parameters (total / non-embedding)",
            *(f"{_count(f['parameters'])} / {_count(f['non_embedding_parameters'])}" for f in (this, paper)),
        ],
        ["layers × width", shape(this), shape(paper)],
        ["vocabulary", *(f"{f['vocab_size']:,}" for f in (this, paper))],
        ["updates of the baseline", *(f"{f['steps']:,}" for f in (this, paper))],
        ["tokens trained (baseline)", _count(this["tokens"]), _count(paper["tokens"])],
        ["tokens per parameter", *(f"{f['tokens_per_parameter']:.3g}" for f in (this, paper))],
        [
            "corpus",
            f"{this['corpus']} ({_count(this['corpus_tokens'])} training tokens)",
            "the paper's (not public)",
        ],
    ]
    return ["", "this report", f"the paper's 125M ({PAPER_SOURCE})"], rows


def caveat(this: dict[str, Any], paper: dict[str, Any]) -> str:
    """Returns the sentence under a report's title on what a verdict at this scale can and cannot say."""
    params = paper["parameters"] / this["parameters"]
    tokens = paper["tokens"] / max(1, this["tokens"])
    return (
        f"These models have {_count(this['parameters'])} parameters and trained on "
        f"{_count(this['tokens'])} tokens, {params:,.0f}× fewer parameters and {tokens:,.0f}× fewer tokens "
        "than the paper's 125M model: "
        "a verdict here says what these architectures do at this scale, with this recipe and corpus; it "
        "does not say what they do at the paper's scale."
    )


def baseline_dir(out: str, runs_folder: str, name: str, seed: int = 1) -> str | None:
    """Returns ``<out>/<runs_folder>/<name>/seed<seed>`` when it holds a run, else None."""
    path = os.path.join(out, runs_folder, name, f"seed{seed}")
    return path if os.path.isfile(os.path.join(path, "config.json")) else None
