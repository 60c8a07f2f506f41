"""The one lock every sweep (GLUE, tune) claims its points with: a ``.lock`` file in the point's folder,
``flock``-ed while a process computes the point, so concurrent sweeps into one folder compute each point
once. ``flock`` locks die with their process: a killed sweep never leaves a stale lock behind."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from typing import TypeVar

LOCK = ".lock"
T = TypeVar("T")


@contextlib.contextmanager
def point_lock(directory: str, wait: bool = False) -> Iterator[bool]:
    """Holds the point's lock file while the block runs; yields False when another process holds it
    (``wait`` blocks until it is free instead)."""
    os.makedirs(directory, exist_ok=True)
    fd = os.open(os.path.join(directory, LOCK), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def claim_and_run(
    directory: str, finished: Callable[[], T | None], run: Callable[[], T], wait: bool
) -> T | None:
    """Returns the point's result under its lock: ``finished()`` when another sweep finished it meanwhile,
    else ``run()``; None when another live sweep holds the lock and ``wait`` is False."""
    with point_lock(directory, wait) as held:
        if not held:
            return None
        return finished() or run()
