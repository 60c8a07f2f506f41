"""lm-eval model adapters: ``NFEvalLM`` (registered as ``nfeval`` when ``nfeval.model_adapters.lm`` is
imported) and its fast scorer.

The names load lazily, so the backends a command needs without lm-eval (``backends``: an nfeval
checkpoint or a Hugging Face folder for ``nfeval generate``) import neither lm-eval nor the adapter.
Path → model is ``nfeval.engine.checkpoints.loading.identify``; the nfeval backend is
``nfeval.engine.inference.backend``.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"NFEvalLM": ".lm", "TokenLogLik": ".scorer", "score": ".scorer"}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    """Returns ``NFEvalLM``, ``TokenLogLik`` or ``score``, importing its module on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
