"""Whether the Hugging Face Hub answers, asked before a command loads a dataset from it: offline, the
datasets library retries for half a minute before it fails, so the one-line error comes at once instead.

With ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` set the Hub is not asked: the libraries then read
their own cache and fail at once when the dataset is not in it.
"""

from __future__ import annotations

import os
import socket
import threading
import urllib.parse
import urllib.request

from .errors import MissingDataError

PROBE_SECONDS = 2.0
OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def offline_mode() -> bool:
    """Returns whether the user switched the Hugging Face libraries offline (their spellings of true)."""
    return any(os.environ.get(n, "").strip().upper() in ("1", "ON", "YES", "TRUE") for n in OFFLINE_SWITCHES)


def address() -> tuple[str, int]:
    """Returns the (host, port) a Hub request first connects to: the https proxy when one is set, else
    the Hub's endpoint (``HF_ENDPOINT``, default huggingface.co)."""
    url = urllib.parse.urlsplit(
        urllib.request.getproxies().get("https") or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    )
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def reachable(host: str, port: int, seconds: float = PROBE_SECONDS) -> bool:
    """Returns whether a TCP connection to ``host:port`` opens within ``seconds`` (name lookup included:
    it has no timeout of its own, so it runs in a thread that is left behind when it hangs)."""
    done, answered = threading.Event(), []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=seconds).close()
            answered.append(True)
        except OSError:
            pass
        done.set()

    threading.Thread(target=connect, daemon=True).start()
    done.wait(seconds)
    return bool(answered)


def check_reachable(what: str, instead: str) -> None:
    """Raises MissingDataError naming ``what`` (the dataset or task) and ``instead`` (the flag that reads
    local files) when the Hub does not answer within ``PROBE_SECONDS``; returns None when it does, or
    when the user switched the libraries offline (``offline_mode``)."""
    if offline_mode():
        return
    host, port = address()
    if not reachable(host, port):
        raise MissingDataError(
            f"{what}: the Hugging Face Hub is unreachable ({host}:{port} did not answer within "
            f"{PROBE_SECONDS:g} s); {instead} (or set HF_DATASETS_OFFLINE=1 to read the Hugging Face cache)"
        )
