"""The composed pipelines: demo, reproduce and bakeoff, siblings that import the modules they share
(beside them here) and never each other."""
