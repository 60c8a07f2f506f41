"""The environment variables nfeval reads, each parsed strictly: a documented value, else a ConfigError
naming the variable and what it accepts. An unset or empty variable takes its default.

The switches (``SWITCHES``) are checked together when a command starts (``check_switches``), so a
mistyped one fails before any work; each reader parses its own again where it is used.
"""

from __future__ import annotations

import os

from .errors import ConfigError

TRACEBACK = "NFEVAL_TRACEBACK"
FLUSH_DENORMALS = "NFEVAL_FLUSH_DENORMALS"
CPU_LINEAR = "NFEVAL_CPU_LINEAR"
# variable -> (accepted values, default)
SWITCHES: dict[str, tuple[tuple[str, ...], str]] = {
    TRACEBACK: (("0", "1"), "0"),
    FLUSH_DENORMALS: (("0", "1"), "1"),
    CPU_LINEAR: (("auto", "onednn", "torch"), "auto"),
}


def switch(name: str) -> str:
    """Returns the value of switch ``name`` (one of ``SWITCHES[name]``'s values; its default when unset or
    empty); a ConfigError naming the variable for any other value."""
    accepted, default = SWITCHES[name]
    value = os.environ.get(name, "").strip().lower() or default
    if value not in accepted:
        raise ConfigError(f"{name}={os.environ[name]!r}: expected one of {', '.join(accepted)}")
    return value


def enabled(name: str) -> bool:
    """Returns whether the 0/1 switch ``name`` is 1 (``switch``'s rules)."""
    return switch(name) == "1"


def check_switches() -> None:
    """Raises a ConfigError for the first switch set to a value it does not accept; returns None."""
    for name in SWITCHES:
        switch(name)


def integer(name: str, default: int) -> int:
    """Returns ``name`` (e.g. torchrun's ``RANK``) as a non-negative integer, ``default`` when unset or
    empty; a ConfigError naming the variable otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise ConfigError(f"{name}={os.environ[name]!r}: expected a non-negative integer")
    return int(text)
