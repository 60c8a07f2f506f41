"""Reports: compute-matched comparisons, leaderboards, plots."""
