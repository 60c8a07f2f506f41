"""Typed validation of the config dataclasses (``ModelConfig``, ``TrainConfig``): values from files,
``--set`` and flags checked against the fields' annotations, naming where each came from."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from ...base.errors import ConfigError

CONFIG_NAMES = {"ModelConfig": "model config", "TrainConfig": "training config"}


def _type_name(tp: Any) -> str:
    """Returns a reader's name for an annotation: 'an integer', 'a number or null', ..."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    names = {
        int: "an integer",
        float: "a finite number",
        bool: "true or false",
        str: "a string",
        type(None): "null",
        dict: "an object",
        list: "a list",
    }
    return names.get(typing.get_origin(tp) or tp, str(tp))


def _coerce(value: Any, tp: Any) -> tuple[bool, Any]:
    """Returns (accepted, value) for ``value`` against annotation ``tp`` (an int is widened to a float,
    an integral float narrowed to an int; a float must be finite)."""
    if tp is Any:
        return True, value
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, out = _coerce(value, arg)
            if ok:
                return True, out
        return False, value
    base = typing.get_origin(tp) or tp
    if base is type(None):
        return value is None, value
    if base is float:  # JSON's Infinity and NaN, and flags' inf and nan, are no setting's value
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return ok, float(value) if ok else value
    if base is int:  # an integral float (1e9 from JSON, 10.0 from a float flag) is that integer
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        return isinstance(value, int) and not isinstance(value, bool), value
    return isinstance(value, base), value


def check_fields(
    cls: type, values: Mapping[str, Any], source: str | Mapping[str, str], choices: Mapping[str, tuple] = {}
) -> dict[str, Any]:
    """Returns ``values`` checked against the field annotations of dataclass ``cls`` (ints widened to float).

    ``source`` names where the values came from (a file, ``--set``, a flag), or maps each field to its
    source. Unknown fields, values of the wrong type and values outside ``choices`` raise ConfigError
    naming the source, the field, the value and what was expected.
    """
    hints = typing.get_type_hints(cls)
    where = (
        (lambda name: source.get(name, "config")) if isinstance(source, Mapping) else (lambda name: source)
    )
    unknown = sorted(set(values) - set(hints))
    if unknown:
        raise ConfigError(
            f"{where(unknown[0])}: unknown {CONFIG_NAMES.get(cls.__name__, cls.__name__)} field(s) "
            f"{unknown}; expected a subset of {sorted(hints)}"
        )
    out = {}
    for name, value in values.items():
        ok, out[name] = _coerce(value, hints[name])
        if not ok:
            raise ConfigError(f"{where(name)}: {name}={value!r}: expected {_type_name(hints[name])}")
        if name in choices and value is not None and value not in choices[name]:
            raise ConfigError(f"{where(name)}: {name}={value!r}: expected one of {list(choices[name])}")
    return out
