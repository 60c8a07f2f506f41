"""A report folder's records as one compressed archive, so a report's whole history travels small.

A ``reproduce`` or ``bakeoff`` folder keeps, beside its report, every record it was computed from: run
records and logs (``runs/``), tune points (``tune/``), sections' data (``experiments/``), zero-shot results,
stability tests, the folder's settings and step-time ratios. They are many small JSON files that
compress about fourfold (tenfold without the gradient records). ``pack`` writes them into
``records.tar.xz`` in the folder (the figures, ``report.json``, ``report.md`` and the README stay loose,
so a page renders where it lies); ``unpack`` puts back every archived file the folder lacks, before the
command reads anything, so the same command reads an archived folder as it reads a loose one and a rerun
trains nothing that has a record. A sub-folder that is a report of its own (a token-budget axis's
``tokens=N/``) has its own archive. The archive is a plain ``tar.xz``: ``tar -xJf records.tar.xz``
unpacks it by hand.

The archive is rewritten whenever the report is, from the loose records (what landed since is added);
its members are sorted and stamped alike (no times, no owners), so the same records give the same bytes.
A folder is unpacked once per archive (``UNPACKED`` holds the archive's digest): a record deleted after
that, to train its run again, stays deleted.
"""

from __future__ import annotations

import fnmatch
import io
import lzma
import os
import tarfile

from ..base.artifacts import atomic_write_bytes
from ..base.errors import DataError
from ..base.jsonio import file_sha256
from ..tune.points import POINT, POINTS

ARCHIVE = "records.tar.xz"
UNPACKED = ".records-unpacked"  # the digest of the archive last unpacked here
RECORD_SUFFIXES = (".json", ".jsonl", ".txt")  # what a record is; figures (.png) stay loose
LOOSE = ("report.json",)  # read where it lies, at any depth (report.md and README.md are no records)
OWN_REPORT = ("report.json", "reproduce.json")  # a sub-folder holding one is a report of its own
SKIPPED_FOLDERS = ("checkpoints", "zeroshot_data", "models")  # weights, links to data: never records
SKIPPED_NAMES = ("tokenizer.json",)  # the BPE a folder trains from its corpus: rebuilt, not a record


def members(out: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Returns the paths (relative to ``out``, sorted) of the records ``pack`` archives: every file with a
    record's suffix in ``out`` and its sub-folders but the reports (``report.json``), temporary files,
    weights' folders, the paths ``skip`` matches (fnmatch patterns: records a report summarises and does
    not read again) and the sub-folders that are reports of their own (a ``report.json`` or a
    ``reproduce.json`` in them: a budget axis's ``tokens=N/``, a kept ``previous_run/``)."""
    found = []
    for folder, dirs, files in os.walk(out):
        rel = os.path.relpath(folder, out)
        if rel != "." and any(os.path.isfile(os.path.join(folder, f)) for f in OWN_REPORT):
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not d.startswith("."))
        for name in files:
            path = os.path.normpath(os.path.join(rel, name))
            kept = name.endswith(RECORD_SUFFIXES) and name not in LOOSE + SKIPPED_NAMES
            # a tune point is its point.json (written last: the finished result); its run's logs are not
            kept = kept and (name == POINT or f"{os.sep}{POINTS}{os.sep}" not in f"{os.sep}{path}")
            if kept and not name.startswith(".tmp"):
                if not any(fnmatch.fnmatch(path, pattern) for pattern in skip):
                    found.append(path)
    return sorted(found)


def pack(out: str, skip: tuple[str, ...] = ()) -> str | None:
    """Writes ``out/records.tar.xz`` holding ``members(out, skip)``; returns its path, or None when there
    is nothing to archive."""
    names = members(out, skip)
    if not names:
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            data = _bytes(os.path.join(out, name))
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    path = os.path.join(out, ARCHIVE)
    atomic_write_bytes(path, lzma.compress(buffer.getvalue(), preset=6))
    _mark(out)
    return path


def unpack(out: str) -> list[str]:
    """Writes every member of ``out/records.tar.xz`` that the folder does not hold into place, unless this
    archive was unpacked here before (a file on disk is never overwritten: it is newer than the archive or
    the same); returns the paths written."""
    path = os.path.join(out, ARCHIVE)
    if not os.path.isfile(path) or _marked(out) == file_sha256(path):
        return []
    written = []
    for name, content in _read(out).items():
        target = os.path.join(out, name)
        if not os.path.exists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            atomic_write_bytes(target, content)
            written.append(name)
    _mark(out)
    return written


def _mark(out: str) -> None:
    atomic_write_bytes(os.path.join(out, UNPACKED), file_sha256(os.path.join(out, ARCHIVE)).encode())


def _marked(out: str) -> str | None:
    path = os.path.join(out, UNPACKED)
    return _bytes(path).decode() if os.path.isfile(path) else None


def _read(out: str) -> dict[str, bytes]:
    """Returns {member: its bytes} of ``out``'s archive ({} without one); DataError for a damaged archive
    or a member that would land outside the folder."""
    path = os.path.join(out, ARCHIVE)
    if not os.path.isfile(path):
        return {}
    try:
        with tarfile.open(path, mode="r:xz") as tar:
            found = {}
            for info in tar.getmembers():
                name = os.path.normpath(info.name)
                if not info.isfile() or os.path.isabs(name) or name.startswith(".."):
                    raise DataError(f"{path}: member {info.name!r} is not a file inside the folder")
                found[name] = tar.extractfile(info).read()
            return found
    except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
        raise DataError(f"{path}: not a readable records archive ({e}); restore it from git") from None


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
