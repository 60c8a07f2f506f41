"""lm-eval records the git hash of the current directory (``results["git_hash"]``) by running
``git describe`` without redirecting its stderr, so outside a repository every evaluation prints
``fatal: not a git repository``. ``quiet_git_hash()`` swaps that one lookup, for the duration of an
nfeval call into lm-eval, for the same lookup with git's stderr dropped. nfeval's own provenance
carries nfeval's git hash (``artifacts.provenance``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator


def git_commit_hash() -> str | None:
    """Returns what ``lm_eval.loggers.utils.get_git_commit_hash`` returns (the current directory's
    ``git describe --always``, else the commit read from its .git folder), without git's stderr."""
    from lm_eval.loggers.utils import get_commit_from_path

    try:
        out = subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL)
        return out.strip().decode()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return get_commit_from_path(os.getcwd())


@contextlib.contextmanager
def quiet_git_hash() -> Iterator[None]:
    """Within the block, lm-eval's evaluator looks up the git hash quietly (``git_commit_hash``)."""
    import lm_eval.evaluator

    original = lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.get_git_commit_hash = git_commit_hash
    try:
        yield
    finally:
        lm_eval.evaluator.get_git_commit_hash = original
