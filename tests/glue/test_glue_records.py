"""A GLUE task is one record (nfeval/glue/specs.py): every record is complete, its splits agree across
its fields, and every table (readers, metrics, submission, leaderboard titles, help text) holds every
task, so a task added in part fails here."""

from __future__ import annotations

import dataclasses

import pytest

from nfeval.glue import data as glue_data
from nfeval.glue import metrics as glue_metrics
from nfeval.glue.specs import SPECS, TASKS, TaskSpec

RECORDS = list(SPECS.values())
IDS = list(SPECS)
OPTIONAL_FIELDS = {"labels", "test_text_columns", "num_columns"}


@pytest.mark.parametrize("spec", RECORDS, ids=IDS)
def test_every_record_is_complete(spec):
    for f in dataclasses.fields(spec):
        assert f.name in OPTIONAL_FIELDS or getattr(spec, f.name) not in (None, "", (), {}), f.name
    assert spec.title.strip() and spec.folder.strip() and spec.fairseq_lr > 0
    assert len(spec.text_columns) in (1, 2) and len(spec.hub_text_columns) == len(spec.text_columns)
    assert isinstance(spec.label_column, str) or spec.num_columns  # a headerless file says its width
    assert spec.labels is None or len(spec.labels) >= 2


@pytest.mark.parametrize("spec", RECORDS, ids=IDS)
def test_a_records_splits_and_metrics_agree(spec):
    assert spec.dev_files.keys() == spec.metrics.keys() == spec.hub_dev_splits.keys()
    named = [m for split in spec.metrics.values() for m in split]
    assert len(set(named)) == len(named) and spec.main_metric in named
    assert all(f in glue_metrics.SCORERS for split in spec.metrics.values() for f in split.values())
    first, *_ = spec.test_files.values()
    assert not first.optional  # --predict-test needs the first
    assert all(f.path and f.submission.endswith(".tsv") for f in spec.test_files.values())


def test_names_titles_and_submission_files_are_unique():
    titles = [s.title for s in RECORDS]
    files = [f.submission for s in RECORDS for f in s.test_files.values()]
    assert len(set(titles)) == len(titles) and len(set(files)) == len(files)


def test_derived_tables_hold_every_task():
    from nfeval.report import leaderboard_read as lr

    assert glue_data.TASKS == TASKS and set(glue_data.TEST_FILES) == set(TASKS)
    assert set(glue_metrics.SPLIT_METRICS) == set(glue_metrics.MAIN_METRIC) == set(TASKS)
    assert set(lr.GLUE_SCORE_METRICS) == set(TASKS) and all(t in lr.TITLES for t in TASKS)
    assert {lr.TITLES[t] for t in TASKS} == {s.title for s in RECORDS}


def test_the_glue_help_names_every_task():
    from nfeval.cli import build_parser

    parser = build_parser("glue")
    sub = next(a for a in parser._actions if a.dest == "command").choices["glue"]
    tasks_help = next(a.help for a in sub._actions if a.dest == "tasks")
    assert all(t in tasks_help for t in TASKS)


def test_a_record_is_built_from_named_fields_only():
    with pytest.raises(TypeError):
        TaskSpec("cola", "CoLA", "CoLA")  # type: ignore[misc]
