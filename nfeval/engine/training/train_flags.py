"""``nfeval train``'s flags, derived both ways from TrainConfig's field declarations
(``train_config.setting``): ``add_config_flags`` adds one flag per field, ``config_from_args`` reads the
parsed command line into a TrainConfig, and ``to_flags`` writes a TrainConfig back as flags, so that
``config_from_args(parser.parse_args(to_flags(cfg))) == cfg``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from collections.abc import Callable
from typing import Any

from ...base.jsonio import load_json
from .train_config import FIELDS, TRAIN_CHOICES, TrainConfig, parse_set, set_item

_HINTS = typing.get_type_hints(TrainConfig)


def flag_name(name: str) -> str:
    """Returns the flag of TrainConfig field ``name``: ``--max-steps`` for max_steps, or its declared name."""
    return "--" + FIELDS[name].metadata["flag"].get("name", name.replace("_", "-"))


def value_type(name: str) -> type:
    """Returns the type of TrainConfig field ``name`` without its None: int, float, str, bool or dict."""
    hint = _HINTS[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def json_object(flag: str) -> Callable[[str], dict[str, Any]]:
    """Returns the argparse ``type`` of a flag whose value is a JSON object: it returns the dict, or raises
    argparse.ArgumentTypeError naming ``flag``."""

    def parse(text: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: not JSON ({e.msg})") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected a JSON object")
        return value

    return parse


def _argument(f: dataclasses.Field) -> dict[str, Any]:
    """Returns ``add_argument``'s keywords for field ``f``: its help, a type from its annotation (a bool is
    ``--x/--no-x``), its choices, and what its declaration adds. Every default is None: not given."""
    declared = {k: v for k, v in f.metadata["flag"].items() if k != "name"}
    kind = value_type(f.name)
    kwargs: dict[str, Any] = {"dest": f.name, "default": None, "help": f.metadata["help"]}
    if kind is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif "action" not in declared:
        kwargs["type"] = json_object(flag_name(f.name)) if kind is dict else kind
        if "const" in declared:
            kwargs["nargs"] = "?"
        if f.name in TRAIN_CHOICES and "type" not in declared:
            kwargs["choices"] = TRAIN_CHOICES[f.name]
    return {**kwargs, **declared}


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """Adds one flag per TrainConfig field (``--set FIELD=VALUE`` for the model overrides)."""
    for f in FIELDS.values():
        p.add_argument(flag_name(f.name), **_argument(f))


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
    default = TrainConfig()
    out: list[str] = []
    for name in FIELDS:
        value = getattr(cfg, name)
        if value == getattr(default, name):
            continue
        flag, kind = flag_name(name), value_type(name)
        if name == "model":
            out += [f"{flag}={set_item(k, v)}" for k, v in value.items()]
        elif kind is bool:
            out.append(flag if value else "--no-" + flag[2:])
        else:
            text = json.dumps(value) if kind is dict else repr(value) if kind is float else str(value)
            out.append(f"{flag}={text}")
    return out
