"""Each scheme's own recipe, as its paper or its authors' code trains it: the initialisation, warm-up,
clipping and optimizer a scheme is tried under before a report lists it as failing under the common
recipe. One record per scheme, each value with where it comes from; ``train_config.own_recipe`` applies
one to a TrainConfig, and the run's recipe record names it (``recipe.record``: "own_recipe").

What a record leaves out it cannot carry here: a learning rate (each run tunes its own), a schedule
shape nfeval lacks (HybridNorm's cosine decay to 0.1 of the peak; nfeval decays polynomially to
``end_lr``), and the model's own choices outside the recipe (HybridNorm's RMSNorm, SwiGLU, RoPE and
biasless Linears), which a comparison's shared model recipe fixes for every candidate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...base.errors import ConfigError

HYBRIDNORM_CONFIG = "BryceZhuo/HybridNorm dense_model/configs/exps/1.2B-dense-HybriedNorm.yaml"


@dataclass(frozen=True)
class OwnRecipe:
    """A scheme's own recipe: ModelConfig fields (``model``: the initialisation), TrainConfig fields
    (``train``), and for each field the paper section or file and line it comes from (``sources``)."""

    scheme: str  # the architecture (a preset's name, ``ModelConfig.architecture``)
    model: dict[str, Any]
    train: dict[str, Any]
    sources: dict[str, str]

    def fields(self) -> dict[str, Any]:
        """Returns every field the recipe sets, model and train together."""
        return {**self.model, **self.train}


def _hybridnorm(scheme: str, variant: str) -> OwnRecipe:
    return OwnRecipe(
        scheme=scheme,
        model={"init": "megatron"},
        train={
            "warmup": 8388608000 / 1e12,
            "clip_grad": 1.0,
            "beta1": 0.9,
            "beta2": 0.95,
            "eps": 1e-8,
            "weight_decay": 0.1,
        },
        sources={
            "variant": variant,
            "init": f"{HYBRIDNORM_CONFIG} lines 47-49 (init_fn full_megatron, init_std "
            "0.013975424859373685 = sqrt(2/(5·2048)), init_cutoff_factor 3); dense_model/olmo/model.py "
            "reset_parameters (lines 533-561, 773-795, 1243-1300): nfeval's init='megatron'",
            "warmup": f"{HYBRIDNORM_CONFIG} lines 72-73 (t_warmup 8388608000 tokens of t_max 1e12): "
            "0.84% of the run",
            "clip_grad": f"{HYBRIDNORM_CONFIG} line 104 (max_grad_norm 1.0)",
            "beta1": f"{HYBRIDNORM_CONFIG} lines 64-66 (adamw betas [0.9, 0.95])",
            "beta2": f"{HYBRIDNORM_CONFIG} lines 64-66 (adamw betas [0.9, 0.95])",
            "eps": f"{HYBRIDNORM_CONFIG} line 61 (eps 1e-8)",
            "weight_decay": f"{HYBRIDNORM_CONFIG} lines 60-62 (weight_decay 0.1, decay_norm_and_bias true)",
        },
    )


OWN_RECIPES: dict[str, OwnRecipe] = {
    "hybridnorm": _hybridnorm("hybridnorm", "HybridNorm: the config as it is"),
    # the same config with norm_pos_special_config {0: attn_norm, no ffn_residual} (its README, line 52)
    "hybridnormstar": _hybridnorm("hybridnormstar", "HybridNorm*: the README's command, lines 50-53"),
    "postnorm": OwnRecipe(
        scheme="postnorm",
        model={"init": "gpt2"},
        train={"warmup": 4000.0},
        sources={
            "init": "GPT-2's (Radford et al. 2019, §2.3: N(0, 0.02), residual projections scaled by "
            "1/sqrt(N) for N residual layers): nfeval's init='gpt2'",
            "warmup": "Vaswani et al. 2017, 'Attention Is All You Need', §5.3: warmup_steps = 4000 for the "
            "Post-LN Transformer; Xiong et al. 2020, 'On Layer Normalization in the Transformer "
            "Architecture', §3.2: Post-LN needs that warm-up (shorter ones train worse); a run of fewer "
            "updates stays in its warm-up",
        },
    ),
}


def own_recipe_for(architecture: str) -> OwnRecipe:
    """Returns the own recipe of ``architecture``; ConfigError naming the ones that have one otherwise."""
    if architecture not in OWN_RECIPES:
        raise ConfigError(
            f"{architecture!r} has no own recipe; the schemes that have one: {', '.join(OWN_RECIPES)}"
        )
    return OWN_RECIPES[architecture]


def own_recipe_mismatch(
    scheme: str, train_fields: Mapping[str, Any], model_fields: Mapping[str, Any]
) -> str | None:
    """Returns the first field where a run that names ``scheme``'s own recipe departs from it, as
    "FIELD=VALUE, its own recipe's VALUE", or None; ``train_fields`` and ``model_fields``: the run's
    TrainConfig and ModelConfig fields."""
    recipe = own_recipe_for(scheme)
    for name, value in recipe.train.items():
        if train_fields.get(name) != value:
            return f"{name}={train_fields.get(name)!r}, its own recipe's {value!r}"
    for name, value in recipe.model.items():
        if model_fields.get(name) != value:
            return f"model {name}={model_fields.get(name)!r}, its own recipe's {value!r}"
    return None
