"""The Hugging Face causal-LM backend: scoring tokenized exactly as lm-eval's HFLM does, packed prefix
trees where the model's forward takes a 4-D mask (checked by ``tree_probe``), and HF's own ``generate``."""

from __future__ import annotations

import inspect

import torch

from ..engine.inference.backend import Backend, ModelShape, matmul_params
from ..engine.inference.generate import check_request, left_pad
from ..engine.inference.vocab_head import VocabProjection
from ..engine.model.activations import tanh_gelu
from .scorer import Row


class SigmoidTanhGELU(torch.nn.Module):
    """GPT-2's tanh GELU as ``engine.model.tanh_gelu`` computes it (x·σ(2z) at inference, 2.5× faster
    than torch's one-kernel tanh GELU on a CPU thread, as close to the float64 function)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tanh_gelu(x)


def fuse_tanh_gelu(model: torch.nn.Module) -> torch.nn.Module:
    """Returns ``model`` with each ``NewGELUActivation`` (GPT-2's tanh GELU, eight elementwise ops in
    Python, a third of a d=256 GPT-2's forward on a CPU thread) and each ``GELUTanh`` replaced by
    ``SigmoidTanhGELU``: the same function to fp32 rounding, 3.7× faster than the former."""
    from transformers.activations import GELUTanh, NewGELUActivation

    for module in model.modules():
        for name, child in module.named_children():
            if type(child) in (NewGELUActivation, GELUTanh):
                setattr(module, name, SigmoidTanhGELU())
    return model


class HFBackend(Backend):
    """A Hugging Face causal LM, tokenized exactly as lm-eval's HFLM does (so scores match HFLM's)."""

    kind = "hf"
    forward_by = "transformers"

    def __init__(self, model, tokenizer, device: torch.device, max_length: int | None = None):
        from lm_eval.models.utils import configure_pad_token, resolve_max_length

        self.model, self.device = fuse_tanh_gelu(model.eval()), device
        self.tokenizer = configure_pad_token(tokenizer, model_config=model.config)
        self.eot_id = self.tokenizer.eos_token_id
        self.prefix_id = (
            self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.eot_id
        )
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.max_length = max_length or resolve_max_length(model.config, self.tokenizer, default=2048)
        self.add_bos_default = None
        self.slices_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.tree = self.tree_probe()  # packed prefix trees (scorer.py), else one row per input

    @property
    def projection(self) -> VocabProjection | None:
        """The output projection under this backend's speed (None: not an ``nn.Linear``)."""
        return VocabProjection.of(self.model.get_output_embeddings(), self.speed)

    def linear_kernel(self, decoding_rows: int | None = None) -> str:
        """Returns ``Backend.linear_kernel``'s words for what runs here: transformers' own ``generate``
        when generating, else its forward with the engine's output projection (``VocabProjection``)."""
        if decoding_rows is not None:
            return "none: transformers generates"
        if self.device.type != "cpu":
            return super().linear_kernel()
        return f"transformers' forward; output projection: {super().linear_kernel()}"

    def encode(self, text: str, add_special_tokens: bool | None) -> list[int]:
        kwargs = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return self.tokenizer.encode(text, **kwargs)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_text(self, token_id: int) -> str | None:
        return self.tokenizer.decode(token_id)

    def features_at(self, idx, keep, position_ids=None, attn_mask=None):
        if self.tree:
            return self._hidden_at(idx, keep, position_ids, attn_mask), self.projection
        first = int(keep.any(0).nonzero()[0])  # earliest scored position in the batch
        if self.slices_logits:
            logits = self.model(idx, logits_to_keep=idx.shape[1] - first).logits
        else:
            logits = self.model(idx).logits[:, first:]
        return logits[keep[:, first:]], VocabProjection(None)

    def _hidden_at(self, idx, keep, position_ids=None, attn_mask=None) -> torch.Tensor:
        """Returns the base model's last hidden states at ``keep``: ``projection`` of them is what
        ``tree_probe`` checked equals the model's logits."""
        kwargs = {}
        if attn_mask is not None:  # additive, so that eager and SDPA attention read it alike
            blocked = torch.finfo(self.model.dtype).min
            additive = torch.zeros(attn_mask.shape, dtype=self.model.dtype, device=idx.device)
            kwargs = {
                "attention_mask": additive.masked_fill_(~attn_mask, blocked),
                "position_ids": position_ids,
            }
        return self.model.base_model(idx, **kwargs).last_hidden_state[keep]

    def accepts_tree_mask(self) -> bool:
        return self.tree

    def tree_probe(self) -> bool:
        """Returns True when the base model and output projection score a packed prefix tree (4-D mask,
        position ids) as the model's own forward scores each branch alone (two random branches)."""
        if self.projection is None:
            return False
        vocab = self.model.get_input_embeddings().weight.shape[0]
        gen = torch.Generator().manual_seed(0)
        stem, a, b = (torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (5, 3, 2))
        try:
            with torch.no_grad():
                packed = self._tree_logits(stem, a, b)
                alone = [
                    self.model(torch.tensor([stem + br], device=self.device)).logits[0, -1] for br in (a, b)
                ]
        except (TypeError, ValueError, RuntimeError, AttributeError):  # a forward refusing the 4-D mask
            return False
        return packed.shape == (2, vocab) and bool(
            torch.allclose(packed, torch.stack(alone), atol=1e-4, rtol=1e-4)
        )

    def _tree_logits(self, stem: list[int], a: list[int], b: list[int]) -> torch.Tensor:
        """Returns the logits at the last token of ``stem + a`` and ``stem + b`` packed as one tree."""
        row = Row(
            tokens=stem + a + b,
            depths=list(range(len(stem) + len(a))) + list(range(len(stem), len(stem) + len(b))),
        )
        n = len(row.tokens)
        keep = torch.zeros(1, n, dtype=torch.bool, device=self.device)
        keep[0, [len(stem) + len(a) - 1, n - 1]] = True
        hidden = self._hidden_at(torch.tensor([row.tokens], device=self.device), keep,
                                 position_ids=torch.tensor([row.depths], device=self.device),
                                 attn_mask=row.ancestor_mask(n)[None, None].to(self.device))  # fmt: skip
        return self.projection(hidden)

    def shape(self) -> ModelShape:
        vocab, d_model = self.model.get_input_embeddings().weight.shape
        return ModelShape(matmul_params(self.model), d_model, self.model.config.num_hidden_layers, vocab)

    def generate(self, prompts, max_new_tokens, sampling, stop, batch_size, progress=False):
        """The HF model's own ``generate`` (left-padded batches, its KV cache and stop strings)."""
        check_request(None, prompts, max_new_tokens, batch_size)  # the window is the HF model's to check
        out: list[list[int]] = []
        for start in range(0, len(prompts), batch_size):
            ids, real, _ = left_pad(prompts[start : start + batch_size], self.pad_id, 0, self.device)
            if not sampling.greedy:
                torch.manual_seed(sampling.seed + start)
            seqs = self.model.generate(
                ids,
                attention_mask=real.long(),
                max_new_tokens=max_new_tokens,
                do_sample=not sampling.greedy,
                temperature=sampling.temperature or None,
                top_k=sampling.top_k or None,
                top_p=sampling.top_p,
                eos_token_id=self.eot_id,
                pad_token_id=self.pad_id,
                stop_strings=[s for s in stop if s] or None,
                tokenizer=self.tokenizer,
            )
            for row in seqs[:, ids.shape[1] :].tolist():
                row = row[: row.index(self.eot_id)] if self.eot_id in row else row
                while row and row[-1] == self.pad_id:  # HF pads the rows that stopped early
                    row.pop()
                out.append(row)
        return out
