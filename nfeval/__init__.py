"""nfeval: train, score and compare NormFormer, Pre-LN and Post-LN transformers."""

__version__ = "0.1.0"
