"""lm-eval task definitions for nfeval's five zero-shot tasks, in two variants each.

``<task>_hub`` reads lm-eval's own Hub dataset; ``<task>_local`` reads local files (see
``tasks/loaders.py``). Both share one YAML template per task (prompt, choices, target, metrics), so a
hub and a local run differ only in where the documents come from. Pass ``TASKS_DIR`` to lm-eval's
``TaskManager(include_path=...)`` to register them.
"""

from __future__ import annotations

import os

TASKS_DIR = os.path.dirname(os.path.abspath(__file__))

CANONICAL_TASKS = ("hellaswag", "piqa", "winogrande", "storycloze_2016", "storycloze_2018", "openbookqa")
DEFAULT_TASKS = ("hellaswag", "piqa", "winogrande", "storycloze_2016", "openbookqa")

# Answer choices per item, so chance accuracy is one over it; corpus_cloze is nfeval's own cloze task
# (nfeval/zeroshot/cloze.py: the true next sentence and three drawn from other documents).
CHOICES = {
    "hellaswag": 4,
    "piqa": 2,
    "winogrande": 2,
    "storycloze_2016": 2,
    "storycloze_2018": 2,
    "openbookqa": 4,
    "corpus_cloze": 4,
}

# The GPT-3 paper's scoring convention per task (Brown et al. 2020, sec. 2.4).
GPT3_METRIC = {
    "hellaswag": "acc_per_token",
    "piqa": "acc_per_token",
    "winogrande": "acc",  # partial scoring, lm-eval's default for winogrande
    "storycloze_2016": "acc_per_token",
    "storycloze_2018": "acc_per_token",
    "openbookqa": "acc_uncond",
}


def registered_name(task: str, local: bool) -> str:
    """Returns the registered task name for a canonical name (``piqa`` → ``piqa_local``/``piqa_hub``);
    any other name is returned unchanged."""
    if task in CANONICAL_TASKS:
        return f"{task}_{'local' if local else 'hub'}"
    return task


def canonical_name(task: str) -> str:
    """Returns the canonical task a registered name scores (``piqa_local`` → ``piqa``); others unchanged."""
    for suffix in ("_local", "_hub"):
        if task.endswith(suffix) and task[: -len(suffix)] in CANONICAL_TASKS:
            return task[: -len(suffix)]
    return task
