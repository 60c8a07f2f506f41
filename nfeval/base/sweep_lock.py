"""The one lock of nfeval's folders: a ``.lock`` file in the folder, ``flock``-ed while a process writes
there, holding the holder's pid, host and command line, and removed by the holder as it lets go (while
still holding it), so a finished folder holds no lock file naming a process long gone. ``flock`` locks die
with their process: a killed writer never leaves a live lock behind (the file it leaves is taken over).

Sweeps (GLUE, tune) claim each point with ``point_lock``, so concurrent sweeps into one folder compute
each point once. A folder with one writer (a training run, a reproduce or bakeoff folder) is held for
the writer's lifetime with ``folder_lock``, and a second process refuses at once, naming the holder.
A thread that holds a folder's lock (a sweep point's, say) enters ``folder_lock`` on that folder again
freely: a point's training run is the point's own writer. An output file with one writer (a zero-shot
results file and its sidecar) is held with ``file_lock``: its lock file, ``.NAME.lock`` beside it, is
removed when the writer ends; files written together (an analysis' JSON and PNG) are held with
``files_lock``. A folder that several processes write into in turn (lm-eval's output layout) is taken
with ``turn_lock``, which waits for the holder instead of refusing.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from .errors import OutputError

LOCK = ".lock"
T = TypeVar("T")
_HELD: set[tuple[str, int]] = set()  # (lock file, thread) of the locks this process holds
_ATTEMPTS = 100  # a lock file removed by its last holder while we opened it is opened again


def _open_locked(path: str, wait: bool) -> int | None:
    """Returns a descriptor of the lock file ``path`` holding its lock, or None when another process
    holds it (``wait``: blocks until it is free instead)."""
    for _ in range(_ATTEMPTS):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
        except FileNotFoundError:  # the folder was removed meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # its last holder removed the file after we opened it: ours locks nothing
    raise OutputError(f"{path}: the lock file keeps being removed while it is taken")


@contextlib.contextmanager
def point_lock(directory: str, wait: bool = False) -> Iterator[bool]:
    """Holds the folder's lock file while the block runs; yields False when another process (or another
    ``point_lock`` of this one) holds it (``wait`` blocks until it is free instead). The lock file is
    removed at the end."""
    with _lock_file(os.path.join(directory, LOCK), wait, remove=True) as held:
        yield held


@contextlib.contextmanager
def _lock_file(path: str, wait: bool = False, remove: bool = False) -> Iterator[bool]:
    """Holds the lock file ``path`` while the block runs, writing the holder into it; yields False when
    another process holds it (``wait`` blocks until it is free instead). ``remove``: the file is deleted
    at the end, while still held (a process that opened it meanwhile finds it gone and opens a new one)."""
    fd = _open_locked(path, wait)
    if fd is None:
        yield False
        return
    key = (os.path.realpath(path), threading.get_ident())
    _HELD.add(key)
    try:
        holder = f"pid {os.getpid()} on {socket.gethostname()}: {' '.join(sys.argv)}"[:300]
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode("utf-8", "replace"), 0)
        yield True
    finally:
        _HELD.discard(key)
        if remove:  # gone already (its folder renamed or removed), or a folder that cannot be written
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.close(fd)  # closing releases the lock


def holder(directory: str) -> str:
    """Returns what the folder's lock file says of the process holding it (pid, host, command line)."""
    return _holder_of(os.path.join(directory, LOCK))


def _holder_of(path: str) -> str:
    """Returns what the lock file ``path`` says of the process holding it."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return " ".join(f.read().split()) or "a process that has not said which"
    except OSError:
        return "a process that has not said which"


@contextlib.contextmanager
def folder_lock(directory: str) -> Iterator[None]:
    """Holds ``directory``'s lock while the block runs, as its one writer; an OutputError naming the
    folder and the holder when another process holds it. Entered again by the thread holding it, it
    does nothing; nor in a folder this process may not write (a read-only run is still read). A folder
    it created that holds nothing but the lock at the end is removed, so a refused or failed start leaves
    nothing behind."""
    held_here = (os.path.realpath(os.path.join(directory, LOCK)), threading.get_ident()) in _HELD
    if held_here or (os.path.isdir(directory) and not os.access(directory, os.W_OK)):
        yield
        return
    created = not os.path.isdir(directory)
    with point_lock(directory) as held:
        if not held:
            raise OutputError(
                f"{directory}: in use by another nfeval process ({holder(directory)}); wait for it to "
                "end, or write elsewhere"
            )
        try:
            yield
        finally:
            if created and os.path.isdir(directory) and os.listdir(directory) == [LOCK]:  # while held
                os.unlink(os.path.join(directory, LOCK))
                os.rmdir(directory)


@contextlib.contextmanager
def turn_lock(directory: str) -> Iterator[None]:
    """Holds ``directory``'s lock (its ``.lock`` file, removed at the end) while the block runs, waiting
    its turn while another process holds it: for the short writes several processes make into one
    folder in turn (lm-eval's output layout), each of which may tidy what a killed one left there."""
    with _lock_file(os.path.join(directory, LOCK), wait=True, remove=True):
        yield


def file_lock_path(path: str) -> str:
    """Returns the lock file of the output file ``path``: ``.NAME.lock`` beside it."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}{LOCK}")


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """Holds the output file ``path``'s lock (``file_lock_path``) while the block runs, as the one writer
    of the file and of what is written beside it (a results file's sidecar); an OutputError naming the
    file and the holder when another process holds it. The lock file is removed at the end, and so are
    the folders it created that hold nothing then, so a refused or failed start leaves nothing behind.
    Entered again by the thread holding it, it does nothing."""
    lock = file_lock_path(path)
    if (os.path.realpath(lock), threading.get_ident()) in _HELD:
        yield
        return
    created, folder = [], os.path.dirname(lock)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        created.append(folder)  # deepest first
        folder = os.path.dirname(folder)
    try:
        with _lock_file(lock, remove=True) as held:
            if not held:
                raise OutputError(
                    f"{path}: being written by another nfeval process ({_holder_of(lock)}); wait for it "
                    "to end, or write elsewhere"
                )
            yield
    finally:
        for folder in created:
            try:
                os.rmdir(folder)
            except OSError:  # not empty (the output was written), or gone
                break


@contextlib.contextmanager
def files_lock(*paths: str | None) -> Iterator[None]:
    """Holds the lock of each output file of ``paths`` (``file_lock``; None: a file not asked for) while
    the block runs, as the one writer of files written together (a JSON and its PNG), taken in one order
    (their absolute paths sorted); an OutputError naming the file and the holder when another process
    holds one of them."""
    named = {os.path.abspath(p): p for p in paths if p}
    with contextlib.ExitStack() as stack:
        for full in sorted(named):
            stack.enter_context(file_lock(named[full]))
        yield


def folder_locked(folder_of: Callable[..., str]) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Returns a decorator that runs its function under ``folder_lock(folder_of(*args, **kwargs))``."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def locked(*args, **kwargs) -> T:
            with folder_lock(folder_of(*args, **kwargs)):
                return fn(*args, **kwargs)

        return locked

    return decorate


def claim_and_run(
    directory: str, finished: Callable[[], T | None], run: Callable[[], T], wait: bool
) -> T | None:
    """Returns the point's result under its lock: ``finished()`` when another sweep finished it meanwhile,
    else ``run()``; None when another live sweep holds the lock and ``wait`` is False."""
    with point_lock(directory, wait) as held:
        if not held:
            return None
        return finished() or run()
