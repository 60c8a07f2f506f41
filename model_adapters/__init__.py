"""lm-eval model adapters: ``NFEvalLM`` (registered as ``nfeval``) and its fast scorer.

Importing this package registers the ``nfeval`` model with lm-eval. Path → model is
``nfeval.engine.loading.identify``; the nfeval backend is ``nfeval.engine.backend`` (no lm-eval).
"""

from .lm import NFEvalLM
from .scorer import TokenLogLik, score

__all__ = ["NFEvalLM", "TokenLogLik", "score"]
