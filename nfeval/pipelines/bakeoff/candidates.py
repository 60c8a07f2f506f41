"""The architectures of a bakeoff: preset architectures (``prenorm``) or named variants of one with
ModelConfig overrides (``olmo2qk=olmo2norm:qk_norm=true,norm=rmsnorm``), checked before any work."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ...base.errors import ConfigError
from ...engine.model.config import ARCHITECTURES, preset
from ...engine.training.recipe import MODEL_FIELDS
from ...engine.training.train_config import parse_set

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # a name is a folder name too


OWN = "+own"  # what a candidate tried again under its scheme's own recipe adds to its name


@dataclass(frozen=True)
class Candidate:
    """One architecture of the bakeoff: its report name, preset architecture and field overrides, and
    whether it trains under its scheme's own recipe (``engine.training.own_recipes``) instead of the
    bakeoff's."""

    name: str
    arch: str
    overrides: dict[str, Any] = field(default_factory=dict)
    own_recipe: bool = False

    def under_own_recipe(self) -> Candidate:
        """Returns this candidate tried again under its scheme's own recipe (named ``<name>+own``)."""
        return Candidate(self.name + OWN, self.arch, self.overrides, own_recipe=True)

    def preset(self, size: str) -> str:
        """Returns the preset name at ``size``, e.g. ``olmo2norm-tiny``."""
        return f"{self.arch}-{size}"

    def spec(self) -> str:
        """Returns the ``--archs`` spelling of this candidate."""
        if not self.overrides:
            return self.name
        fields = ",".join(f"{k}={json.dumps(v)}" for k, v in self.overrides.items())
        return f"{self.name}={self.arch}:{fields}"


def _overrides(spec: str, text: str) -> dict[str, Any]:
    """Returns the model overrides of ``NAME=ARCH:field=value,...``'s field list."""
    return parse_set(text.split(","), where=f"--archs {spec}")


def parse_candidate(spec: str) -> Candidate:
    """Returns the Candidate of one ``--archs`` item: ``ARCH``, ``NAME=ARCH`` or
    ``NAME=ARCH:FIELD=VALUE,...``."""
    head, colon, fields = spec.partition(":")
    name, sep, arch = head.partition("=")
    if not sep:
        name = arch = head
    if arch not in ARCHITECTURES:
        raise ConfigError(
            f"--archs {spec}: unknown architecture {arch!r}; expected one of {sorted(ARCHITECTURES)}"
        )
    if colon and not sep:
        raise ConfigError(f"--archs {spec}: an architecture with overrides needs a name: NAME={spec}")
    if not NAME.match(name):
        raise ConfigError(f"--archs {spec}: name {name!r}: expected letters, digits, '_', '.', '+' or '-'")
    return Candidate(name, arch, _overrides(spec, fields) if colon else {})


def split_specs(items: list[str]) -> list[str]:
    """Returns the ``--archs`` items, a comma-separated item without overrides split into its archs."""
    out = []
    for item in items:
        out += [item] if "=" in item else [a for a in item.split(",") if a.strip()]
    return [s.strip() for s in out]


def parse_candidates(items: list[str], baseline: str, size: str, model: dict[str, Any]) -> list[Candidate]:
    """Returns the candidates of ``items`` (``--archs``), the baseline first; raises ConfigError on an
    empty list, a repeated name, a baseline not among them, or an override the model rejects at
    ``size`` with the recipe's ``model`` fields."""
    candidates = [parse_candidate(s) for s in split_specs(items)]
    if not candidates:
        raise ConfigError(
            "--archs: empty; expected at least one architecture, e.g. --archs prenorm normformer"
        )
    names = [c.name for c in candidates]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"--archs: {', '.join(repeated)} given twice; give each candidate a distinct NAME=")
    if baseline not in names:
        raise ConfigError(f"--baseline {baseline}: not among --archs ({', '.join(names)})")
    for c in candidates:
        recipe_fields = sorted(set(c.overrides) & set(MODEL_FIELDS))
        if recipe_fields:
            raise ConfigError(
                f"--archs {c.spec()}: {', '.join(recipe_fields)} is part of the training recipe, which every "
                "candidate shares; compare recipes in separate bakeoffs"
            )
        try:
            preset(c.preset(size), **{**model, **c.overrides})
        except (ValueError, TypeError) as e:
            raise ConfigError(f"--archs {c.spec()}: {e}") from None
    return sorted(candidates, key=lambda c: c.name != baseline)
