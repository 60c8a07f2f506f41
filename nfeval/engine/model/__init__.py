"""The model: ModelConfig's fields, the one Block and its norms, initialisation, the KV cache and the FLOP
count. Plain torch.nn; imports nothing else of the engine.
"""
