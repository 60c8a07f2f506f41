"""lm-eval model adapters: ``NFEvalLM`` (registered as ``nfeval``) and its fast scorer.

Importing this package registers the ``nfeval`` model with lm-eval.
"""

from .backends import Identity, identify
from .lm import NFEvalLM
from .scorer import TokenLogLik, score

__all__ = ["NFEvalLM", "Identity", "identify", "TokenLogLik", "score"]
