"""The composed pipelines: the demo, reproduce, and the stages they share."""
