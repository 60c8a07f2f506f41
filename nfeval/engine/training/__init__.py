"""Training: TrainConfig and its flags, the recipe record, the data and objective, the Trainer loop,
budgets and step-time ratios, gradient statistics, run records and torch.distributed.
"""
