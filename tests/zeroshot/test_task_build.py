"""Limit-only task building and the request cache (tasks/task_build.py, tasks/gpt3.py)."""

from __future__ import annotations

import json
import os

import pytest
from lm_eval.tasks import TaskManager
from test_zeroshot_tasks import DOCS, write_jsonl

import nfeval.tasks as nf_tasks
from nfeval.model_adapters.config import ScoringConfig
from nfeval.tasks import task_build
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot.config import ZeroShotConfig

N_DOCS, LIMIT = 7, 3
FILES = {  # canonical task -> its files (relative to the data dir) and their documents
    "piqa": {"piqa/validation.jsonl": "piqa"},
    "hellaswag": {"hellaswag/validation.jsonl": "hellaswag"},
    "winogrande": {"winogrande/validation.jsonl": "winogrande"},
    "openbookqa": {"openbookqa/test.jsonl": "openbookqa", "openbookqa/validation.jsonl": "openbookqa"},
    "storycloze_2016": {"storycloze/2016/test.jsonl": "storycloze"},
    "storycloze_2018": {"storycloze/2018/validation.jsonl": "storycloze"},
}


def variants(docs: list[dict], n: int) -> list[dict]:
    """Returns ``n`` distinct documents: ``docs`` cycled, each string field tagged with its number."""
    out = []
    for i in range(n):
        doc = json.loads(json.dumps(docs[i % len(docs)]))
        for key, value in doc.items():
            if isinstance(value, str) and key not in ("label", "answer", "answerKey", "split"):
                doc[key] = value.replace(" ", f" {i} ", 1) if " " in value else value
        out.append(doc)
    return out


@pytest.fixture()
def data_dir(tmp_path):
    for files in FILES.values():
        for rel, docs in files.items():
            write_jsonl(tmp_path / rel, variants(DOCS[docs], N_DOCS))
    return tmp_path


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def build(name: str, data_dir, limit, plan: bool = False, use_cache: bool = False, log=print):
    """Returns (task, [(doc_id, idx, request type, arguments, doc)]) built as lm-eval does, under a
    build plan of ``limit`` when ``plan``."""
    manager = TaskManager(
        include_path=nf_tasks.TASKS_DIR, include_defaults=False, metadata={"data_dir": str(data_dir)}
    )
    if plan:
        with task_build.building(limit, use_cache, log):
            task = manager.load([name])["tasks"][name]
            task.build_all_requests(limit=limit, rank=0, world_size=1)
    else:
        task = manager.load([name])["tasks"][name]
        task.build_all_requests(limit=limit, rank=0, world_size=1)
    got = [(i.doc_id, i.idx, i.request_type, i.arguments, dict(i.doc)) for i in task.instances]
    return task, sorted(got, key=lambda r: (r[0], r[1]))


@pytest.mark.parametrize("canonical", list(FILES))
def test_limit_only_building_makes_the_full_builds_first_requests(canonical, data_dir):
    name = f"{canonical}_local"
    _, full = build(name, data_dir, None)
    _, full_limited = build(name, data_dir, LIMIT)
    task, ours = build(name, data_dir, LIMIT, plan=True)
    assert {r[0] for r in full} == set(range(N_DOCS))
    assert ours == full_limited == [r for r in full if r[0] < LIMIT]
    assert len(task.eval_docs) == LIMIT and task.original_doc_count == N_DOCS


def test_a_hub_format_task_is_cut_before_processing(data_dir, monkeypatch):
    """A task loading through ``datasets.load_dataset`` (here the json builder) is cut before
    ``process_docs`` too: HellaSwag's Map runs over the limit's documents only."""
    import lm_eval.tasks.hellaswag.utils as hellaswag_utils

    from nfeval.tasks.gpt3 import GPT3Task

    cfg = {**_hub_like_hellaswag(data_dir)}
    plain = GPT3Task(config=dict(cfg))
    plain.build_all_requests(limit=LIMIT, rank=0, world_size=1)
    sizes = []
    process = hellaswag_utils.process_docs
    cfg["process_docs"] = lambda docs: sizes.append(len(docs)) or process(docs)
    with task_build.building(LIMIT, False, print):
        ours = GPT3Task(config=dict(cfg))
        ours.build_all_requests(limit=LIMIT, rank=0, world_size=1)
    assert sizes == [LIMIT] and ours.original_doc_count == N_DOCS
    assert [(i.doc_id, i.idx, i.arguments) for i in ours.instances] == [
        (i.doc_id, i.idx, i.arguments) for i in plain.instances
    ]


def _hub_like_hellaswag(data_dir) -> dict:
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(os.path.join(nf_tasks.TASKS_DIR, "hellaswag", "_hellaswag.yaml"), resolve_func=True)
    cfg.pop("class")
    files = {"validation": str(data_dir / "hellaswag" / "validation.jsonl")}
    return dict(cfg, task="hellaswag_json", dataset_path="json", dataset_name=None,
                dataset_kwargs={"data_files": files}, training_split=None, validation_split="validation",
                test_split=None)  # fmt: skip


@pytest.mark.parametrize("canonical", list(FILES))
def test_cached_requests_skip_loading_and_equal_a_fresh_build(canonical, data_dir, monkeypatch):
    name = f"{canonical}_local"
    _, fresh = build(name, data_dir, LIMIT, plan=True, use_cache=True)
    assert os.listdir(os.path.dirname(task_build.entry_path("x")))  # written
    stock = build(name, data_dir, LIMIT)[1]

    def no_loading(*_a, **_k):
        raise AssertionError("a cached build loaded or processed the data")

    monkeypatch.setattr("nfeval.tasks.loaders.load", no_loading)
    monkeypatch.setattr("datasets.Dataset.map", no_loading)  # process_docs' Map
    task, again = build(name, data_dir, LIMIT, plan=True, use_cache=True)
    assert again == fresh == stock and task.original_doc_count == N_DOCS


def test_changed_data_or_limit_rebuilds(data_dir):
    _, before = build("piqa_local", data_dir, LIMIT, plan=True, use_cache=True)
    docs = variants(DOCS["piqa"], N_DOCS)
    docs[0]["goal"] = "A changed question"
    write_jsonl(data_dir / "piqa" / "validation.jsonl", docs)
    _, after = build("piqa_local", data_dir, LIMIT, plan=True, use_cache=True)
    assert after != before and "A changed question" in after[0][3][0]
    assert after == build("piqa_local", data_dir, LIMIT)[1]
    _, more = build("piqa_local", data_dir, LIMIT + 1, plan=True, use_cache=True)
    assert {r[0] for r in more} == set(range(LIMIT + 1))


@pytest.mark.parametrize("damage", ["truncated", "edited", "foreign"])
def test_a_damaged_entry_is_rebuilt(damage, data_dir):
    _, fresh = build("winogrande_local", data_dir, LIMIT, plan=True, use_cache=True)
    (path,) = [os.path.join(task_build.entry_path("x").rsplit(os.sep, 1)[0], n)
               for n in os.listdir(task_build.entry_path("x").rsplit(os.sep, 1)[0])]  # fmt: skip
    text = open(path, encoding="utf-8").read()
    if damage == "truncated":
        text = text[: len(text) // 2]
    elif damage == "edited":  # a request changed without its digest
        entry = json.loads(text)
        entry["payload"]["requests"][0][3][1] = " tampered"
        text = json.dumps(entry)
    else:  # another task's entry under this key
        entry = json.loads(text)
        entry["key"] = "0" * 64
        text = json.dumps(entry)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    logged = []
    _, again = build("winogrande_local", data_dir, LIMIT, plan=True, use_cache=True, log=logged.append)
    assert again == fresh
    assert any("damaged request cache entry" in m for m in logged)
    assert task_build.read_requests(os.path.basename(path)[:-5], logged.append) is not None  # rewritten


def test_templates_render_as_lm_eval_does():
    import lm_eval.utils

    stock = lm_eval.utils.apply_template
    doc = {"goal": "Dry a dog", "sol1": "towel", "sol2": "fork"}
    templates = ["Question: {{goal}}\nAnswer:", "{{[sol1, sol2]}}", "{{goal|upper}} "]
    with task_build.building(None, False, print):
        assert lm_eval.utils.apply_template is not stock
        ours = [lm_eval.utils.apply_template(t, doc) for t in templates * 2]
    assert lm_eval.utils.apply_template is stock
    assert ours == [stock(t, doc) for t in templates * 2]


def test_zeroshot_keeps_the_full_document_count_and_times_the_command(tiny_clm_ckpt, data_dir):
    from nfeval.model_adapters.scorer import describe

    out = zeroshot.evaluate(
        tiny_clm_ckpt,
        ZeroShotConfig(tasks=["piqa"], data_dir=str(data_dir), limit=2, scoring=ScoringConfig(device="cpu")),
    )
    assert out["n-samples"]["piqa_local"] == {"original": N_DOCS, "effective": 2}
    scoring = out["nfeval"]["scoring"]
    assert scoring["command_wall_s"] > scoring["wall_s"] > 0
    assert scoring["command_flop_per_s"] == pytest.approx(scoring["flops"] / scoring["command_wall_s"])
    assert "scoring achieved" in describe(scoring) and "whole command" in describe(scoring)
