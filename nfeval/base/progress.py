"""Progress bars that suit both a terminal and a log file.

On a terminal: an ordinary tqdm bar. Elsewhere (a log file, a pipe, a batch job's stdout) tqdm would write
a carriage-return line at every update; there the bar prints a plain status line at most every
``LOG_INTERVAL_S`` seconds instead, and none of the clearing sequences. Other libraries' bars (lm-eval's
request building, datasets' split generation, transformers' weight loading) are turned off there
(``quiet_library_bars``, called by the CLI before any command).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from tqdm import tqdm

LOG_INTERVAL_S = 30.0
# What turns the libraries' own bars off: tqdm's default for bars that do not say (lm-eval's), and the
# switches datasets, transformers and the Hub read at import.
LIBRARY_BARS_OFF = {
    "TQDM_DISABLE": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}
_TQDM_DEFAULT_OFF = False  # quiet_library_bars has set tqdm's default to disable=True


class _Lines:
    """A file for tqdm that turns each redraw into one plain line (no ``\\r``, no cursor moves)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\x1b[A", "").replace("\r", "").strip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable=None, *, enabled: bool = True, **kwargs: Any) -> tqdm:
    """Returns a tqdm bar over ``iterable`` (or a manual one: ``total=``), silent when not ``enabled``;
    when stderr is not a terminal, it prints a plain line at most every ``LOG_INTERVAL_S`` seconds."""
    if enabled and not sys.stderr.isatty():
        kwargs = {"mininterval": LOG_INTERVAL_S, "file": _Lines(sys.stderr), "ascii": True, **kwargs}
    return tqdm(iterable, disable=not enabled, **kwargs)


def quiet_library_bars() -> None:
    """When stderr is not a terminal, turns off other libraries' progress bars, which would write
    carriage-return lines into logs (ours, ``progress_bar``, print plain lines); a variable the user set
    is kept. Returns None."""
    global _TQDM_DEFAULT_OFF
    if sys.stderr.isatty():
        return
    for name, value in LIBRARY_BARS_OFF.items():
        os.environ.setdefault(name, value)
    # tqdm reads TQDM_DISABLE once, at its import, and this module imported it already: a bar that
    # does not say ``disable`` (lm-eval's request building) gets the default here instead
    if os.environ["TQDM_DISABLE"] == "1" and not _TQDM_DEFAULT_OFF:
        tqdm.__init__ = functools.partialmethod(tqdm.__init__, disable=True)
        _TQDM_DEFAULT_OFF = True
    if "datasets" in sys.modules:  # imported already: its switch was read
        sys.modules["datasets"].disable_progress_bars()


def library_bars_shown(progress: bool) -> bool:
    """Returns whether a library bar whose ``disable`` we choose (lm-eval's "Tokenizing inputs") is
    shown: only with ``progress`` on, on a terminal."""
    return progress and sys.stderr.isatty()
