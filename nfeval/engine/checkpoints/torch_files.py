"""Reading ``torch.save`` files without running code from them, and writing them atomically.

A ``.pt`` file is a pickle, and unpickling can run any command. ``load`` therefore unpickles with
``weights_only=True``: tensors, plain containers and the few harmless classes fairseq checkpoints hold
(argparse's ``Namespace``, numpy scalars) are allowed; anything else fails with a CheckpointError that
names the file and the offending class and offers ``--trust-checkpoint``. Only ``trust=True`` (the user
saying they trust the file) unpickles freely. Files that are not torch checkpoints at all (text, JSON,
safetensors, empty or truncated files) are recognised by their first bytes and rejected by name.

``save`` writes through ``base.artifacts.atomic_write_with``: torch reports a failed write (a full disk)
only as a RuntimeError, so ``save`` hands torch a file that keeps the OSError the write raised, and a full
or read-only disk is the one-line OutputError every other writer gives.
"""

from __future__ import annotations

import argparse
import pickle
import struct
import zipfile
from typing import Any

import numpy as np
import torch

from ...base.artifacts import atomic_write_with
from ...base.errors import CheckpointError, MissingDataError

TRUST_HELP = (
    "unpickle checkpoint files with arbitrary Python objects (weights_only=False); "
    "only for files you trust, as unpickling can run code"
)


def _safe_globals() -> list[Any]:
    """Returns the classes a fairseq checkpoint may hold besides tensors and plain containers."""
    core = getattr(np, "_core", None) or np.core
    dtypes = [type(np.dtype(name)) for name in ("float64", "float32", "int64", "int32", "bool")]
    return [argparse.Namespace, core.multiarray.scalar, np.dtype, *dtypes]


def sniff(path: str) -> str:
    """Returns what the file's first bytes say it is: zip (torch >= 1.6), pickle (older torch), safetensors,
    json, text, empty or unknown. Raises MissingDataError when the file does not exist."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except FileNotFoundError:
        raise MissingDataError(f"{path}: checkpoint file not found") from None
    except IsADirectoryError:
        return "directory"
    if not head:
        return "empty"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle"
    if len(head) > 9 and head[8:10] == b'{"' and struct.unpack("<Q", head[:8])[0] < 100_000_000:
        return "safetensors"
    if head.lstrip()[:1] in (b"{", b"["):
        return "json"
    try:
        head.decode("utf-8")
        return "text"
    except UnicodeDecodeError:
        return "unknown"


NOT_A_CHECKPOINT = {
    "empty": "an empty file",
    "safetensors": "a safetensors file: pass the folder that holds it with its config.json",
    "json": "a JSON file, not a torch checkpoint",
    "text": "a text file, not a torch checkpoint",
    "unknown": "not a torch checkpoint (neither a zip archive nor a pickle)",
    "directory": "a directory, not a checkpoint file",
}


def load(path: str, trust: bool = False) -> Any:
    """Returns the object ``torch.save`` stored in ``path`` (on the CPU), unpickling code only if ``trust``.

    Raises CheckpointError naming the file when it is not a torch checkpoint, is truncated, or (without
    ``trust``) holds classes other than tensors, containers and fairseq's plain configs.
    """
    kind = sniff(path)
    if kind in NOT_A_CHECKPOINT:
        raise CheckpointError(f"{path}: {NOT_A_CHECKPOINT[kind]}")
    if kind == "zip" and not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: truncated or corrupt torch checkpoint (its zip directory is missing)")
    try:
        if trust:
            return torch.load(path, map_location="cpu", weights_only=False)
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if trust:
            raise CheckpointError(f"{path}: corrupt pickle ({e})") from None
        raise CheckpointError(
            f"{path}: refusing to unpickle {_unsafe_names(path) or 'objects other than tensors'} "
            "(unpickling can run code); if you trust this file, pass --trust-checkpoint"
        ) from None
    except ModuleNotFoundError as e:
        raise CheckpointError(
            f"{path}: unpickling needs module {e.name!r} (pip install omegaconf for fairseq >= 0.10)"
        ) from None
    except (RuntimeError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: truncated or corrupt torch checkpoint ({first[:200]})") from None


def _unsafe_names(path: str) -> str:
    """Returns the classes a zip checkpoint would need unpickled (read without unpickling), or ''."""
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # an old-format pickle or a damaged archive: the generic message will do
        return ""
    allowed = {f"{g.__module__}.{g.__qualname__}" for g in _safe_globals()}
    return ", ".join(sorted(set(names) - allowed)[:5])


class _KeptErrors:
    """A binary file for ``torch.save`` that keeps the OSError a write raised (``error``)."""

    def __init__(self, file) -> None:
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.file.flush()


def save(obj: Any, path: str) -> None:
    """Writes ``obj`` with ``torch.save`` to ``path`` atomically; a full or read-only disk is an
    OutputError naming ``path`` (``atomic_write_with``), the file that was there left as it was."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            kept = _KeptErrors(f)
            try:
                torch.save(obj, kept)
            except RuntimeError:
                if kept.error is None:
                    raise
                raise kept.error from None

    atomic_write_with(path, write)
