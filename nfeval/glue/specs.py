"""The GLUE tasks nfeval fine-tunes, one record each: every table of the readers, the metrics, the
submission and the leaderboard reads these.

Adding a task is one ``TaskSpec`` in ``SPECS`` (its scorers, if new, in ``metrics.SCORERS``);
``tests/glue/test_glue_records.py`` fails for a task added in part.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import ConfigError


@dataclass(frozen=True)
class SubmissionFile:
    """One test split of a task: where it is in the GLUE distribution and the server's file for it."""

    path: str  # under the GLUE folder
    submission: str  # the file the GLUE server expects
    optional: bool = False  # --predict-test goes on without it


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """One GLUE task: its files and columns (distribution TSVs and the ``nyu-mll/glue`` Hub copy), its
    labels, metrics and recipe, and its title."""

    name: str  # the task key (--tasks, results, the Hub's configuration)
    title: str  # the leaderboard's column title
    folder: str  # folder in the GLUE distribution
    text_columns: tuple  # header names (or positions when there is no header): one, or a pair
    label_column: str | int
    labels: tuple[str, ...] | None  # label strings in id order; None for regression (STS-B)
    dev_files: dict[str, str]  # dev split name -> file name
    # dev split name -> {metric reported: its scorer in metrics.SCORERS}, as the GLUE benchmark scores it
    metrics: dict[str, dict[str, str]]
    main_metric: str  # the metric that picks the best epoch and the best learning rate
    large: bool  # a large task: batch 32 in the RoBERTa recipe, 16 otherwise
    fairseq_lr: float  # the learning rate of fairseq's RoBERTa GLUE recipe
    hub_text_columns: tuple[str, ...]
    hub_dev_splits: dict[str, str]  # dev split name -> hub split
    # test split -> its file; the first is the one --predict-test needs
    test_files: dict[str, SubmissionFile]
    test_text_columns: tuple[str, ...] | None = None  # the test file's text columns, where they differ
    num_columns: int | None = None  # for headerless files

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def is_regression(self) -> bool:
        return self.labels is None


def _one_dev_split(**fields) -> TaskSpec:
    """Returns the spec of a task whose one dev split is ``dev.tsv`` (the Hub's ``validation``) and whose
    one test split is ``test.tsv`` in its folder (the server's ``<folder>.tsv``)."""
    folder = fields["folder"]
    return TaskSpec(
        dev_files={"dev": "dev.tsv"},
        hub_dev_splits={"dev": "validation"},
        test_files={"test": SubmissionFile(f"{folder}/test.tsv", f"{folder}.tsv")},
        **fields,
    )


BINARY = ("0", "1")
NLI2 = ("entailment", "not_entailment")
ACCURACY = {"dev": {"accuracy": "accuracy"}}
ACCURACY_F1 = {"dev": {"accuracy": "accuracy", "f1": "f1"}}
TASKS_IN_ORDER: tuple[TaskSpec, ...] = (
    _one_dev_split(
        name="cola",
        title="CoLA",
        folder="CoLA",
        text_columns=(3,),
        label_column=1,
        num_columns=4,
        labels=BINARY,
        metrics={"dev": {"mcc": "mcc"}},
        main_metric="mcc",
        large=False,
        fairseq_lr=1e-5,
        hub_text_columns=("sentence",),
        test_text_columns=("sentence",),  # CoLA's train/dev have no header; its test file does
    ),
    _one_dev_split(
        name="sst2",
        title="SST-2",
        folder="SST-2",
        text_columns=("sentence",),
        label_column="label",
        labels=BINARY,
        metrics=ACCURACY,
        main_metric="accuracy",
        large=True,
        fairseq_lr=1e-5,
        hub_text_columns=("sentence",),
    ),
    _one_dev_split(
        name="mrpc",
        title="MRPC",
        folder="MRPC",
        text_columns=("#1 String", "#2 String"),
        label_column="Quality",
        labels=BINARY,
        metrics=ACCURACY_F1,
        main_metric="f1",
        large=False,
        fairseq_lr=1e-5,
        hub_text_columns=("sentence1", "sentence2"),
    ),
    _one_dev_split(
        name="stsb",
        title="STS-B",
        folder="STS-B",
        text_columns=("sentence1", "sentence2"),
        label_column="score",
        labels=None,
        metrics={"dev": {"pearson": "pearson", "spearman": "spearman"}},
        main_metric="pearson",
        large=False,
        fairseq_lr=2e-5,
        hub_text_columns=("sentence1", "sentence2"),
    ),
    _one_dev_split(
        name="qqp",
        title="QQP",
        folder="QQP",
        text_columns=("question1", "question2"),
        label_column="is_duplicate",
        labels=BINARY,
        metrics=ACCURACY_F1,
        main_metric="f1",
        large=True,
        fairseq_lr=1e-5,
        hub_text_columns=("question1", "question2"),
    ),
    TaskSpec(
        name="mnli",
        title="MNLI",
        folder="MNLI",
        text_columns=("sentence1", "sentence2"),
        label_column="gold_label",
        labels=("entailment", "neutral", "contradiction"),
        dev_files={"dev_matched": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv"},
        metrics={"dev_matched": {"accuracy_m": "accuracy"}, "dev_mismatched": {"accuracy_mm": "accuracy"}},
        main_metric="accuracy_m",
        large=True,
        fairseq_lr=1e-5,
        hub_text_columns=("premise", "hypothesis"),
        hub_dev_splits={"dev_matched": "validation_matched", "dev_mismatched": "validation_mismatched"},
        test_files={
            "test_matched": SubmissionFile("MNLI/test_matched.tsv", "MNLI-m.tsv"),
            "test_mismatched": SubmissionFile("MNLI/test_mismatched.tsv", "MNLI-mm.tsv"),
            # the diagnostic set, predicted by MNLI's model
            "ax": SubmissionFile("diagnostic/diagnostic.tsv", "AX.tsv", optional=True),
        },
    ),
    _one_dev_split(
        name="qnli",
        title="QNLI",
        folder="QNLI",
        text_columns=("question", "sentence"),
        label_column="label",
        labels=NLI2,
        metrics=ACCURACY,
        main_metric="accuracy",
        large=True,
        fairseq_lr=1e-5,
        hub_text_columns=("question", "sentence"),
    ),
    _one_dev_split(
        name="rte",
        title="RTE",
        folder="RTE",
        text_columns=("sentence1", "sentence2"),
        label_column="label",
        labels=NLI2,
        metrics=ACCURACY,
        main_metric="accuracy",
        large=False,
        fairseq_lr=2e-5,
        hub_text_columns=("sentence1", "sentence2"),
    ),
)

SPECS: dict[str, TaskSpec] = {s.name: s for s in TASKS_IN_ORDER}
TASKS = tuple(SPECS)
TITLES = {s.name: s.title for s in TASKS_IN_ORDER}


def spec(task: str) -> TaskSpec:
    """Returns the spec of a task key; ConfigError naming the known tasks otherwise."""
    if task not in SPECS:
        raise ConfigError(f"unknown GLUE task {task!r}: expected one of {', '.join(TASKS)}")
    return SPECS[task]
