"""Run folders and checkpoints on disk: the run directory's files, torch files read safely, nfeval and
fairseq checkpoints loaded into the model.
"""
