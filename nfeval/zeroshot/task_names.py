"""``--tasks`` names checked before the model or lm-eval's task index loads.

lm-eval's index of its ~14,000 tasks takes about 20 s to build, so a mistyped name of one of nfeval's
tasks (``hellaswg``) is refused at once, with the close matches difflib finds, when it is close to one
of ours and appears in none of lm-eval's task files (then it cannot be one of lm-eval's tasks: ``pisa``
and ``winogender`` are, and pass through to the index). Any other unknown name is refused once the
index is built, with the close matches among all the tasks it holds.
"""

from __future__ import annotations

import difflib
import importlib.util
import pathlib
from collections.abc import Iterable, Sequence

from .. import tasks as nf_tasks
from ..base.errors import ConfigError

CUTOFF = 0.8  # difflib's similarity ratio for a suggestion


def ours() -> list[str]:
    """Returns every task name nfeval registers: the canonical names, their _local and _hub variants and
    the corpus cloze task."""
    return sorted(set(nf_tasks.LM_EVAL_NAMES) | set(nf_tasks.CANONICAL_TASKS))


def close_matches(name: str, known: Iterable[str]) -> list[str]:
    """Returns up to three of ``known`` that ``name`` may be a typo of (difflib, best first)."""
    return difflib.get_close_matches(name, list(known), n=3, cutoff=CUTOFF)


def unknown_task(name: str, known: Iterable[str]) -> ConfigError:
    """Returns the error for an unknown ``--tasks`` name, suggesting the close matches among ``known``."""
    matches = close_matches(name, known)
    hint = f"; did you mean {' or '.join(repr(m) for m in matches)}?" if matches else ""
    return ConfigError(
        f"--tasks: unknown task {name!r}{hint} (nfeval tasks: {', '.join(nf_tasks.CANONICAL_TASKS)}; "
        "or any task lm-eval registers)"
    )


def _in_lm_eval_files(name: str) -> bool:
    """Returns whether ``name`` occurs in any of lm-eval's task files (about a second to read them all)."""
    spec = importlib.util.find_spec("lm_eval")
    root = pathlib.Path(next(iter(spec.submodule_search_locations))) / "tasks"
    files = (p for pattern in ("*.yaml", "*.py") for p in root.rglob(pattern))
    return any(name in path.read_text(encoding="utf-8", errors="ignore") for path in files)


def check(names: Sequence[str] | None) -> None:
    """Raises ConfigError for a name of ``names`` that is a typo of one of nfeval's tasks (see the module
    docstring); returns None."""
    known = ours()
    for name in names or ():
        if name not in known and close_matches(name, known) and not _in_lm_eval_files(name):
            raise unknown_task(name, known)
