"""Local-file datasets for the ``*_local`` tasks: lm-eval's ``custom_dataset`` hooks.

A task's YAML names ``nfeval.tasks.loaders.<task>``: the hook of the task's record in ``registry.py``,
which reads the task's folder under ``data_dir`` (the task metadata ``data_dir``: ``nfeval zeroshot`` and
``nfeval lm-eval`` pass their ``--data-dir`` there) with the record's reader (``readers.py``) and returns a
``datasets.DatasetDict`` in the Hugging Face schema that lm-eval's built-in task reads. Bad records raise
``DataError`` naming the file, the line and the field.
"""

from __future__ import annotations

import functools
import os

from ..base.errors import DataError
from ..base.errors import MissingDataError as MissingData  # a task's local files are absent
from . import readers, registry
from .task_build import files_fingerprint

__all__ = ["DataError", "MissingData", "data_fingerprint", "data_root", "load"]


def data_root(data_dir: str | None = None) -> str:
    """Returns the local data directory ``data_dir``; a MissingData error saying how to give it when
    None, or when it is no directory."""
    if not data_dir:
        raise MissingData(
            "local tasks need a data directory: pass --data-dir DIR to nfeval zeroshot / nfeval lm-eval, "
            """or --metadata '{"data_dir": "DIR"}' to lm-eval"""
        )
    if not os.path.isdir(data_dir):
        raise MissingData(f"{data_dir}: data directory not found")
    return data_dir


def load(canonical: str, data_dir: str | None = None):
    """Returns the task's local data as a ``datasets.DatasetDict`` in the Hugging Face schema."""
    import datasets

    rows = registry.BY_NAME[canonical].reader(data_root(data_dir))
    return datasets.DatasetDict({split: datasets.Dataset.from_list(r) for split, r in rows.items()})


def data_fingerprint(canonical: str, data_dir: str | None = None) -> str:
    """Returns the sha256 over the readers (what turns files into documents) and the names and bytes of
    every file the task's reader may read (its record's folder under the data directory): what the
    request cache is keyed by."""
    root = data_root(data_dir)
    folder = os.path.join(root, registry.BY_NAME[canonical].folder)
    paths = [os.path.join(d, n) for d, _, names in os.walk(folder) for n in names]
    files = files_fingerprint(root, [p for p in paths if os.path.isfile(p)])
    return files_fingerprint(os.path.dirname(__file__), [readers.__file__]) + files


@functools.cache
def _hook(canonical: str):
    def custom_dataset(data_dir: str | None = None, **_metadata):
        return load(canonical, data_dir)

    custom_dataset.__name__ = f"load_{canonical}"
    custom_dataset.canonical = canonical  # GPT3Task fingerprints the task's files before loading them
    return custom_dataset


def __getattr__(name: str):
    """Returns the ``custom_dataset`` hook of the task ``name`` (``!function nfeval.tasks.loaders.piqa``
    in its YAML), one per record of ``registry.TASKS``."""
    if name in registry.BY_NAME:
        return _hook(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
