"""JSON and JSONL files: the one reader of each and the one JSONL appender.

``read_jsonl`` serves every line-per-record file nfeval reads (metrics.jsonl, grad_stats.jsonl, task
data); the append-only files nfeval writes go through ``append_jsonl``, one ``os.write`` of a whole line
on an ``O_APPEND`` descriptor, so a killed writer can leave at most a torn last line, which a reader
given ``tolerate_torn_last_line=True`` drops with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
from collections.abc import Iterator
from typing import Any

from .errors import DataError, MissingDataError, UserError


def load_json(path: str, hint: str = "") -> Any:
    """Returns the parsed JSON object in ``path``: the one reader of JSON files.

    A missing file raises MissingDataError, unreadable or invalid JSON (or a top level that is not an
    object) DataError; both name the file (and the line), followed by ``hint`` (what to do) if given.
    """
    suffix = f"; {hint}" if hint else ""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise MissingDataError(f"{path}: file not found{suffix}") from None
    except json.JSONDecodeError as e:
        raise DataError(
            f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}{suffix}"
        ) from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}){suffix}") from None
    except (ValueError, RecursionError) as e:  # json's limits: nesting depth, digits of an integer
        raise DataError(f"{path}: {_beyond_limits(e)}{suffix}") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror}){suffix}") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}{suffix}")
    return data


@contextlib.contextmanager
def reading(path: str, expected: str) -> Iterator[None]:
    """Within the block, which reads what ``load_json(path)`` returned (a report, a record, settings that
    nfeval wrote and a person may have edited), a key it lacks or a value of another shape than the
    reader takes (KeyError, IndexError, TypeError, AttributeError, ValueError) is a one-line DataError
    naming ``path`` and ``expected`` (what the file should be), not a traceback; the cause is chained,
    so ``NFEVAL_TRACEBACK=1`` shows where it was read. Keep only the reading in the block: any exception
    of those kinds raised in it is said to be the file's."""
    try:
        yield
    except UserError:
        raise
    except KeyError as e:
        raise DataError(f"{path}: key {e.args[0]!r} is missing; expected {expected}") from e
    except (IndexError, TypeError, AttributeError, ValueError) as e:
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        raise DataError(f"{path}: a value is not of the shape read ({why}); expected {expected}") from e


def read_jsonl(
    path: str, *, tolerate_torn_last_line: bool = False, objects_only: bool = False
) -> tuple[list[tuple[int, Any]], list[str]]:
    """Returns ((line number, parsed value) for each non-blank line of a JSONL file, warnings).

    With ``tolerate_torn_last_line`` an unparsable *last* line (a writer killed mid-line) is dropped
    with a warning; any other bad line raises DataError naming the file and line, as does a value that
    is not an object when ``objects_only``. A missing file raises MissingDataError.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise MissingDataError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start})") from None
    last = max((i for i, line in enumerate(lines, 1) if line.strip()), default=0)
    records, warnings = [], []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            if tolerate_torn_last_line and lineno == last:
                warnings.append(f"{path}:{lineno}: ignored an unfinished last line")
                continue
            raise DataError(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
        except (ValueError, RecursionError) as e:  # json's limits: nesting depth, digits of an integer
            raise DataError(f"{path}:{lineno}: {_beyond_limits(e)}") from None
        if objects_only and not isinstance(value, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(value).__name__}")
        records.append((lineno, value))
    return records, warnings


def _beyond_limits(error: ValueError | RecursionError) -> str:
    """Returns what a JSON text beyond the parser's limits is, said as the reader's expectation (a
    RecursionError: nested deeper than Python's stack; a ValueError: an integer of more digits than
    ``sys.get_int_max_str_digits``)."""
    expected = "expected the file nfeval or lm-eval writes"
    if isinstance(error, RecursionError):
        return f"JSON nested too deeply to read; {expected}"
    return f"JSON beyond what can be read ({str(error).split(';')[0]}); {expected}"


def append_jsonl(path: str, record: Any) -> None:
    """Appends ``record`` as one JSON line to ``path`` (created if absent) with a single ``os.write``."""
    append_line(path, json.dumps(record) + "\n")


def append_line(path: str, line: str) -> None:
    """Appends ``line`` (one JSON value and its newline) to ``path`` (created if absent) with a single
    ``os.write``, so a killed writer leaves at most a torn last line."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def stable_repr(obj: Any) -> Any:
    """Returns a run-independent JSON stand-in: a function's source (never its address), else str()."""
    if callable(obj):
        try:
            return inspect.getsource(obj)
        except (OSError, TypeError):
            return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
    return str(obj)


def file_sha256(path: str) -> str:
    """Returns the sha256 of the file at ``path``, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_json(obj: Any) -> str:
    """Returns the sha256 of ``obj`` as canonical JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=stable_repr).encode()).hexdigest()
