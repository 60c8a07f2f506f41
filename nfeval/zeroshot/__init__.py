"""The zero-shot family: evaluation through lm-eval, its cache, per-item records, cloze."""
