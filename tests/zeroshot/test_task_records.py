"""A zero-shot task is one record (tasks/registry.py) and its lm-eval YAML: every record is complete, and
every table, title, help text, hook and reference row read from the records holds every task, so a task
added in part fails here."""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from nfeval import embedded
from nfeval import tasks as nf_tasks
from nfeval.tasks import loaders, registry
from nfeval.tasks.gpt3 import METRIC_DESCRIPTIONS
from nfeval.tasks.loaders import MissingData

REPO = Path(__file__).resolve().parents[2]
RECORDS = registry.TASKS
IDS = [t.name for t in RECORDS]


class _Tagged(yaml.SafeLoader):
    """Reads lm-eval's YAML without importing what ``!function`` names."""


_Tagged.add_constructor("!function", lambda loader, node: ("!function", loader.construct_scalar(node)))


def _yamls() -> dict[str, tuple[str, dict]]:
    """Returns {registered task name: (YAML path, its mapping)} of every YAML under tasks/."""
    out = {}
    for path in glob.glob(os.path.join(nf_tasks.TASKS_DIR, "*", "*.yaml")):
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=_Tagged)
        if "task" in doc:
            out[doc["task"]] = (path, doc)
    return out


@pytest.mark.parametrize("task", RECORDS, ids=IDS)
def test_every_record_is_complete(task):
    for f in dataclasses.fields(task):
        assert f.name in {"obtain", "gpt3", "gpt3_metric"} or getattr(task, f.name) not in (None, ""), f.name
    assert task.name.isidentifier() and task.title.strip() and callable(task.reader)
    assert task.folder and os.sep not in task.folder and task.choices >= 2
    assert task.leaderboard_metric in METRIC_DESCRIPTIONS
    if task.gpt3 is not None:  # the paper's numbers follow the convention the record names
        assert task.gpt3_metric in METRIC_DESCRIPTIONS and task.gpt3.split and task.gpt3.convention
        assert len(task.gpt3.scores) == len(registry.GPT3_MODELS)
        assert all(0 < s < 100 for s in task.gpt3.scores)
    if task.user_supplied:
        assert task.obtain.strip()


def test_names_and_titles_are_unique():
    assert len(set(IDS)) == len(IDS)
    assert len({t.title for t in RECORDS}) == len(RECORDS)


@pytest.mark.parametrize("task", RECORDS, ids=IDS)
def test_every_registered_name_has_its_yaml_and_hook(task):
    yamls = _yamls()
    for name in task.lm_eval_names:
        assert name in yamls, f"no YAML under tasks/ says 'task: {name}'"
        path, doc = yamls[name]
        assert os.path.basename(os.path.dirname(path)) == task.folder, f"{path}: not in tasks/{task.folder}"
        if name.endswith("_hub"):
            continue
        assert doc.get("custom_dataset") == ("!function", f"nfeval.tasks.loaders.{task.name}"), path
    hook = getattr(loaders, task.name)
    assert hook.canonical == task.name and hook is getattr(loaders, task.name)


def test_no_yaml_or_hook_without_a_record():
    assert set(_yamls()) <= set(registry.LM_EVAL_NAMES)
    with pytest.raises(AttributeError):
        loaders.arc_easy  # noqa: B018


@pytest.mark.parametrize("task", RECORDS, ids=IDS)
def test_the_reader_reads_the_records_folder(task, tmp_path):
    """The data folder is the record's: an empty data folder is refused naming a file in it."""
    with pytest.raises(MissingData, match=f"{task.name}.*{task.folder}/"):
        loaders.load(task.name, str(tmp_path))


@pytest.mark.parametrize("shipped", [s for s in embedded.SLICES if s.folder.startswith("zeroshot/")])
def test_a_shipped_slice_is_read_from_its_records_folder_alone(shipped, tmp_path):
    task = registry.BY_NAME[shipped.task]
    assert shipped.folder == f"zeroshot/{task.folder}" and not task.user_supplied
    shutil.copytree(shipped.path, tmp_path / task.folder)
    rows = task.reader(str(tmp_path))
    assert sum(len(r) for r in rows.values()) == sum(shipped.files.values())
    assert loaders.data_fingerprint(task.name, str(tmp_path))


def test_derived_tables_hold_every_task():
    from nfeval.report import leaderboard_read as lr
    from nfeval.zeroshot import task_names

    names = set(IDS)
    assert set(lr.TITLES) >= names and set(lr.GPT3_METRICS) == names and set(lr.CHANCE) == names
    assert set(lr.ZEROSHOT_TASKS) | set(lr.EXTRA_ZEROSHOT_TASKS) == names
    assert set(lr.ZEROSHOT_TASKS) == {t.name for t in RECORDS if t.averaged}
    assert all(lr.METRIC_PRESETS[p].keys() == names for p in lr.METRIC_PRESETS)
    assert set(lr.USER_SUPPLIED_TASKS) == {t.name for t in RECORDS if t.user_supplied}
    assert set(task_names.ours()) >= set(registry.LM_EVAL_NAMES) | names
    assert set(nf_tasks.GPT3_METRIC) == {t.name for t in RECORDS if t.gpt3_metric}
    assert not set(embedded.ZEROSHOT_TASKS) & set(nf_tasks.USER_SUPPLIED)  # never shipped


def test_the_zeroshot_help_names_every_task():
    from nfeval.cli import build_parser

    parser = build_parser("zeroshot")
    sub = next(a for a in parser._actions if a.dest == "command").choices["zeroshot"]
    helps = {a.dest: a.help for a in sub._actions}
    assert set(re.findall(r"\w+", helps["tasks"])) >= set(IDS)
    for name in embedded.ZEROSHOT_TASKS:
        assert registry.TITLES[name] in helps["data_dir"]


def test_the_gpt3_reference_file_is_the_records():
    from nfeval.report.leaderboard_read import load_reference

    shipped = REPO / "leaderboards" / "reference" / "gpt3.json"
    assert shipped.read_text(encoding="utf-8") == registry.gpt3_reference_text(), (
        "leaderboards/reference/gpt3.json differs from the task records: write it with "
        "python -m nfeval.tasks.registry > leaderboards/reference/gpt3.json"
    )
    ref = load_reference("gpt3")
    reported = [t for t in RECORDS if t.gpt3]
    assert list(ref["tasks"]) == [t.name for t in reported]
    metrics = {t: spec["metric"] for t, spec in ref["tasks"].items()}
    assert metrics == {t.name: t.gpt3_metric for t in reported}
