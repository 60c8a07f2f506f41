"""The libraries' own folders under the home (matplotlib's config and cache, Hugging Face's caches) when
the home cannot be written (a read-only home, a home on a full or read-only filesystem).

matplotlib then makes a temp folder of its own and says so in two warnings on every command that draws
(``leaderboard``, ``compare --plot``, ``analyze``); ``matplotlib_dirs_elsewhere`` gives it that temp folder
first, through the variable it reads (``MPLCONFIGDIR``), so nothing is said. A Hugging Face cache that a
command needs (transformers' module cache, where ``export-hf`` loads its remote code) is named in one
line with the variable that moves it (``hf_cache_error``). nfeval's own cache (``~/.cache/nfeval``: token
streams, tokenizers, zero-shot answers) moves to a temporary folder for the run, said in one line
(``nfeval_cache_root``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .errors import OutputError


def _can_hold(folder: Path) -> bool:
    """Returns whether ``folder`` is, or can be made as, a folder this process may write in (nothing is
    made: its nearest existing ancestor is asked)."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    return existing.is_dir() and os.access(existing, os.W_OK)


def _matplotlib_dirs() -> list[Path]:
    """Returns the config and cache folders matplotlib uses when ``MPLCONFIGDIR`` is unset
    (``matplotlib._get_config_or_cache_dir``): the XDG ones on Linux and FreeBSD, ``~/.matplotlib``
    elsewhere; [] when the home cannot be resolved (matplotlib then makes its temp folder anyway)."""
    try:
        home = Path.home()
    except RuntimeError:
        return []
    if not sys.platform.startswith(("linux", "freebsd")):
        return [home / ".matplotlib"]
    config = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    cache = os.environ.get("XDG_CACHE_HOME") or str(home / ".cache")
    return [Path(config, "matplotlib"), Path(cache, "matplotlib")]


def matplotlib_dirs_elsewhere() -> str | None:
    """When ``MPLCONFIGDIR`` is unset and matplotlib's own config or cache folder cannot be made or written,
    points ``MPLCONFIGDIR`` at a temp folder removed when the process exits (what matplotlib itself would
    do, warning twice); returns that folder, or None when nothing was changed. For a process of nfeval's
    own, before matplotlib is imported."""
    if os.environ.get("MPLCONFIGDIR"):
        return None
    dirs = _matplotlib_dirs()
    if dirs and all(_can_hold(folder) for folder in dirs):
        return None
    try:
        folder = tempfile.mkdtemp(prefix="nfeval-matplotlib-")
    except OSError:  # no temp folder either: matplotlib says what to do
        return None
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ["MPLCONFIGDIR"] = folder
    return folder


CACHE_VARIABLE = "NFEVAL_CACHE"


def default_cache() -> str:
    """Returns nfeval's cache folder when ``NFEVAL_CACHE`` is unset: ``~/.cache/nfeval``."""
    return os.path.join(os.path.expanduser("~"), ".cache", "nfeval")


def nfeval_cache_root() -> str:
    """Returns nfeval's cache folder: ``$NFEVAL_CACHE`` when set (used as given, so a folder the user named
    that cannot be written is refused where it is needed); else ``~/.cache/nfeval``, or, when that cannot
    be made or written (a read-only home), a temporary folder removed when the process exits. That folder
    is said once, in one line on stderr, and passed on to the processes this one starts (through
    ``NFEVAL_CACHE``), so a run goes on with its caches kept for its own length."""
    given = os.environ.get(CACHE_VARIABLE)
    if given:
        return given
    default = default_cache()
    if _can_hold(Path(default)):
        return default
    try:
        folder = tempfile.mkdtemp(prefix="nfeval-cache-")
    except OSError:  # no temp folder either: the cache's users say what failed
        return default
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ[CACHE_VARIABLE] = folder
    print(
        f"nfeval: {default} cannot be written; caching in {folder} for this run (removed at its end; set "
        f"{CACHE_VARIABLE} to a writable folder to keep the cache)",
        file=sys.stderr,
        flush=True,
    )
    return folder


def hf_cache_error(error: OSError, cache: str, why: str, variable: str = "HF_HOME") -> OutputError | None:
    """Returns the one-line OutputError for an OSError that hit the Hugging Face cache folder ``cache``
    (itself, a folder on the way to it, or a file in it), which the command needs because ``why``: it
    names the folder and ``variable``, the one that moves it (``HF_HOME`` moves every Hugging Face
    cache); None for an error elsewhere."""
    if not error.filename:
        return None
    hit, folder = os.path.abspath(os.fsdecode(error.filename)), os.path.abspath(cache)
    if os.path.commonpath([hit, folder]) not in (hit, folder):
        return None
    default = " (default ~/.cache/huggingface)" if variable == "HF_HOME" else ""
    return OutputError(
        f"{folder}: cannot write ({error.strerror or error}), where {why}; set {variable}{default} to a "
        "writable folder"
    )
