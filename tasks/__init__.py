"""lm-eval task definitions for nfeval's zero-shot tasks, in two variants each.

``<task>_hub`` reads lm-eval's own Hub dataset; ``<task>_local`` reads local files (``tasks/readers.py``,
through the hooks of ``tasks/loaders.py``). Both share one YAML template per task (prompt, choices,
target, metrics), so a hub and a local run differ only in where the documents come from. Pass
``TASKS_DIR`` to lm-eval's ``TaskManager(include_path=...)`` to register them. Each task is one record of
``tasks/registry.py``; the tables below are read from those records.
"""

from __future__ import annotations

import os

from .registry import (
    CANONICAL_TASKS,
    CHOICES,
    CLOZE_METRIC,
    DEFAULT_TASKS,
    EXTRA_TASKS,
    GPT3_METRIC,
    LEADERBOARD_METRIC,
    LM_EVAL_NAMES,
    NAMES,
    TITLES,
    USER_SUPPLIED,
    canonical_name,
    join_titles,
    judged_metric,
    record,
    registered_name,
)

TASKS_DIR = os.path.dirname(os.path.abspath(__file__))

__all__ = [
    "CANONICAL_TASKS",
    "CHOICES",
    "CLOZE_METRIC",
    "DEFAULT_TASKS",
    "EXTRA_TASKS",
    "GPT3_METRIC",
    "LEADERBOARD_METRIC",
    "LM_EVAL_NAMES",
    "NAMES",
    "TASKS_DIR",
    "TITLES",
    "USER_SUPPLIED",
    "canonical_name",
    "join_titles",
    "judged_metric",
    "record",
    "registered_name",
]
