"""Scoring and generation over a trained model: KV-cached decoding, the vocabulary head and the engine
backend zero-shot and generate use.
"""
