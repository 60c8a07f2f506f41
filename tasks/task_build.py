"""Task building for ``nfeval zeroshot`` without lm-eval's fixed costs, requests unchanged.

Inside ``building(limit, use_cache)`` (``tasks/gpt3.py``'s ``GPT3Task`` reads the plan):

- only the first ``limit`` documents of the eval split are processed (``process_docs``, lm-eval's
  ``Map``) and turned into requests, by lm-eval's own code, so the requests are those of a full
  build's first ``limit`` documents; the split's full size is kept for ``n-samples.original``;
- built requests are cached under ``cache_dir("zeroshot-requests")``, keyed by the task config (hooks
  by source), the data fingerprint (the bytes of a local task's files, the Hub dataset's own
  fingerprint) and the limit, so a rerun skips processing and request building (and, for local
  files, loading). An entry carries its key and a digest of its contents, checked on every read:
  a damaged or foreign entry is rebuilt, never trusted;
- lm-eval's Jinja templates (``doc_to_text`` etc.) are compiled once per template string instead of
  once per document and call: the same environment renders the same template, so the text is
  identical;
- the results' ``pretty_env_info`` is one line (versions and platform) instead of torch's
  ``collect_env``, which runs pip and other programs (seconds a run); nfeval's ``provenance`` block
  records the versions that matter.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import inspect
import json
import os
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..base.errors import OutputError
from ..base.jsonio import sha256_json

# Bump when the cached layout or what goes into a key changes.
BUILD_VERSION = 1
CACHED_TYPES = ("loglikelihood", "multiple_choice")  # requests whose arguments are plain strings


@dataclass
class BuildPlan:
    """What ``nfeval zeroshot`` asks of task building: the documents wanted and the request cache."""

    limit: int | None
    use_cache: bool
    log: Callable[[str], None]


_PLAN: contextvars.ContextVar[BuildPlan | None] = contextvars.ContextVar("nfeval_build_plan", default=None)


def current() -> BuildPlan | None:
    """Returns the plan of the ``building`` block this runs in, or None (plain lm-eval behaviour)."""
    return _PLAN.get()


@contextlib.contextmanager
def building(limit: int | None, use_cache: bool, log: Callable[[str], None]) -> Iterator[BuildPlan]:
    """Yields the plan that tasks built (and scored) inside the block follow; templates compiled once."""
    import lm_eval.utils
    import torch.utils.collect_env

    token = _PLAN.set(BuildPlan(limit, use_cache, log))
    with contextlib.ExitStack() as stack:
        compiled = _compiled_apply_template(lm_eval.utils.env)
        stack.enter_context(_patched(lm_eval.utils, "apply_template", compiled))
        stack.enter_context(_patched(torch.utils.collect_env, "get_pretty_env_info", _short_env_info))
        try:
            yield _PLAN.get()
        finally:
            _PLAN.reset(token)


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Sets ``owner.name`` to ``value`` for the block, then restores it."""
    stock = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, stock)


def _short_env_info() -> str:
    """Returns the versions and platform in one line (what stands in for torch's collect_env)."""
    import torch

    return (f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}, "
            f"{platform.platform()} (nfeval zeroshot: torch's collect_env not run)")  # fmt: skip


def _compiled_apply_template(env) -> Callable[[str, dict], str]:
    """Returns lm-eval's ``apply_template`` with each template string compiled once by ``env``."""
    compiled = functools.lru_cache(maxsize=None)(env.from_string)

    def apply_template(template: str, doc: dict) -> str:
        return compiled(template).render(**doc)

    return apply_template


# ---------------------------------------------------------------- keys and fingerprints


def files_fingerprint(root: str, paths: list[str]) -> str:
    """Returns the sha256 over the names (relative to ``root``) and bytes of ``paths``."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def request_key(config: dict, task_class: type, data_fingerprint: str, limit: int | None) -> str:
    """Returns the request-cache key of a task: its config (hooks by source, metadata but the data
    directory), class source, data fingerprint, the limit and the lm-eval version."""
    import lm_eval

    cfg = {k: v for k, v in config.items() if k != "metadata"}
    meta = config.get("metadata") or {}
    cfg["metadata"] = {k: v for k, v in meta.items() if k != "data_dir"}
    classes = [inspect.getsource(c) for c in task_class.__mro__ if c.__module__.startswith("tasks")]
    return sha256_json(
        {
            "config": cfg,
            "class": classes,
            "data": data_fingerprint,
            "limit": limit,
            "lm_eval": lm_eval.__version__,
            "build_version": BUILD_VERSION,
        }
    )


# ---------------------------------------------------------------- the request cache


def entry_path(key: str) -> str:
    """Returns the path of the request-cache entry stored under ``key``."""
    from ..base.artifacts import cache_dir

    return os.path.join(cache_dir("zeroshot-requests"), f"{key}.json")


def write_requests(key: str, split: str, original: int, docs: list[dict], instances: list) -> None:
    """Writes one task's processed eval documents and requests under ``key`` (JSON, with a digest)."""
    from ..base.artifacts import atomic_write_json

    payload = {
        "split": split,
        "original": original,
        "docs": docs,
        "requests": [[i.request_type, i.doc_id, i.idx, list(i.arguments)] for i in instances],
    }
    try:
        payload = json.loads(json.dumps(payload))  # what a reader gets back, digested as read
    except (TypeError, ValueError):  # documents JSON cannot hold: built afresh every run
        return
    with contextlib.suppress(OutputError):  # a cache that cannot be written (a read-only home) keeps nothing
        atomic_write_json(entry_path(key), {"key": key, "digest": sha256_json(payload), "payload": payload})


def read_requests(key: str, log: Callable[[str], None]) -> dict[str, Any] | None:
    """Returns the cached payload under ``key`` ({split, original, docs, requests}), or None when there
    is none or it fails a check (logged: it is then rebuilt and rewritten)."""
    path = entry_path(key)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        payload = entry["payload"]
        problem = _problem(entry, key, payload)
    except (OSError, ValueError, KeyError, TypeError) as e:
        problem = f"unreadable ({type(e).__name__})"
    if problem:
        log(f"{path}: ignoring the damaged request cache entry and rebuilding ({problem})")
        return None
    return payload


def _problem(entry: dict, key: str, payload: dict) -> str | None:
    """Returns what is wrong with a cache entry, or None when it holds sound requests for ``key``."""
    if entry.get("key") != key:
        return "stored under another key"
    if entry.get("digest") != sha256_json(payload):
        return "contents do not match their digest"
    docs, requests = payload["docs"], payload["requests"]
    if not (isinstance(docs, list) and docs and all(isinstance(d, dict) for d in docs)):
        return "no documents"
    if not isinstance(payload["original"], int) or payload["original"] < len(docs):
        return "bad document count"
    for req in requests:
        kind, doc_id, idx, args = req
        if kind not in CACHED_TYPES or not (isinstance(doc_id, int) and 0 <= doc_id < len(docs)):
            return "bad request"
        if not isinstance(idx, int) or not all(isinstance(a, str) for a in args):
            return "bad request"
    if not requests or {r[1] for r in requests} != set(range(len(docs))):
        return "documents without requests"
    return None


def instances(payload: dict, docs, task_name: str, repeats: int) -> list:
    """Returns lm-eval Instances for a cached payload's requests, over the task's ``docs``."""
    from lm_eval.api.instance import Instance

    return [
        Instance(
            request_type=kind,
            doc=docs[doc_id],
            arguments=tuple(args),
            idx=idx,
            metadata=(task_name, doc_id, repeats),
        )  # fmt: skip
        for kind, doc_id, idx, args in payload["requests"]
    ]
