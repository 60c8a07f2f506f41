"""Writing artifacts: atomic writes and the provenance block every artifact carries."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

import numpy
import torch

from .. import __version__
from .errors import OutputError
from .home import nfeval_cache_root


def cache_dir(*parts: str) -> str:
    """Returns nfeval's cache folder (``$NFEVAL_CACHE``, default ``~/.cache/nfeval``; a temporary one for
    the run when that cannot be written: ``home.nfeval_cache_root``) joined with ``parts``."""
    return os.path.join(nfeval_cache_root(), *parts)


def atomic_write_with(path: str, write: Callable[[str], Any]) -> None:
    """Has ``write(tmp)`` write the file at a temp path in ``path``'s folder, then renames it to ``path``
    (never half-written) with the permissions the umask gives a new file; the one atomic writer
    (``atomic_write_files`` of one file).

    A killed writer leaves only a ``.tmp-*`` file, which ``rundir.clean_temp_files`` deletes. An OS
    error (read-only or full filesystem, a file where a folder is expected) is a UserError naming
    ``path``; the file that was there stays as it was.
    """
    atomic_write_files([(path, write)])


def atomic_write_files(writes: list[tuple[str, Callable[[str], Any]]]) -> None:
    """Writes several files as one (a JSON and the PNG drawn from it): each ``(path, write)`` has
    ``write(tmp)`` write its file at a temp path in ``path``'s folder, and only once every one is written
    are they renamed into place, in the order given (the last one says the set is finished). An OS error
    (a full or read-only filesystem) is an OutputError naming the file it hit; the temp files are
    deleted and so is any file of the set already renamed (a rename after an earlier one failing: one
    folder's renames need no space), so none of the set lands without the others; a file not yet
    renamed stays as it was."""
    staged: list[tuple[str, str]] = []  # (temp file, its path)
    placed: list[str] = []
    current = writes[0][0] if writes else ""
    try:
        for current, write in writes:
            folder = os.path.dirname(os.path.abspath(current))
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(current))
            os.close(fd)
            staged.append((tmp, current))
            write(tmp)
            os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp (and safetensors) make 0600
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        for tmp, current in staged:
            os.replace(tmp, current)
            placed.append(current)
    except OSError as e:
        for path in placed:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise OutputError(f"{current}: cannot write ({e.strerror or e})") from None
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)


def bytes_writer(data: bytes) -> Callable[[str], None]:
    """Returns the writer of ``data`` for ``atomic_write_with`` and ``atomic_write_files``."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    return write


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically (``atomic_write_with``)."""
    atomic_write_with(path, bytes_writer(data))


def current_umask() -> int:
    """Returns the process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str, text: str) -> None:
    """Writes ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def json_bytes(obj: Any) -> bytes:
    """Returns ``obj`` as the indented JSON (UTF-8, a newline at the end) every JSON artifact is."""
    return (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode("utf-8")


def atomic_write_json(path: str, obj: Any) -> None:
    """Writes ``obj`` as indented JSON to ``path`` atomically."""
    atomic_write_bytes(path, json_bytes(obj))


def git_hash() -> str | None:
    """Returns the git commit of the nfeval source tree, or None when it is not a git checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def hardware() -> dict[str, Any]:
    """Returns a description of the compute device(s): used to warn when wall-clock comparisons mix
    hardware."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(0)
        info["cuda_device_count"] = torch.cuda.device_count()
    return info


def hardware_key(hw: dict[str, Any]) -> str:
    """Returns the part of a hardware description that decides wall-clock speed."""
    if hw.get("cuda_device"):
        return f"{hw['cuda_device']} x{hw.get('cuda_device_count', 1)}"
    return f"{hw.get('processor')} ({hw.get('torch_threads')} threads)"


@functools.cache
def libraries() -> dict[str, str | None]:
    """Returns the versions of the libraries that can move a run's numbers besides torch: numpy,
    tokenizers, and the CPU math libraries torch was built with (MKL, oneDNN: the two CPU linear kernels
    of ``engine.fast.cpu_linear``) and the instruction set torch's own CPU kernels use. Cheap: read
    from torch's build summary once per process (None: not in this build)."""
    info: dict[str, str | None] = {
        "numpy": numpy.__version__,
        "tokenizers": importlib.metadata.version("tokenizers"),
        "mkl": None,
        "onednn": None,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    for line in torch.__config__.show().splitlines():
        line = line.strip().removeprefix("- ")
        if "MKL-DNN" in line or "oneDNN" in line:  # "Intel(R) MKL-DNN v3.12.0 (Git Hash ...)"
            info["onednn"] = info["onednn"] or line
        elif "Math Kernel Library" in line:  # "Intel(R) oneAPI Math Kernel Library Version 2024.2-..."
            info["mkl"] = info["mkl"] or line
    return info


def provenance(**extra: Any) -> dict[str, Any]:
    """Returns nfeval version, git hash, library versions and hardware, plus ``extra`` fields."""
    return {
        "nfeval_version": __version__,
        "git_hash": git_hash(),
        "torch_version": torch.__version__,
        "libraries": dict(libraries()),
        "hardware": hardware(),
        **extra,
    }
