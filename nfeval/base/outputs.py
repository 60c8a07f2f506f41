"""Output locations are checked before any work: every command calls ``check_output_dir`` or
``check_output_file`` on its ``--out``/``--output`` first, so a path that cannot be written fails in a
second as one line naming it, not as a traceback after scoring, generating or preparing data.

A location is writable when it is not a file where a folder is expected (nor a folder where a file is),
nothing on the way to it is a file, and its nearest existing folder takes a new file (a probe is
written and deleted: this catches read-only and full filesystems, and missing permissions). Nothing is
created.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from .errors import OutputError


def _nearest_folder(path: str, flag: str, shown: str) -> str:
    """Returns the nearest existing ancestor of ``path``; OutputError when it is a file."""
    existing = os.path.dirname(path)
    while existing and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    existing = existing or os.sep
    if not os.path.isdir(existing):
        raise OutputError(f"{flag} {shown}: {existing} is a file, so nothing can be created under it")
    return existing


def _probe(folder: str, flag: str, shown: str) -> None:
    """Writes and deletes one small file in ``folder``; OutputError naming the reason when it fails."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-probe-")
        try:
            os.write(fd, b"\0" * 512)
            os.fsync(fd)
        finally:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):  # the folder's writer cleaned it meanwhile
                os.unlink(tmp)
        full = os.statvfs(folder).f_bavail == 0
    except OSError as e:
        raise OutputError(f"{flag} {shown}: cannot write in {folder} ({e.strerror or e})") from None
    if full:
        raise OutputError(f"{flag} {shown}: the filesystem of {folder} is full")


def check_output_dir(path: str | None, flag: str) -> str | None:
    """Returns ``path`` when it is, or can be created as, a writable folder (None: no output asked
    for); else raises OutputError naming ``flag`` and the path (a file in the way, a read-only or full
    filesystem)."""
    if not path:
        return path
    full = os.path.abspath(path)
    if os.path.exists(full) and not os.path.isdir(full):
        raise OutputError(f"{flag} {path}: is a file, expected a folder")
    _probe(full if os.path.isdir(full) else _nearest_folder(full, flag, path), flag, path)
    return path


def check_output_file(path: str | None, flag: str) -> str | None:
    """Returns ``path`` when a file can be written there (``check_output_dir``'s rules for its folder;
    not a folder itself; None: no output asked for); else raises OutputError naming ``flag`` and the
    path."""
    if not path:
        return path
    full = os.path.abspath(path)
    if os.path.isdir(full):
        raise OutputError(f"{flag} {path}: is a folder, expected a file name")
    _probe(_nearest_folder(full, flag, path), flag, path)
    return path
