"""The training and inference engine: config, model, tokenization, data, checkpoints, training."""
