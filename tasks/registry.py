"""nfeval's zero-shot tasks, one record each: every table, title, help text and hook reads these.

Adding a task is one ``ZeroShotTask`` in ``TASKS`` (its reader in ``readers.py`` when its files are read
locally) and its lm-eval YAML under ``tasks/<folder>/``: the ``_local`` (and ``_hub``) variants name
``nfeval.tasks.loaders.<name>`` as their ``custom_dataset``. ``tests/zeroshot/test_task_records.py`` fails
for a task added in part. The GPT-3 rows of ``leaderboards/reference/gpt3.json`` are written from the
records (``python -m nfeval.tasks.registry > leaderboards/reference/gpt3.json``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

from . import readers

# The metric of a task the GPT-3 paper did not score: cloze-style tasks per token, as GPT-3 scored them.
CLOZE_METRIC = "acc_per_token"


@dataclass(frozen=True)
class Gpt3Reference:
    """A task's zero-shot scores in Brown et al. 2020, Table H.1, under the task's ``gpt3_metric``."""

    split: str  # the split the paper measured on
    convention: str  # the scoring convention, described
    scores: tuple[float, ...]  # percent, one per row of GPT3_MODELS


@dataclass(frozen=True, kw_only=True)
class ZeroShotTask:
    """One zero-shot task: its name, where and how its documents are read, how it is scored and shown."""

    name: str  # canonical: the key of results files, tables and --tasks
    title: str  # the leaderboard's column title
    reader: Callable[[str], dict[str, list[dict]]]  # data folder -> {split: HF-schema rows} (readers.py)
    folder: str  # the folder under the data folder that ``reader`` reads (and the request cache hashes)
    choices: int  # answer options per item: chance accuracy is 1 / choices
    gpt3_metric: str | None  # the GPT-3 paper's convention (Brown et al. 2020, sec. 2.4); None: not scored
    averaged: bool  # one of the paper's five: nfeval zeroshot's default, the leaderboard's average
    variants: bool = True  # registered as NAME_local (files) and NAME_hub (lm-eval's Hub copy); else NAME
    obtain: str | None = None  # how to get the files when their licence forbids redistribution
    gpt3: Gpt3Reference | None = None  # the paper's numbers, where it reports the task

    @property
    def user_supplied(self) -> bool:
        """Whether only the user can supply the files: never shipped, and no Hub copy is read."""
        return self.obtain is not None

    @property
    def leaderboard_metric(self) -> str:
        """Returns the metric of the task's column under ``--metric gpt3``."""
        return self.gpt3_metric or CLOZE_METRIC

    @property
    def lm_eval_names(self) -> tuple[str, ...]:
        """Returns the names the task is registered under in lm-eval."""
        return (f"{self.name}_local", f"{self.name}_hub") if self.variants else (self.name,)


PER_TOKEN = "per-token length normalisation"

TASKS: tuple[ZeroShotTask, ...] = (
    ZeroShotTask(
        name="hellaswag",
        title="HellaSwag",
        reader=readers.hellaswag_rows,
        folder="hellaswag",
        choices=4,
        gpt3_metric="acc_per_token",
        averaged=True,
        gpt3=Gpt3Reference("dev", PER_TOKEN, (33.7, 43.6, 51.0, 54.7, 62.8, 67.4, 70.9, 78.9)),
    ),
    ZeroShotTask(
        name="piqa",
        title="PIQA",
        reader=readers.piqa_rows,
        folder="piqa",
        choices=2,
        gpt3_metric="acc_per_token",
        averaged=True,
        gpt3=Gpt3Reference("dev", PER_TOKEN, (64.6, 70.2, 72.9, 75.1, 75.6, 78.0, 78.5, 81.0)),
    ),
    ZeroShotTask(
        name="winogrande",
        title="WinoGrande",
        reader=readers.winogrande_rows,
        folder="winogrande",
        choices=2,
        gpt3_metric="acc",  # partial scoring, lm-eval's default for winogrande
        averaged=True,
        gpt3=Gpt3Reference("dev", "partial scoring", (52.0, 52.1, 57.4, 58.7, 62.3, 64.5, 67.9, 70.2)),
    ),
    ZeroShotTask(
        name="storycloze_2016",
        title="StoryCloze",
        reader=functools.partial(readers.storycloze_rows, year="2016"),
        folder="storycloze",
        choices=2,
        gpt3_metric="acc_per_token",
        averaged=True,
        obtain=readers.STORYCLOZE_HELP.format(year="2016"),
        gpt3=Gpt3Reference("test", PER_TOKEN, (63.3, 68.5, 72.4, 73.4, 77.2, 77.7, 79.5, 83.2)),
    ),
    ZeroShotTask(
        name="storycloze_2018",
        title="StoryCloze 2018",
        reader=functools.partial(readers.storycloze_rows, year="2018"),
        folder="storycloze",
        choices=2,
        gpt3_metric="acc_per_token",
        averaged=False,
        obtain=readers.STORYCLOZE_HELP.format(year="2018"),
    ),
    ZeroShotTask(
        name="openbookqa",
        title="OpenBookQA",
        reader=readers.openbookqa_rows,
        folder="openbookqa",
        choices=4,
        gpt3_metric="acc_uncond",
        averaged=True,
        gpt3=Gpt3Reference(
            "test", "unconditional normalisation", (35.6, 43.2, 45.2, 46.8, 53.0, 50.4, 55.6, 57.6)
        ),
    ),
    # nfeval's own cloze task (nfeval/zeroshot/cloze.py: the true next sentence and three drawn from
    # other documents of a corpus), which nfeval demo writes
    ZeroShotTask(
        name="corpus_cloze",
        title="Corpus cloze",
        reader=readers.corpus_cloze_rows,
        folder="corpus_cloze",
        choices=4,
        gpt3_metric=None,
        averaged=False,
        variants=False,
    ),
)

# ---------------------------------------------------------------- the tables every other module reads

BY_NAME = {t.name: t for t in TASKS}
NAMES = tuple(BY_NAME)
CANONICAL_TASKS = tuple(t.name for t in TASKS if t.variants)  # those with _local and _hub variants
DEFAULT_TASKS = tuple(t.name for t in TASKS if t.averaged)
EXTRA_TASKS = tuple(t.name for t in TASKS if not t.averaged)  # shown when present, not averaged
CHOICES = {t.name: t.choices for t in TASKS}
GPT3_METRIC = {t.name: t.gpt3_metric for t in TASKS if t.gpt3_metric}
LEADERBOARD_METRIC = {t.name: t.leaderboard_metric for t in TASKS}
TITLES = {t.name: t.title for t in TASKS}
USER_SUPPLIED = tuple(t.name for t in TASKS if t.user_supplied)
LM_EVAL_NAMES = tuple(n for t in TASKS for n in t.lm_eval_names)  # every name nfeval registers


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


def record(name: str) -> ZeroShotTask | None:
    """Returns the record of the task a name (canonical or registered) scores; None for lm-eval's own."""
    return BY_NAME.get(canonical_name(name))


def judged_metric(name: str) -> str:
    """Returns the metric a task (any lm-eval name) is judged by: its ``leaderboard_metric``, per-token
    accuracy for a task not nfeval's."""
    found = record(name)
    return found.leaderboard_metric if found else CLOZE_METRIC


def join_titles(names: tuple[str, ...] | list[str]) -> str:
    """Returns the tasks' titles as prose: ``HellaSwag, PIQA and WinoGrande``."""
    titles = [TITLES[n] for n in names]
    return " and ".join(filter(None, [", ".join(titles[:-1]), titles[-1]])) if titles else ""


# ---------------------------------------------------------------- the GPT-3 reference file

GPT3_TOKENS = 300_000_000_000  # every GPT-3 model's training tokens (Brown et al. 2020, sec. 2.2)
GPT3_MODELS = (  # (name, nominal parameters), in Table H.1's order
    ("GPT-3 Small 125M", 125_000_000),
    ("GPT-3 Medium 350M", 350_000_000),
    ("GPT-3 Large 760M", 760_000_000),
    ("GPT-3 XL 1.3B", 1_300_000_000),
    ("GPT-3 2.7B", 2_700_000_000),
    ("GPT-3 6.7B", 6_700_000_000),
    ("GPT-3 13B", 13_000_000_000),
    ("GPT-3 175B", 175_000_000_000),
)
GPT3_HEADER = {
    "name": "GPT-3",
    "citation": "Brown et al. 2020, Language Models are Few-Shot Learners, Table H.1 (zero-shot)",
    "url": "https://arxiv.org/abs/2005.14165",
    "units": "percent",
    "architecture": "GPT-3",
}


def gpt3_reference_text() -> str:
    """Returns ``leaderboards/reference/gpt3.json`` as the records write it (the README's format)."""
    reported = [t for t in TASKS if t.gpt3]
    dump = functools.partial(json.dumps, ensure_ascii=False)
    lines = ["{", *(f"  {dump(k)}: {dump(v)}," for k, v in GPT3_HEADER.items()), '  "tasks": {']
    specs = [
        {"metric": t.gpt3_metric, "split": t.gpt3.split, "convention": t.gpt3.convention} for t in reported
    ]
    lines += [f"    {dump(t.name)}: {dump(s)}," for t, s in zip(reported, specs)]
    lines[-1] = lines[-1].removesuffix(",")
    lines += ["  },", '  "models": [']
    for i, (name, parameters) in enumerate(GPT3_MODELS):
        scores = {t.name: t.gpt3.scores[i] for t in reported}
        lines.append(f'    {{"name": {dump(name)}, "parameters": {parameters}, "tokens": {GPT3_TOKENS},')
        lines.append(f'     "scores": {dump(scores)}}},')
    lines[-1] = lines[-1].removesuffix(",")
    return "\n".join([*lines, "  ]", "}", ""])


if __name__ == "__main__":
    print(gpt3_reference_text(), end="")
