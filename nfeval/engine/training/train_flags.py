"""``nfeval train``'s flags, derived both ways from TrainConfig's field declarations
(``train_config.setting``): ``add_config_flags`` adds one flag per field, ``config_from_args`` reads the
parsed command line into a TrainConfig, and ``to_flags`` writes a TrainConfig back as flags, so that
``config_from_args(parser.parse_args(to_flags(cfg))) == cfg``."""

from __future__ import annotations

import argparse
from typing import Any

from ...base import config_flags
from ...base.jsonio import load_json
from .train_config import FIELDS, TrainConfig, parse_set, set_item


def flag_name(name: str) -> str:
    """Returns the flag of TrainConfig field ``name``: ``--max-steps`` for max_steps, or its declared name."""
    return config_flags.flag_name(FIELDS[name])


def value_type(name: str) -> type:
    """Returns the type of TrainConfig field ``name`` without its None: int, float, str, bool or dict."""
    return config_flags.value_type(TrainConfig, name)


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """Adds one flag per TrainConfig field (``--set FIELD=VALUE`` for the model overrides), each None when
    not given, so that ``config_from_args`` tells a flag from a --config file's value."""
    config_flags.add_config_flags(p, TrainConfig, defaults=False)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Returns the validated TrainConfig of defaults, then --config file, then command-line flags.

    A bad value fails naming where it came from: ``--config FILE``, ``flag --NAME`` or ``--set``.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if args.config:
        values.update(TrainConfig.from_dict(load_json(args.config), source=args.config).__dict__)
        sources = {name: f"--config {args.config}" for name in FIELDS}
    for name in FIELDS:
        v = getattr(args, name, None)
        if v is not None and name != "model":
            values[name], sources[name] = v, f"flag {flag_name(name)}"
    items = args.model or []
    values["model"] = {**values.get("model", {}), **parse_set(items)}
    if items:
        sources["model"] = "--set / --config field 'model'" if args.config else "--set"
    cfg = TrainConfig(**values)
    cfg.validate(sources, require_budget=not getattr(args, "resume", False))
    return cfg


def to_flags(cfg: TrainConfig) -> list[str]:
    """Returns the ``nfeval train`` flags that give ``cfg``: one per field that differs from TrainConfig's
    default (one ``--set FIELD=VALUE`` per model override), each as ``--flag=value`` so that a value
    starting with ``-`` stays a value; floats as ``repr`` writes them, exactly."""
    model = flag_name("model")
    return config_flags.to_flags(
        cfg, {"model": lambda v: [f"{model}={set_item(k, x)}" for k, x in v.items()]}
    )
