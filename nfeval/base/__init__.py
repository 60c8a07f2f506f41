"""Ground floor used by every room: errors, atomic files, JSON, plots, progress, CLI options."""
