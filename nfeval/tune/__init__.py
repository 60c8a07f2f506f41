"""Pretraining learning-rate sweeps: the sweep and its results."""
