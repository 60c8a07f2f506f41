"""Command-line flags derived both ways from a config dataclass's field declarations: ``add_config_flags``
adds one flag per field, ``config_from_args`` builds the dataclass back from the parsed arguments, and
``to_flags`` writes a config back as argv, so that ``config_from_args(parse(to_flags(cfg)), C) == cfg``.

A field declares its flag in its metadata (``flag_field`` builds such a field): ``help``, its help text
(None: a flag without one), and ``flag``, what its type does not say: ``name`` (the flag without ``--`` when
it is not the field's name with ``-`` for ``_``), ``aliases`` (other spellings of the flag, with their
``--``) and any of ``add_argument``'s keywords (``type``, ``choices``, ``metavar``, ``action``, ``const``,
...). A field without ``help`` (or with ``""``) has no flag. From the type: a bool is ``--x/--no-x`` (or,
declared ``action="store_true"`` or ``"store_false"``, the one flag that changes its default); an int, float
or str its own ``type``; a list or tuple of them one comma-separated value; a dict one JSON object; an
optional value (``X | None``) is X's flag, None when not given. A declared ``const`` makes the value
optional (``nargs="?"``). A field without a default is a flag whose default is None: declare it
``required=True``; so is a repeatable flag (``action="append"``), whose field's default stands when it is
not given."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Writer = Callable[[Any], list[str]]


def flag_field(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Any = None,
    more: Mapping[str, Any] | None = None,
    **flag: Any,
) -> Any:
    """Returns a dataclass field with its flag declared: ``help`` and, in ``flag``, what its type does not
    say (``name``, ``type``, ``choices``, ``metavar``, ``action``, ``const``, ...); ``more``: other
    metadata of the field."""
    metadata = {**(more or {}), "help": help, "flag": flag}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_fields(cls: type) -> dict[str, dataclasses.Field]:
    """Returns ``{name: field}`` of the fields of dataclass ``cls`` that declare a flag, in order."""
    return {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("help", "") != ""}


def flag_name(f: dataclasses.Field) -> str:
    """Returns field ``f``'s flag: ``--max-steps`` for max_steps, or ``--`` and its declared name."""
    return "--" + f.metadata["flag"].get("name", f.name.replace("_", "-"))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _without_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def value_type(cls: type, name: str) -> type:
    """Returns the type of field ``name`` of ``cls`` without its None: int, float, str, bool, list, tuple
    or dict."""
    hint = _without_none(_hints(cls)[name])
    return typing.get_origin(hint) or hint


def item_type(cls: type, name: str) -> type:
    """Returns the type of the items of list or tuple field ``name`` of ``cls`` (str when not said)."""
    args = [a for a in typing.get_args(_without_none(_hints(cls)[name])) if a is not Ellipsis]
    return args[0] if args else str


def json_object(flag: str) -> Callable[[str], dict[str, Any]]:
    """Returns the argparse ``type`` of a flag whose value is a JSON object: it returns the dict, or raises
    argparse.ArgumentTypeError naming ``flag``."""

    def parse(text: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: not JSON ({e.msg})") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected a JSON object") from None
        return value

    return parse


def comma_separated(kind: type, item: type, flag: str) -> Callable[[str], Any]:
    """Returns the argparse ``type`` of a flag whose value is comma-separated items of type ``item``,
    returned as a ``kind`` (list or tuple); a bad item raises argparse.ArgumentTypeError naming ``flag``."""

    def parse(text: str) -> Any:
        try:
            return kind(item(x.strip()) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} {text!r}: expected comma-separated {item.__name__}s"
            ) from None

    return parse


def _type(cls: type, f: dataclasses.Field) -> Callable[[str], Any]:
    kind = value_type(cls, f.name)
    if kind is dict:
        return json_object(flag_name(f))
    if kind in (list, tuple):
        return comma_separated(kind, item_type(cls, f.name), flag_name(f))
    return kind


def field_default(f: dataclasses.Field) -> Any:
    """Returns field ``f``'s default (a new one from its factory), or None when it has none."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def argument(cls: type, f: dataclasses.Field, defaults: bool = True) -> dict[str, Any]:
    """Returns ``add_argument``'s keywords for field ``f`` of ``cls``: its help, a type from its annotation
    (a bool is ``--x/--no-x``), and what its declaration adds. The default is the field's own, or None
    (not given) when ``defaults`` is false or the flag is repeatable."""
    declared = {k: v for k, v in f.metadata["flag"].items() if k not in ("name", "aliases")}
    default = field_default(f) if defaults and declared.get("action") != "append" else None
    kwargs: dict[str, Any] = {"dest": f.name, "default": default, "help": f.metadata["help"]}
    if value_type(cls, f.name) is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif "action" not in declared:
        kwargs["type"] = _type(cls, f)
        if "const" in declared:
            kwargs["nargs"] = "?"
    return {**kwargs, **declared}


def add_config_flags(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    defaults: bool = True,
    names: Iterable[str] | None = None,
) -> None:
    """Adds one flag per field of dataclass ``cls`` that declares one (only those ``names`` lists, in its
    order, when given); each defaults to its field's default, or to None (not given) when ``defaults`` is
    false."""
    fields = flag_fields(cls)
    for name in fields if names is None else names:
        f = fields[name]
        p.add_argument(flag_name(f), *f.metadata["flag"].get("aliases", ()), **argument(cls, f, defaults))


def values_from_args(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """Returns ``{field: parsed value}`` of the flag fields of ``cls`` that ``args`` holds and that are not
    None; a list parsed for a tuple field becomes a tuple."""
    out = {}
    for name in flag_fields(cls):
        value = getattr(args, name, None)
        if value is not None:
            out[name] = tuple(value) if value_type(cls, name) is tuple else value
    return out


def config_from_args(args: argparse.Namespace, cls: type, **other: Any) -> Any:
    """Returns ``cls`` built from the parsed flags in ``args`` (a flag not given: the field's default) and
    the fields ``other`` names."""
    return cls(**{**values_from_args(args, cls), **other})


def write_value(cls: type, name: str, value: Any) -> str:
    """Returns field ``name``'s ``value`` as its flag's text: floats as ``repr`` writes them (exactly),
    lists and tuples comma-separated, dicts as JSON."""
    kind = value_type(cls, name)
    if kind is dict:
        return json.dumps(value)
    if kind in (list, tuple):
        return ",".join(repr(x) if isinstance(x, float) else str(x) for x in value)
    return repr(value) if kind is float else str(value)


def to_flags(cfg: Any, writers: Mapping[str, Writer] | None = None, skip: Iterable[str] = ()) -> list[str]:
    """Returns the flags that give ``cfg``: one per flag field (but those in ``skip``) that differs from the
    field's default, each as ``--flag=value`` so that a value starting with ``-`` stays a value; a bool as
    ``--x`` or ``--no-x``; a declared ``action="append"``: the flag once per item; ``writers`` writes the
    fields it names (value -> flags)."""
    cls, writers = type(cfg), writers or {}
    out: list[str] = []
    for name, f in flag_fields(cls).items():
        value = getattr(cfg, name)
        if name in skip or value == field_default(f):
            continue
        flag = flag_name(f)
        if name in writers:
            out += writers[name](value)
        elif f.metadata["flag"].get("action") == "append":  # the flag once per item
            out += [f"{flag}={x}" for x in value]
        elif value_type(cls, name) is bool:  # store_true / store_false: the flag; else --x / --no-x
            toggles = f.metadata["flag"].get("action") in ("store_true", "store_false")
            out.append(flag if value or toggles else "--no-" + flag[2:])
        else:
            out.append(f"{flag}={write_value(cls, name, value)}")
    return out
