"""One module per ``nfeval`` command: ``add_arguments(parser)`` and ``run(args) -> int``."""
