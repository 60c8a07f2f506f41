"""Stopping a command: Ctrl-C (SIGINT, Python's KeyboardInterrupt) and SIGTERM (``Terminated``, once
``raise_on_sigterm`` is installed) unwind the same way, so locks are released, temporary files removed and
pool workers stopped (``launch.local.worker_pool``) before the command reports one line and exits with the
shell's status for the signal (130, 143)."""

from __future__ import annotations

import signal


class Terminated(BaseException):
    """SIGTERM arrived; raised in the main thread as KeyboardInterrupt is for Ctrl-C (a BaseException,
    so ``except Exception`` does not swallow it)."""


STOPS = (KeyboardInterrupt, Terminated)


def raise_on_sigterm() -> None:
    """Makes SIGTERM raise ``Terminated`` in this process's main thread; returns None."""
    signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum, frame) -> None:
    # one is enough: a second while the command stops would cut its clean-up short (orphaned workers)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


def exit_status(stop: BaseException) -> int:
    """Returns the exit status of a command ``stop`` ended (one of ``STOPS``): 128 + the signal's number,
    as a shell reports a process the signal killed (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + (signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT)
