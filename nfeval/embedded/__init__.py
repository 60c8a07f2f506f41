"""Task slices shipped inside the package, so that ``nfeval zeroshot --data-dir embedded``, ``nfeval glue
--glue-dir embedded`` and ``nfeval demo`` run on a fresh machine with no download.

Each slice is a folder in the layout the readers already take (``tasks/readers.py`` for zero-shot,
``glue/data.py`` for GLUE), with a ``SOURCE.md`` (origin repository @ commit, derivation, rows, sha256)
and the licence of its data (``LICENSE``; STS-B also its own ``LICENSE.txt``). ``derive.py`` rebuilds
them from ``../shared/data`` and ``tests/packaging/test_embedded_slices.py`` checks them.

StoryCloze is not here: its licence forbids redistribution, so it stays user-supplied.

The name ``embedded`` given to ``--data-dir`` or ``--glue-dir`` selects these folders; a folder of
your own that happens to be called ``embedded`` is reached as ``./embedded``. This module uses no
other room of nfeval.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

NAME = "embedded"
ROOT = os.path.dirname(os.path.abspath(__file__))
ZEROSHOT_ROOT = os.path.join(ROOT, "zeroshot")
GLUE_ROOT = os.path.join(ROOT, "glue")
LICENCE_FILE = "LICENSE"
SOURCE_FILE = "SOURCE.md"


@dataclass(frozen=True)
class Slice:
    """One shipped slice: its folder (under ``ROOT``), data files with their rows, the licence, and the
    rows of the full split it was taken from."""

    folder: str  # e.g. "zeroshot/piqa"
    files: dict[str, int]  # file name -> rows (JSONL records, or TSV rows after the header)
    full_rows: dict[str, int]  # file name -> rows of the split it was taken from
    licence: str  # SPDX-style name
    task: str  # the canonical zero-shot task or GLUE task it feeds

    @property
    def path(self) -> str:
        return os.path.join(ROOT, self.folder)


ZEROSHOT_ROWS = 200  # items per zero-shot slice
GLUE_ROWS = {"train.tsv": 400, "dev.tsv": 200}

SLICES: tuple[Slice, ...] = (
    Slice("zeroshot/hellaswag", {"validation.jsonl": 200}, {"validation.jsonl": 10042}, "MIT", "hellaswag"),
    Slice("zeroshot/piqa", {"validation.jsonl": 200}, {"validation.jsonl": 1838}, "AFL-3.0", "piqa"),
    Slice(
        "zeroshot/winogrande",
        {"validation.jsonl": 200},
        {"validation.jsonl": 1267},
        "CC-BY-2.0",
        "winogrande",
    ),
    Slice("zeroshot/openbookqa", {"test.jsonl": 200}, {"test.jsonl": 500}, "Apache-2.0", "openbookqa"),
    Slice(
        "glue/STS-B",
        dict(GLUE_ROWS),
        {"train.tsv": 5749, "dev.tsv": 1500},
        "CC-BY-SA-4.0 (scores); CC BY-SA (image-caption text)",
        "stsb",
    ),
)
ZEROSHOT_TASKS = tuple(s.task for s in SLICES if s.folder.startswith("zeroshot/"))
GLUE_TASKS = tuple(s.task for s in SLICES if s.folder.startswith("glue/"))


def zeroshot_dir(value: str | None) -> str | None:
    """Returns ``value`` as a zero-shot data folder: the shipped slices for ``embedded``, else as given."""
    return ZEROSHOT_ROOT if value == NAME else value


def glue_dir(value: str | None) -> str | None:
    """Returns ``value`` as a GLUE folder: the shipped STS-B slice for ``embedded``, else as given."""
    return GLUE_ROOT if value == NAME else value


def slice_of(data_dir: str | None, folder: str) -> Slice | None:
    """Returns the shipped slice that ``data_dir/folder`` is (following links, as the demo's data folder
    links task folders), or None when it is other data."""
    if not data_dir:
        return None
    where = os.path.realpath(os.path.join(data_dir, folder))
    for s in SLICES:
        if os.path.realpath(s.path) == where:
            return s
    return None


def read_slice(s: Slice) -> dict[str, object]:
    """Returns what the slice ``s`` holds as shipped: rows per data file (JSONL records parsed, TSV rows
    after the header), the documented rows, and whether its SOURCE.md and licence files are there."""
    rows = {}
    for name in s.files:
        with open(os.path.join(s.path, name), encoding="utf-8") as f:
            lines = [line for line in f.read().split("\n") if line]
        rows[name] = len([json.loads(line) for line in lines]) if name.endswith(".jsonl") else len(lines) - 1
    return {
        "folder": s.folder,
        "rows": rows,
        "documented_rows": dict(s.files),
        "licence_file": os.path.isfile(os.path.join(s.path, LICENCE_FILE)),
        "source_file": os.path.isfile(os.path.join(s.path, SOURCE_FILE)),
        "licence": s.licence,
    }
