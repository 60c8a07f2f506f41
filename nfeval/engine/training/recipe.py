"""The whole training recipe of a run as one record, so that what is put side by side can be checked
to share it: initialisation, positions, embedding scale, optimizer, schedule, precision, dropout.

The learning rate is not part of it (each architecture is tuned to its own), nor is anything the model
shape, the data or the budget fix. A run's ``config.json`` holds the record under ``"recipe"``
(``run_record.meta``); a run saved before that is read from its model and train blocks, which hold
every field except, before the field existed, the initialisation: such a run's recipe cannot be told
(``of_config`` returns None).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ...base.errors import ConfigError

if TYPE_CHECKING:
    from .train_config import TrainConfig

MODEL_FIELDS = ("init", "positions", "scale_embedding", "embedding_norm", "dropout", "attn_dropout")


def record(model: dict[str, Any], train: dict[str, Any], resolved: dict[str, Any]) -> dict[str, Any]:
    """Returns the recipe of a run from its model config (a dict), its TrainConfig (a dict) and the
    optimizer values it resolved (``train_config.training_recipe``): a JSON-able dict. The fields the
    model's scheme set (nGPT's no weight decay and no warm-up) are also listed under "scheme"; a run under
    its scheme's own recipe (``train_config.own_recipe``) names that scheme under "own_recipe"."""
    scheme, own = resolved.get("scheme"), train.get("own_recipe")
    return {
        **{name: model[name] for name in MODEL_FIELDS},
        "optimizer": {
            "name": "adamw",
            "betas": [resolved["beta1"], resolved["beta2"]],
            "eps": resolved["eps"],
            "weight_decay": resolved["weight_decay"],
            "clip_grad": train["clip_grad"],
        },
        "schedule": {
            "warmup": resolved.get("warmup", train["warmup"]),
            "decay": "polynomial",
            "power": train["lr_power"],
            "end_lr": train["end_lr"],
        },
        "precision": train["dtype"],
        **({"scheme": scheme} if scheme else {}),
        **({"own_recipe": own} if own else {}),
    }


def of_train_config(cfg: TrainConfig) -> dict[str, Any]:
    """Returns the recipe a run of ``cfg`` trains under (its preset, the objective's recipe, the
    overrides), before any data is read."""
    from .train_config import preset_model, training_recipe  # and tokenizers: readers of records skip it

    model = preset_model(cfg)
    return record(model.to_dict(), dataclasses.asdict(cfg), training_recipe(cfg, model.max_seq_len))


def of_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """Returns the recipe a run's ``config.json`` (as a dict) records, or derives it from its model and
    train blocks; None when the run predates the ``init`` field, so its initialisation is unknown."""
    if isinstance(config.get("recipe"), dict):
        return config["recipe"]
    model, train = config.get("model") or {}, config.get("train") or {}
    if "init" not in model or not isinstance(train.get("config"), dict) or "recipe" not in train:
        return None
    defaults = {"positions": "learned", "scale_embedding": False, "embedding_norm": False}
    return record(
        {**defaults, "dropout": 0.0, "attn_dropout": 0.0, **model}, train["config"], train["recipe"]
    )


def flatten(recipe: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Returns ``recipe`` as {dotted field: value} (``optimizer.betas``: [0.9, 0.98])."""
    out: dict[str, Any] = {}
    for key, value in recipe.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(a: dict[str, Any], b: dict[str, Any], ignore: frozenset[str] = frozenset()) -> list[str]:
    """Returns "field: A vs B" for every field where recipes ``a`` and ``b`` differ (empty: the same), the
    dotted fields in ``ignore`` aside."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted((set(fa) | set(fb)) - ignore)
    return [f"{k}: {fa.get(k)!r} vs {fb.get(k)!r}" for k in keys if fa.get(k) != fb.get(k)]


# The field of the record that each TrainConfig field a scheme may set (ModelConfig.recipe_overrides) fills
RECORD_FIELDS = {
    "beta1": "optimizer.betas", "beta2": "optimizer.betas", "eps": "optimizer.eps",
    "weight_decay": "optimizer.weight_decay", "warmup": "schedule.warmup",
}  # fmt: skip


def scheme_fields(recipe: dict[str, Any]) -> frozenset[str]:
    """Returns the dotted fields of ``recipe`` that its model's scheme set (nGPT: optimizer.weight_decay,
    schedule.warmup) and its "scheme." entries; empty for most."""
    scheme = recipe.get("scheme") or {}
    return frozenset({RECORD_FIELDS[f] for f in scheme} | {f"scheme.{f}" for f in scheme})


def describe(recipe: dict[str, Any]) -> str:
    """Returns the recipe in words, e.g. "fairseq init, sinusoidal positions, √d embedding scale, AdamW
    (0.9, 0.98) ε 1e-08 wd 0.01, no clipping, warm-up 0.05 then linear decay to 0, fp32"."""
    opt, sched = recipe["optimizer"], recipe["schedule"]
    decay = "linear" if sched["power"] == 1 else f"power-{sched['power']:g}"
    parts = [
        f"{recipe['init']} init",
        f"{recipe['positions']} positions",
        "√d embedding scale" if recipe["scale_embedding"] else "no embedding scale",
        *(["embedding LayerNorm"] if recipe["embedding_norm"] else []),
        f"AdamW ({opt['betas'][0]:g}, {opt['betas'][1]:g}) ε {opt['eps']:g} wd {opt['weight_decay']:g}",
        clipping_text(recipe),
        f"{warmup_text(recipe)} then {decay} decay to {sched['end_lr']:g}",
        f"dropout {recipe['dropout']:g}/{recipe['attn_dropout']:g}",
        recipe["precision"],
        *([scheme_text(recipe)] if recipe.get("scheme") else []),
        *([f"{recipe['own_recipe']}'s own recipe"] if recipe.get("own_recipe") else []),
    ]
    return ", ".join(parts)


def scheme_text(recipe: dict[str, Any]) -> str:
    """Returns the recipe fields the model's scheme set, in words: "the scheme's weight_decay 0, warmup 0"."""
    fields = ", ".join(f"{k} {v:g}" for k, v in recipe["scheme"].items())
    return f"the scheme's {fields}"


def clipping_text(recipe: dict[str, Any]) -> str:
    """Returns the recipe's gradient clipping in words: "clipping 1" or "no clipping"."""
    clip = recipe["optimizer"]["clip_grad"]
    return f"clipping {clip:g}" if clip else "no clipping"


def warmup_text(recipe: dict[str, Any]) -> str:
    """Returns the recipe's warm-up in words: "warm-up 0.05 of the run", "warm-up 500 steps", "no warm-up"."""
    warm = recipe["schedule"]["warmup"]
    return "no warm-up" if not warm else f"warm-up {warm:g}" + (" steps" if warm >= 1 else " of the run")


def stability_text(recipe: dict[str, Any]) -> str:
    """Returns the parts of the recipe that decide whether a run survives a high LR, in words: "no
    clipping, warm-up 0.05 of the run" (what a verdict on a run that did not train is read under)."""
    return f"{clipping_text(recipe)}, {warmup_text(recipe)}"


def check_same(
    recipes: dict[str, dict[str, Any] | None], what: str, schemes_may_differ: bool = False
) -> dict[str, Any]:
    """Returns the one recipe every entry of ``recipes`` ({name: recipe or None}) shares; raises
    ConfigError naming ``what``, the first entry that differs and each differing field, or the entries
    whose recipe cannot be told. ``schemes_may_differ``: the fields a run's scheme set (``scheme_fields``:
    nGPT's weight decay and warm-up) may differ, and the recipe returned is the first entry's that no
    scheme changed (if any); a caller that opts in shows each run's own recipe."""
    unknown = [name for name, r in recipes.items() if r is None]
    if unknown:
        raise ConfigError(
            f"{what}: the recipe of {', '.join(unknown)} cannot be told (trained before nfeval recorded "
            "its initialisation); retrain it, or compare only runs that record one"
        )
    own = [item for item in recipes.items() if schemes_may_differ and not scheme_fields(item[1])]
    first, reference = (own or list(recipes.items()))[0]
    for name, r in recipes.items():
        ignore = scheme_fields(reference) | scheme_fields(r) if schemes_may_differ else frozenset()
        diff = differences(reference, r, ignore)
        if diff:
            raise ConfigError(
                f"{what}: {name} was trained under another recipe than {first} ({'; '.join(diff)}); "
                "runs of different recipes are not put side by side"
            )
    return reference
