"""GLUE data: readers for the GLUE distribution TSVs (or the ``nyu-mll/glue`` hub copy) of the tasks that
``specs.py`` declares.

The TSVs are tab-separated and unquoted (quotes are part of the text). Columns are found by header
name; CoLA has no header and is read by position. Every row must have as many columns as the header,
and every label must be one the task knows; errors name the file and line and are raised while the
data loads, before any training. Labels are stored as ints in the hub's order (so both sources agree)
or, for STS-B, as floats in [0, 5].
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

from .. import embedded
from ..base import hub
from ..base.errors import DataError, MissingDataError, hub_unreachable
from .specs import SPECS, TaskSpec, spec
from .specs import TASKS as TASKS  # the task records' table, read as glue_data.TASKS too

HUB_DATASET = "nyu-mll/glue"


@dataclass
class Split:
    """One split: texts (``text_b`` None for single-sentence tasks), labels, and where it came from."""

    name: str
    source: str
    sha256: str
    text_a: list[str]
    text_b: list[str] | None
    labels: list

    def __len__(self) -> int:
        return len(self.labels)

    def head(self, n: int) -> Split:
        """Returns the split's first ``n`` rows (the same source and sha256: the file they come from)."""
        text_b = None if self.text_b is None else self.text_b[:n]
        return Split(self.name, self.source, self.sha256, self.text_a[:n], text_b, self.labels[:n])


@dataclass
class TaskData:
    spec: TaskSpec
    train: Split
    dev: dict[str, Split]
    test: dict = field(default_factory=dict)  # {name: UnlabelledSplit}, for --predict-test
    limit: int | None = None  # --limit: the first N rows of train and of each dev split

    def fingerprint(self) -> dict[str, Any]:
        """Returns {split: sha256} of the train and dev splits (and ``limit`` when rows were cut), for
        resume keys and provenance."""
        out: dict[str, Any] = {s.name: s.sha256 for s in [self.train, *self.dev.values()]}
        return out if self.limit is None else {**out, "limit": self.limit}

    def limited(self, n: int | None) -> TaskData:
        """Returns the task with its train split and each dev split cut to their first ``n`` rows (None:
        itself); the test splits stay whole, as a submission needs every row."""
        if n is None:
            return self
        dev = {name: split.head(n) for name, split in self.dev.items()}
        return TaskData(self.spec, self.train.head(n), dev, self.test, n)


def _parse_label(spec: TaskSpec, value: str, where: str):
    if spec.labels is None:
        try:
            score = float(value)
        except ValueError:
            raise DataError(
                f"{where}: label {value!r} is not a number (expected an STS-B score in [0, 5])"
            ) from None
        if not 0.0 <= score <= 5.0:
            raise DataError(f"{where}: score {score} is outside [0, 5]")
        return score
    if value not in spec.labels:
        raise DataError(f"{where}: unknown label {value!r} (expected one of {', '.join(spec.labels)})")
    return spec.labels.index(value)


def read_text(path: str, spec: TaskSpec, split: str) -> tuple[bytes, str]:
    """Returns a GLUE file's (bytes, text decoded as UTF-8 with the BOM dropped); MissingDataError when
    it is absent, DataError naming the line of the first byte that is not UTF-8."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise MissingDataError(f"{path}: not found (the GLUE {spec.name} {split} file)") from None
    try:
        return raw, raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        lineno = raw[: e.start].count(b"\n") + 1
        raise DataError(f"{path}:{lineno}: not valid UTF-8") from None


def read_tsv(path: str, spec: TaskSpec, split: str) -> Split:
    """Returns one split read from a GLUE TSV file; ValueError naming the file and line on bad rows."""
    raw, text = read_text(path, spec, split)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line.removesuffix("\r") for line in lines]

    if isinstance(spec.label_column, int):
        ncols, first = spec.num_columns, 0
        text_idx, label_idx = list(spec.text_columns), spec.label_column
    else:
        if not lines:
            raise DataError(f"{path}: empty file (expected a header line and examples)")
        header = lines[0].split("\t")
        wanted = [*spec.text_columns, spec.label_column]
        missing = [c for c in wanted if c not in header]
        if missing:
            raise DataError(
                f"{path}:1: header lacks column(s) {missing} (expected {wanted} among the columns)"
            )
        ncols, first = len(header), 1
        text_idx, label_idx = [header.index(c) for c in spec.text_columns], header.index(spec.label_column)

    columns: list[list[str]] = [[] for _ in text_idx]
    labels = []
    for lineno in range(first, len(lines)):
        where = f"{path}:{lineno + 1}"
        cols = lines[lineno].split("\t")
        if len(cols) != ncols:
            raise DataError(f"{where}: expected {ncols} tab-separated columns, got {len(cols)}")
        for out, i in zip(columns, text_idx):
            out.append(cols[i])
        labels.append(_parse_label(spec, cols[label_idx], where))
    if not labels:
        raise DataError(f"{path}: empty split: no examples" + (" after the header" if first else ""))
    return Split(
        split,
        os.path.abspath(path),
        hashlib.sha256(raw).hexdigest(),
        columns[0],
        columns[1] if len(columns) > 1 else None,
        labels,
    )


def load_local(task: str, glue_dir: str) -> TaskData:
    """Returns train, dev (and, where present, test) splits of ``task`` from a GLUE distribution folder
    (``<glue_dir>/<Task>/*.tsv``)."""
    s = spec(task)
    folder = os.path.join(glue_dir, s.folder)
    if not os.path.isdir(folder):
        raise MissingDataError(
            f"{folder}: not found (expected the GLUE {task} folder with train.tsv and dev files)"
        )
    train = read_tsv(os.path.join(folder, "train.tsv"), s, "train")
    dev = {name: read_tsv(os.path.join(folder, fname), s, name) for name, fname in s.dev_files.items()}
    return TaskData(s, train, dev, read_tests(task, glue_dir))


# task -> {test split: (path under the GLUE folder, submission file name)}; the first split is required
TEST_FILES: dict[str, dict[str, tuple[str, str]]] = {
    s.name: {split: (f.path, f.submission) for split, f in s.test_files.items()} for s in SPECS.values()
}
OPTIONAL = {split for s in SPECS.values() for split, f in s.test_files.items() if f.optional}
INDEX_COLUMNS = ("index", "id")  # QQP's test file names it "id"


@dataclass
class UnlabelledSplit:
    """A test split: the server's example ids and the texts (``text_b`` None for single sentences)."""

    name: str
    source: str
    sha256: str
    index: list[str]
    text_a: list[str]
    text_b: list[str] | None


def read_test_tsv(path: str, spec: TaskSpec, name: str) -> UnlabelledSplit:
    """Returns a GLUE test TSV (header with an index column and the task's text columns, no labels)."""
    raw, text = read_text(path, spec, name)
    lines = text.split("\n")
    lines = [line.removesuffix("\r") for line in lines if line.strip()]
    header = lines[0].split("\t") if lines else []
    wanted = [
        next((c for c in INDEX_COLUMNS if c in header), "index"),
        *(spec.test_text_columns or spec.text_columns),
    ]
    missing = [c for c in wanted if c not in header]
    if missing:
        raise DataError(f"{path}:1: header lacks column(s) {missing} (expected {wanted} among the columns)")
    positions = [header.index(c) for c in wanted]
    columns: list[list[str]] = [[] for _ in wanted]
    for lineno, line in enumerate(lines[1:], 2):
        cols = line.split("\t")
        if len(cols) != len(header):
            raise DataError(f"{path}:{lineno}: expected {len(header)} tab-separated columns, got {len(cols)}")
        for out, i in zip(columns, positions):
            out.append(cols[i])
    if not columns[0]:
        raise DataError(f"{path}: empty split: no examples after the header")
    text_b = columns[2] if len(columns) > 2 else None
    return UnlabelledSplit(
        name, os.path.abspath(path), hashlib.sha256(raw).hexdigest(), columns[0], columns[1], text_b
    )


def read_tests(task: str, glue_dir: str) -> dict[str, UnlabelledSplit]:
    """Returns the test splits of ``task`` present in the GLUE folder (none: an empty dict)."""
    task_spec = spec(task)
    return {
        name: read_test_tsv(os.path.join(glue_dir, rel), task_spec, name)
        for name, (rel, _) in TEST_FILES[task].items()
        if os.path.isfile(os.path.join(glue_dir, rel))
    }


def _hub_split(s: TaskSpec, ds, name: str, hub_split: str) -> Split:
    where = f"{HUB_DATASET}/{s.name} split {hub_split}"
    missing = [c for c in (*s.hub_text_columns, "label") if c not in ds.column_names]
    if missing:
        raise DataError(f"{where}: missing column(s) {missing}")
    labels = list(ds["label"])
    if not labels:
        raise DataError(f"{where}: empty split: no examples")
    for i, y in enumerate(labels):
        bad = not 0.0 <= y <= 5.0 if s.is_regression else y not in range(s.num_labels)
        if bad:
            raise DataError(f"{where} row {i}: unknown label {y!r}")
    texts = [list(ds[c]) for c in s.hub_text_columns]
    return Split(
        name,
        where,
        ds._fingerprint,
        texts[0],
        texts[1] if len(texts) > 1 else None,
        [float(y) if s.is_regression else int(y) for y in labels],
    )


def load_hub(task: str) -> TaskData:
    """Returns train and dev splits of ``task`` from the Hugging Face hub copy of GLUE (needs network)."""
    import datasets

    s = spec(task)
    instead = "pass --glue-dir with the GLUE TSVs, or --glue-dir embedded (the STS-B slice in the package)"
    hub.check_reachable(f"{HUB_DATASET} ({s.name})", instead)
    try:
        dd = datasets.load_dataset(HUB_DATASET, s.name)
    except Exception as e:  # datasets raises many types when offline
        raise hub_unreachable(f"{HUB_DATASET} ({s.name})", e, instead) from None
    train = _hub_split(s, dd["train"], "train", "train")
    dev = {name: _hub_split(s, dd[hub], name, hub) for name, hub in s.hub_dev_splits.items()}
    return TaskData(s, train, dev)


def load(task: str, glue_dir: str | None) -> TaskData:
    """Returns a task's data from ``glue_dir`` when given (``embedded``: the slice shipped in the package,
    ``nfeval.embedded``), else from the hub."""
    glue_dir = embedded.glue_dir(glue_dir)
    return load_local(task, glue_dir) if glue_dir else load_hub(task)
