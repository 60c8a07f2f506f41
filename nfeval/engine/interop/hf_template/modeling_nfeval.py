"""Hugging Face wrapper of an nfeval Transformer (any architecture of ``ModelConfig``), for remote code.

``nfeval export-hf`` copies this file into the exported directory beside ``nfeval_model.py`` and
``nfeval_config.py``, which are nfeval's own ``engine/model/model.py`` and ``engine/model/config.py`` with
their relative imports renamed: the forward pass is nfeval's, not a second copy. Nothing here imports
nfeval, so the export loads where nfeval is not installed::

    AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)

This file is a template: it only imports inside an exported directory.
"""

from __future__ import annotations

import dataclasses

import torch
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .nfeval_config import ModelConfig
from .nfeval_model import Transformer, sinusoidal_table

MODEL_FIELDS = [f.name for f in dataclasses.fields(ModelConfig)]


class NFEvalConfig(PretrainedConfig):
    """nfeval's ModelConfig fields as attributes, plus HF's standard names for the sizes."""

    model_type = "nfeval"
    attribute_map = {
        "hidden_size": "d_model",
        "num_hidden_layers": "n_layer",
        "num_attention_heads": "n_head",
        "intermediate_size": "d_ffn",
        "max_position_embeddings": "max_seq_len",
    }

    def __init__(self, **kwargs):
        defaults = dataclasses.asdict(ModelConfig())
        for name in MODEL_FIELDS:
            if name != "pad_token_id":  # PretrainedConfig keeps pad_token_id itself
                setattr(self, name, kwargs.pop(name, defaults[name]))
        kwargs.setdefault("pad_token_id", defaults["pad_token_id"])
        kwargs.setdefault("tie_word_embeddings", True)
        super().__init__(**kwargs)

    def model_config(self) -> ModelConfig:
        """Returns the nfeval ModelConfig these attributes describe."""
        fields = {name: getattr(self, name) for name in MODEL_FIELDS}
        return ModelConfig(**fields)


class NFEvalForCausalLM(PreTrainedModel, GenerationMixin):
    """The causal LM: ``logits = Transformer(input_ids)``; the output projection is the tied embedding."""

    config_class = NFEvalConfig
    base_model_prefix = "transformer"
    _no_split_modules = ["Block"]

    def __init__(self, config: NFEvalConfig):
        super().__init__(config)
        self.transformer = Transformer(config.model_config())
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: torch.nn.Module) -> None:
        # from_pretrained leaves non-persistent buffers empty: rebuild the sinusoidal table.
        if isinstance(module, Transformer) and getattr(module, "sin_pos", None) is not None:
            cfg = module.cfg
            table = sinusoidal_table(cfg.max_seq_len + cfg.pad_token_id + 1, cfg.d_model, cfg.pad_token_id)
            module.sin_pos.copy_(table[cfg.pad_token_id + 1 :])

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.transformer.tok_emb

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **unused,
    ) -> CausalLMOutput:
        """Returns logits (B, T, vocab) and, given ``labels``, the next-token cross-entropy.

        The model is causal with right padding: ``attention_mask`` is not needed for the tokens
        before the padding, which is all a causal LM scores. Left-padded batches are not supported.
        """
        logits = self.transformer(input_ids)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
            )
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, **kwargs) -> dict:
        # No KV cache: every step recomputes the whole prefix.
        return {"input_ids": input_ids}
