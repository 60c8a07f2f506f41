"""Causal LMs behind one interface (``Backend``), and the one for nfeval checkpoints (``NFEvalBackend``).

A ``Backend`` gives the zero-shot scorer and ``nfeval generate`` what they need: tokenization, special
ids, the context window, ``features_at`` (what the LM head turns into logits, only where they are
scored) and ``generate``. It lives in the engine, without lm-eval, so that ``nfeval generate`` starts
with torch and tokenizers alone; the Hugging Face backend is ``model_adapters.hf_backend``. A backend
is built plain; ``engine.fast.accelerate`` gives it the speed layer (its ``speed``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ...base.errors import CheckpointError, MissingDataError
from ..checkpoints import checkpoint
from ..checkpoints.rundir import TOKENIZER
from ..model.dtypes import long_name
from ..text.tokenization import special_ids
from .generate import Sampling, generate
from .speed import PLAIN, Speed
from .vocab_head import VocabProjection


@dataclass
class ModelShape:
    """What model FLOPs are counted from: 2 FLOPs per weight per token, 4·d per attended pair per
    layer (QKᵀ and AV), 2·d·V per scored position (the LM head)."""

    matmul_params: int  # weights of the matrices a token goes through, embeddings and LM head excluded
    d_model: int
    n_layer: int
    vocab_size: int

    def flops(self, tokens: int, attended_pairs: int, scored_positions: int) -> float:
        """Returns the forward FLOPs of scoring."""
        return (
            2.0 * self.matmul_params * tokens
            + 4.0 * self.d_model * self.n_layer * attended_pairs
            + 2.0 * self.d_model * self.vocab_size * scored_positions
        )


def matmul_params(model: torch.nn.Module) -> int:
    """Returns the weights of the matrices every token goes through: 2-D parameters outside embedding
    tables (a tied LM head is the token embedding, counted per scored position instead)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    head = getattr(model, "get_output_embeddings", lambda: None)()
    if head is not None:
        embeddings.add(id(head.weight))
    return sum(p.numel() for p in model.parameters() if p.dim() == 2 and id(p) not in embeddings)


def no_tokenizer_message(path: str) -> str:
    """Returns what to do when the checkpoint at ``path`` carries no tokenizer."""
    if os.path.isfile(path):
        return (
            f"{path}: no tokenizer for this fairseq checkpoint: pass --tokenizer DIR (GPT-2's encoder.json + "
            "vocab.bpe) with its dict.txt beside it (or --fairseq-dict), or put a tokenizer.json beside it"
        )
    tok_path = os.path.join(path, TOKENIZER)
    return f"{tok_path}: not found (scoring needs the tokenizer; or pass --tokenizer)"


class Backend:
    """The model, tokenizer and special ids the adapter scores and generates with."""

    kind: str
    forward_by: str  # what computes the forward, for the results to say
    model: torch.nn.Module
    device: torch.device
    max_length: int
    eot_id: int
    prefix_id: int
    pad_id: int
    add_bos_default: bool | None
    speed: Speed = PLAIN  # the speed layer's, once ``engine.fast.accelerate`` applied it

    def encode(self, text: str, add_special_tokens: bool | None) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def token_text(self, token_id: int) -> str | None:
        """Returns the text of one (special) token, to spot strings that already start with it."""
        raise NotImplementedError

    def features_at(
        self, idx: torch.Tensor, keep: torch.Tensor, position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, VocabProjection]:  # fmt: skip
        """Returns (features at ``keep``, row-major; the ``VocabProjection`` that maps them to logits);
        ``position_ids``/``attn_mask`` for packed rows."""
        raise NotImplementedError

    def accepts_tree_mask(self) -> bool:
        """Returns True when ``features_at`` scores packed prefix trees (scorer.py)."""
        return True

    def shape(self) -> ModelShape:
        """Returns what the scorer counts model FLOPs from."""
        raise NotImplementedError

    def linear_kernel(self, decoding_rows: int | None = None) -> str:
        """Returns, for run records, the kernel of the engine's fp32 CPU linear products (``speed``'s;
        ``decoding_rows``: when generating, rows a step), or why none of them runs it: another device,
        or weights of another dtype (whose products are torch's)."""
        dtype = next(self.model.parameters()).dtype
        if self.device.type != "cpu":
            return f"none: the forward runs on {self.device.type}"
        if dtype != torch.float32:
            return f"torch: {long_name(dtype)} weights"
        return self.speed.linear_kernel(decoding_rows)

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        sampling: Sampling,
        stop: list[str],
        batch_size: int,
        progress: bool = False,
    ) -> list[list[int]]:
        """Returns each prompt's new tokens (EOS excluded), ``batch_size`` prompts at a time."""
        raise NotImplementedError


class NFEvalBackend(Backend):
    """An nfeval checkpoint (built: ``checkpoint.materialize``): ``</s>`` (the tokenizer's EOS) is
    prepended to every scored text and prompt, as fairseq does; a generated row ends at ``</s>``."""

    kind = "nfeval"
    forward_by = "nfeval engine"

    def __init__(self, ckpt: checkpoint.Checkpoint, device: torch.device):
        if not ckpt.config.causal:
            raise CheckpointError(
                f"{ckpt.path}: zero-shot scoring and generation need a causal LM (objective 'clm'), got "
                f"'{ckpt.config.objective}'"
            )
        if ckpt.tokenizer is None:
            raise MissingDataError(no_tokenizer_message(ckpt.path))
        self.ckpt, self.model, self.tokenizer, self.device = ckpt, ckpt.model, ckpt.tokenizer, device
        ids = special_ids(ckpt.tokenizer)
        self.eot_id, self.prefix_id, self.pad_id = ids.eos, ids.eos, ids.pad
        self.max_length = ckpt.config.max_seq_len
        self.add_bos_default = True

    def encode(self, text: str, add_special_tokens: bool | None) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [self.prefix_id] + ids if add_special_tokens else ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_text(self, token_id: int) -> str | None:
        return self.tokenizer.id_to_token(token_id)

    def features_at(self, idx, keep, position_ids=None, attn_mask=None):
        # without a mask, causal: right padding never reaches a real position
        hidden = self.model.encode(idx, position_ids=position_ids, attn_mask=attn_mask)
        return hidden[keep], VocabProjection(self.model.output_weight(), speed=self.speed)  # causal: unbiased

    def shape(self) -> ModelShape:
        cfg = self.ckpt.config
        return ModelShape(matmul_params(self.model), cfg.d_model, cfg.n_layer, cfg.vocab_size)

    def generate(self, prompts, max_new_tokens, sampling, stop, batch_size, progress=False):
        return generate(
            self.model, prompts, max_new_tokens=max_new_tokens, sampling=sampling, eos_id=self.eot_id,
            stop=stop, decode=self.decode, batch_size=batch_size, pad_id=self.pad_id, progress=progress,
            speed=self.speed,
        )  # fmt: skip


def nfeval_backend(
    ckpt: checkpoint.Checkpoint,
    device: torch.device,
    dtype: torch.dtype | None,
    fold_head_scale: bool = True,
    max_length: int | None = None,
) -> NFEvalBackend:
    """Returns the backend of a read checkpoint (``checkpoint.read``), built on ``device`` in ``dtype``
    (HeadScale folded when asked), its context window capped at ``max_length`` when given; plain
    (``engine.fast.accelerate`` gives it the speed layer)."""
    ckpt = checkpoint.materialize(ckpt, device, dtype, fold_head_scale)
    backend = NFEvalBackend(ckpt, device)
    if max_length:
        backend.max_length = min(max_length, backend.max_length)
    return backend
