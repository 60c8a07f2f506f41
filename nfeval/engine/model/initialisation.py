"""Weight initialisation, one scheme per ``ModelConfig.init`` (the paper's recipe is fairseq's)."""

from __future__ import annotations

import math

import torch
from torch import nn

from .norms import deepnorm_init_

# # gpt2: every Linear and Embedding N(0, 0.02), biases 0; the residual projections (out_proj, fc2)
#   N(0, 0.02/sqrt(2L)); token embeddings N(0, d^-1/2) when scale_embedding.
# fairseq (transformer_lm_gpt: MultiheadAttention.reset_parameters, transformer_lm's Embedding):
#   q, k, v weights xavier-uniform with gain 1/sqrt(2) (each d x d block of the fused qkv), their biases
#   nn.Linear's default; out_proj xavier-uniform, bias 0; fc1, fc2 (and the MLM dense) nn.Linear's
#   default, U(+-1/sqrt(fan_in)); token and learned position embeddings N(0, d^-1/2), padding row 0.
#   The attention gate's weight (``attn_gate``) is drawn as q's rows (in its authors' code it is more rows
#   of the query projection): U(+-bound of q's xavier-uniform, fan d x d, gain 1/sqrt(2)); its bias, as
#   q's, nn.Linear's default. gpt2 and bert draw it as every Linear.
# bert (fairseq's init_bert_params): every Linear N(0, 0.02), bias 0; every Embedding N(0, 0.02),
#   padding row 0.
# megatron (OLMo's full_megatron, the init of HybridNorm's configs: its dense_model/olmo/model.py
#   reset_parameters and initialization.init_normal; init_std 0.013975… = sqrt(2/(5·2048)) in
#   configs/exps/1.2B-dense-HybriedNorm.yaml, i.e. sqrt(2/(5d))): every Linear weight N(0, σ²) truncated
#   at ±3σ, σ = sqrt(2/(5·d_model)); the residual projections (out_proj, fc2) σ/sqrt(2L), truncated at 3 of
#   their own σ; token and learned position embeddings N(0, σ²) truncated at ±3σ; biases 0 (OLMo has none);
#   the padding row kept as drawn (OLMo has none either).
# All: LayerNorms weight 1, bias 0; HeadScale and ResScale gains 1; the MLM output bias 0.
# nGPT (``ngpt.py``): the scheme's draws (biasless), then the embedding and every block matrix normalised
#   along the embedding dimension (the direction of each drawn row or column is kept); its scalings at
#   their stored init (``ngpt.Scaling``).


def init_weights(model: nn.Module) -> None:
    """Draws ``model``'s weights as its config's ``init`` scheme does (see above); returns nothing."""
    schemes = {"gpt2": _init_gpt2, "fairseq": _init_fairseq, "bert": _init_bert, "megatron": _init_megatron}
    with torch.no_grad():
        schemes[model.cfg.init](model)
    if model.cfg.norm_position == "deepnorm":  # DeepNet's beta on top of the scheme
        deepnorm_init_(model)
    model.normalize_weights()  # nGPT: its embedding and matrices start on the hypersphere


def _zero_padding_row(model: nn.Module) -> None:
    if 0 <= model.cfg.pad_token_id < model.cfg.vocab_size:
        model.tok_emb.weight[model.cfg.pad_token_id] = 0


def _normal_linear_and_embedding(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def _init_gpt2(model: nn.Module) -> None:
    cfg = model.cfg
    model.apply(_normal_linear_and_embedding)  # apply's order: the same draws as before the field existed
    for name, p in model.named_parameters():
        if name.endswith(("out_proj.weight", "fc2.weight")):
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))
    if cfg.scale_embedding:
        nn.init.normal_(model.tok_emb.weight, mean=0.0, std=cfg.d_model**-0.5)


def _init_fairseq(model: nn.Module) -> None:
    d = model.cfg.d_model
    for block in model.blocks:
        for w in block.attn.qkv.weight.split(d):  # q, k, v: views into the fused weight
            nn.init.xavier_uniform_(w, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(block.attn.out_proj.weight)
        if block.attn.gate is not None:
            bound = math.sqrt(6 / (2 * d)) / math.sqrt(2)  # xavier_uniform_'s bound for q's d x d block
            nn.init.uniform_(block.attn.gate.weight, -bound, bound)
        if block.attn.out_proj.bias is not None:
            nn.init.zeros_(block.attn.out_proj.bias)
    nn.init.normal_(model.tok_emb.weight, mean=0.0, std=d**-0.5)
    _zero_padding_row(model)
    if model.pos_emb is not None:
        nn.init.normal_(model.pos_emb.weight, mean=0.0, std=d**-0.5)


def _init_bert(model: nn.Module) -> None:
    model.apply(_normal_linear_and_embedding)
    _zero_padding_row(model)


def megatron_std(d_model: int) -> float:
    """Returns the σ of ``init="megatron"``: sqrt(2/(5·d_model)), HybridNorm's init_std at its d_model."""
    return math.sqrt(2 / (5 * d_model))


def _truncated_normal(p: torch.Tensor, std: float) -> None:
    nn.init.trunc_normal_(p, mean=0.0, std=std, a=-3 * std, b=3 * std)


def _init_megatron(model: nn.Module) -> None:
    cfg = model.cfg
    std = megatron_std(cfg.d_model)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            residual = name.endswith(("out_proj", "fc2"))
            _truncated_normal(module.weight, std / math.sqrt(2 * cfg.n_layer) if residual else std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
