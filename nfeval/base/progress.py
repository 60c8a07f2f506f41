"""Progress bars that suit both a terminal and a log file.

On a terminal: an ordinary tqdm bar. Elsewhere (a log file, a pipe, a batch job's stdout) tqdm would write
a carriage-return line at every update; there the bars print a plain status line instead, none of the
clearing sequences, and at most one line every ``LOG_INTERVAL_S`` seconds for all the bars of a process
together: a bar shorter than that prints nothing (no 0% line as it starts), and the redraws tqdm makes
when a line is printed above a bar or a bar closes wait their turn too. Other libraries' bars (lm-eval's
request building, datasets' split generation, transformers' weight loading) are turned off there
(``quiet_library_bars``, called as the ``nfeval`` executable starts).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a bar is made: the executable sets TQDM_DISABLE before tqdm reads it
    from tqdm import tqdm

LOG_INTERVAL_S = 30.0
_clock = time.monotonic  # the throttle's clock (a test gives its own)
# The switches the libraries read at their import, documented by each: tqdm's default for bars that do
# not say ``disable`` (lm-eval's request building), datasets', transformers' and the Hub's.
LIBRARY_BARS_OFF = {
    "TQDM_DISABLE": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


class _Lines:
    """A file for tqdm that turns each redraw into one plain line (no ``\\r``, no cursor moves), and
    drops it when any bar of this process wrote one less than ``LOG_INTERVAL_S`` seconds ago."""

    last: float | None = None  # when a bar of this process last wrote a line (time.monotonic)

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\x1b[A", "").replace("\r", "").strip()
        now = _clock()
        if line and (_Lines.last is None or now - _Lines.last >= LOG_INTERVAL_S):
            _Lines.last = now
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable=None, *, enabled: bool = True, **kwargs: Any) -> tqdm:
    """Returns a tqdm bar over ``iterable`` (or a manual one: ``total=``), silent when not ``enabled``;
    when stderr is not a terminal, it prints a plain line at most every ``LOG_INTERVAL_S`` seconds, shared
    with the other bars of the process, none in its first ``LOG_INTERVAL_S`` seconds."""
    from tqdm import tqdm

    if enabled and not sys.stderr.isatty():
        every = {"mininterval": LOG_INTERVAL_S, "maxinterval": max(LOG_INTERVAL_S, 10.0)}
        quiet = {**every, "delay": LOG_INTERVAL_S}
        kwargs = {**quiet, "file": _Lines(sys.stderr), "ascii": True, **kwargs}
    return tqdm(iterable, disable=not enabled, **kwargs)


def quiet_library_bars() -> None:
    """When stderr is not a terminal, turns off other libraries' progress bars, which would write
    carriage-return lines into logs (ours, ``progress_bar``, pass ``disable`` and print plain lines),
    through the variables each library reads at its import (``LIBRARY_BARS_OFF``; one the user set is
    kept). For a process of nfeval's own, before those libraries are imported. Returns None."""
    if not sys.stderr.isatty():
        for name, value in LIBRARY_BARS_OFF.items():
            os.environ.setdefault(name, value)


def library_bars_shown(progress: bool) -> bool:
    """Returns whether a library bar whose ``disable`` we choose (lm-eval's "Tokenizing inputs") is
    shown: only with ``progress`` on, on a terminal."""
    return progress and sys.stderr.isatty()


def bars_lock_of_this_process() -> None:
    """Makes the progress bars of this process (a pool worker) take a lock of its threads only; returns
    None. tqdm's default lock is a multiprocessing one, which a worker terminated when its command is
    stopped would leave for the resource tracker to report as leaked; a spawned worker shares it with no
    other process anyway."""
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
