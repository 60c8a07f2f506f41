"""Local task variants: the same requests as lm-eval's built-in tasks; official formats; bad data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import lm_eval.tasks
import pytest
from lm_eval.api.task import ConfigurableTask
from lm_eval.tasks import TaskManager
from lm_eval.tasks._yaml_loader import load_yaml

import nfeval.tasks as nf_tasks
from nfeval.tasks.loaders import DataError, MissingData, load

BUILTIN = Path(lm_eval.tasks.__file__).parent
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "zeroshot"

DOCS = {
    "piqa": [
        {"goal": "How do I dry a wet dog?", "sol1": "Use a towel.", "sol2": "Use a  fork. ", "label": 0},
        {"goal": "Open a jar", "sol1": "twist the lid", "sol2": "bite the glass", "label": 1},
    ],
    "hellaswag": [
        {
            "ind": 4,
            "activity_label": "Washing dogs",
            "ctx_a": "A man is washing a dog in a tub.",
            "ctx_b": "the dog",
            "ctx": "A man is washing a dog in a tub. the dog",
            "endings": ["shakes off the water.", "eats [title] a car.", "flies away.", "sings  loudly."],
            "source_id": "x",
            "split": "val",
            "split_type": "indomain",
            "label": "0",
        },
        {
            "ind": 9,
            "activity_label": "Home",
            "ctx_a": "[header] How to cook rice [step] Rinse it.",
            "ctx_b": "",
            "ctx": "[header] How to cook rice [step] Rinse it.",
            "endings": ["Boil it.", "Paint it.", "Sell it.", "Drop it."],
            "source_id": "y",
            "split": "val",
            "split_type": "zeroshot",
            "label": "3",
        },
    ],
    "winogrande": [
        {
            "sentence": "The cup did not fit in the box because _ was too big.",
            "option1": "the cup",
            "option2": "the box",
            "answer": "1",
        },
        {
            "sentence": "Anna helped Maria since _'s car broke.",
            "option1": "Anna",
            "option2": "Maria",
            "answer": "2",
        },
    ],
    "openbookqa": [
        {
            "id": "7-1",
            "question_stem": "The sun is a",
            "choices": {"text": ["star", "planet", "moon", "rock"], "label": ["A", "B", "C", "D"]},
            "answerKey": "A",
        },
        {
            "id": "7-2",
            "question_stem": "Water freezes at",
            "choices": {"text": ["zero C", "fifty C", "ten C", "ninety C"], "label": ["A", "B", "C", "D"]},
            "answerKey": "A",
        },
    ],
    "storycloze": [
        {
            "story_id": "s1",
            "input_sentence_1": "Tom was hungry.",
            "input_sentence_2": "He opened the fridge.",
            "input_sentence_3": "It was empty.",
            "input_sentence_4": "He went to the store.",
            "sentence_quiz1": "He bought food.",
            "sentence_quiz2": "He flew to Mars.",
            "answer_right_ending": 1,
        },
        {
            "story_id": "s2",
            "input_sentence_1": "Ann ran.",
            "input_sentence_2": "She was late.",
            "input_sentence_3": "The bus left.",
            "input_sentence_4": "She waited.",
            "sentence_quiz1": "She ate a bus.",
            "sentence_quiz2": "She took the next bus.",
            "answer_right_ending": 2,
        },
    ],
}


def write_jsonl(path: Path, rows) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Hand-written docs in the Hugging Face schema, laid out as ../shared/data/zeroshot."""
    root = tmp_path_factory.mktemp("zeroshot_data")
    for task in ("piqa", "hellaswag", "winogrande"):
        write_jsonl(root / task / "validation.jsonl", DOCS[task])
    write_jsonl(root / "openbookqa" / "test.jsonl", DOCS["openbookqa"])
    write_jsonl(root / "openbookqa" / "validation.jsonl", DOCS["openbookqa"][:1])
    for year in ("2016", "2018"):
        write_jsonl(root / "storycloze" / year / "test.jsonl", DOCS["storycloze"])
        write_jsonl(root / "storycloze" / year / "validation.jsonl", DOCS["storycloze"][:1])
    return root


def builtin_task(name: str, yaml_path: str, files: dict[str, str]) -> ConfigurableTask:
    """Returns lm-eval's built-in task from its own YAML, with the dataset replaced by local JSON files."""
    cfg = load_yaml(BUILTIN / yaml_path, resolve_func=True)
    cfg.update(
        dataset_path="json", dataset_name=None, dataset_kwargs={"data_files": files}, training_split=None
    )
    cfg.pop("tag", None)
    return ConfigurableTask(config=cfg)


def requests_of(task) -> list[tuple]:
    task.build_all_requests(rank=0, world_size=1)
    return sorted((i.doc_id, i.idx, i.args) for i in task.instances)


CASES = [
    ("piqa", "piqa/piqa.yaml", {"validation": "piqa/validation.jsonl"}),
    ("hellaswag", "hellaswag/hellaswag.yaml", {"validation": "hellaswag/validation.jsonl"}),
    ("winogrande", "winogrande/default.yaml", {"validation": "winogrande/validation.jsonl"}),
    (
        "openbookqa",
        "openbookqa/openbookqa.yaml",
        {"validation": "openbookqa/validation.jsonl", "test": "openbookqa/test.jsonl"},
    ),
    (
        "storycloze_2016",
        "storycloze/storycloze_2016.yaml",
        {"validation": "storycloze/2016/validation.jsonl", "test": "storycloze/2016/test.jsonl"},
    ),
    (
        "storycloze_2018",
        "storycloze/storycloze_2018.yaml",
        {"validation": "storycloze/2018/validation.jsonl", "test": "storycloze/2018/test.jsonl"},
    ),
]


@pytest.fixture(scope="module")
def manager(data_dir):
    return TaskManager(
        include_path=nf_tasks.TASKS_DIR, include_defaults=False, metadata={"data_dir": str(data_dir)}
    )


@pytest.mark.parametrize("canonical,yaml_path,files", CASES, ids=[c[0] for c in CASES])
def test_local_task_makes_the_builtin_requests(canonical, yaml_path, files, data_dir, manager):
    ref = builtin_task(canonical, yaml_path, {k: str(data_dir / v) for k, v in files.items()})
    ours = manager.load([f"{canonical}_local"])["tasks"][f"{canonical}_local"]
    ref_docs, our_docs = list(ref.eval_docs), list(ours.eval_docs)
    assert len(ref_docs) == len(our_docs) == 2  # both score the test split when there is one
    for a, b in zip(ref_docs, our_docs):
        assert ref.doc_to_text(a) == ours.doc_to_text(b)
        assert ref.doc_to_choice(a) == ours.doc_to_choice(b)
        assert ref.doc_to_target(a) == ours.doc_to_target(b)
    assert ref.config.target_delimiter == ours.config.target_delimiter
    want, got = requests_of(ref), requests_of(ours)
    if canonical == "openbookqa":  # plus GPT-3's unconditional requests, after the task's own
        extra = [r for r in got if r[1] >= 4]
        got = [r for r in got if r[1] < 4]
        assert [r[2] for r in extra[:4]] == [
            ("Answer:", " " + c) for c in DOCS["openbookqa"][0]["choices"]["text"]
        ]
    assert want == got


def test_documents_are_processed_once_per_split(data_dir, manager, monkeypatch):
    ours = manager.load(["hellaswag_local"])["tasks"]["hellaswag_local"]
    calls = []
    process = ours.config.process_docs
    monkeypatch.setattr(ours.config, "process_docs", lambda docs: calls.append(1) or process(docs))
    ours.dataset = {"validation": ours.dataset["validation"].select(range(2))}  # reloaded: processed afresh
    first = ours.eval_docs
    assert all(ours.eval_docs is first for _ in range(3)) and len(calls) == 1
    assert [ours.doc_to_text(d) for d in first] == [
        ours.doc_to_text(d) for d in process(ours.dataset["validation"])
    ]


def test_official_formats_load_as_the_hf_schema(tmp_path, data_dir):
    root = tmp_path
    piqa = root / "piqa"
    write_jsonl(piqa / "valid.jsonl", [{k: v for k, v in d.items() if k != "label"} for d in DOCS["piqa"]])
    (piqa / "valid-labels.lst").write_text("".join(f"{d['label']}\n" for d in DOCS["piqa"]))
    write_jsonl(
        root / "hellaswag" / "hellaswag_val.jsonl",
        [{**d, "label": int(d["label"])} for d in DOCS["hellaswag"]],
    )
    write_jsonl(
        root / "winogrande" / "dev.jsonl", [{"qID": str(i), **d} for i, d in enumerate(DOCS["winogrande"])]
    )
    write_jsonl(
        root / "openbookqa" / "test.jsonl",
        [
            {
                "id": d["id"],
                "question": {
                    "stem": d["question_stem"],
                    "choices": [
                        {"text": t, "label": lab}
                        for t, lab in zip(d["choices"]["text"], d["choices"]["label"])
                    ],
                },
                "answerKey": d["answerKey"],
            }
            for d in DOCS["openbookqa"]
        ],
    )
    (root / "storycloze").mkdir()
    with open(
        root / "storycloze" / "cloze_test_test__spring2016 - cloze_test_ALL_test.csv", "w", newline=""
    ) as f:
        w = csv.writer(f)
        w.writerow(
            [
                "InputStoryid",
                "InputSentence1",
                "InputSentence2",
                "InputSentence3",
                "InputSentence4",
                "RandomFifthSentenceQuiz1",
                "RandomFifthSentenceQuiz2",
                "AnswerRightEnding",
            ]
        )
        for d in DOCS["storycloze"]:
            w.writerow(
                [
                    d["story_id"],
                    d["input_sentence_1"],
                    d["input_sentence_2"],
                    d["input_sentence_3"],
                    d["input_sentence_4"],
                    d["sentence_quiz1"],
                    d["sentence_quiz2"],
                    d["answer_right_ending"],
                ]
            )
    fields = {
        "piqa": ["goal", "sol1", "sol2", "label"],
        "hellaswag": ["activity_label", "ctx_a", "ctx_b", "endings", "label"],
        "winogrande": ["sentence", "option1", "option2", "answer"],
        "openbookqa": ["question_stem", "choices", "answerKey"],
        "storycloze_2016": ["input_sentence_1", "sentence_quiz2", "answer_right_ending"],
    }
    for task, keys in fields.items():
        official, hf = load(task, str(root)), load(task, str(data_dir))
        split = "test" if "test" in official else "validation"
        assert [{k: r[k] for k in keys} for r in official[split]] == [
            {k: r[k] for k in keys} for r in hf[split]
        ]


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"goal": "x", "sol1": "a", "sol2": "b", "label": 0', "invalid JSON"),
        ('{"goal": "x", "sol1": "a", "label": 0}', "missing field 'sol2'"),
        ('{"goal": "x", "sol1": "a", "sol2": "b", "label": 2}', "field 'label' = 2 is out of range"),
        ('{"goal": 3, "sol1": "a", "sol2": "b", "label": 1}', "field 'goal' is int"),
    ],
)
def test_malformed_local_data_names_file_line_field(tmp_path, line, message):
    path = tmp_path / "piqa" / "validation.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(DOCS["piqa"][0]) + "\n" + line + "\n")
    with pytest.raises(DataError) as err:
        load("piqa", str(tmp_path))
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value)


def test_storycloze_without_files_says_where_to_put_them(tmp_path):
    with pytest.raises(MissingData, match=r"storycloze/"):
        load("storycloze_2016", str(tmp_path))


def test_canonical_names():
    assert nf_tasks.registered_name("piqa", local=True) == "piqa_local"
    assert nf_tasks.registered_name("arc_easy", local=True) == "arc_easy"
    assert nf_tasks.canonical_name("storycloze_2018_hub") == "storycloze_2018"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/zeroshot not present")
def test_shared_piqa_official_files_equal_the_jsonl(tmp_path):
    (tmp_path / "piqa").mkdir()
    for name in ("valid.jsonl", "valid-labels.lst"):
        (tmp_path / "piqa" / name).symlink_to(SHARED / "piqa" / "original" / name)
    official, hf = load("piqa", str(tmp_path))["validation"], load("piqa", str(SHARED))["validation"]
    assert len(hf) == 1838 and official.to_list() == hf.to_list()


@pytest.mark.parametrize(
    "task,change,message",
    [
        ("piqa", lambda d: d | {"sol2": ""}, "field 'sol2' is empty, expected text"),
        ("piqa", lambda d: d | {"goal": "  "}, "field 'goal' is empty, expected text"),
        ("hellaswag", lambda d: d | {"endings": ["a", "b", " ", "d"]}, "empty answer option (index 2)"),
        ("hellaswag", lambda d: d | {"ctx_a": ""}, "field 'ctx_a' is empty"),
        ("winogrande", lambda d: d | {"option1": ""}, "field 'option1' is empty"),
        (
            "openbookqa",
            lambda d: d | {"choices": {"text": ["star", "", "moon", "rock"], "label": ["A", "B", "C", "D"]}},
            "2 or more non-empty answer texts",
        ),
        ("openbookqa", lambda d: d | {"choices": {"text": ["star"], "label": ["A"]}}, "2 or more non-empty"),
        ("openbookqa", lambda d: d | {"question_stem": ""}, "field 'question_stem' is empty"),
    ],
)
def test_an_empty_answer_option_or_context_is_refused_by_file_line_field(tmp_path, task, change, message):
    """An empty option would be scored at log-probability 0 (and divide acc_norm by zero): refused, as
    every other malformed row is (issue 55)."""
    path = tmp_path / task / ("test.jsonl" if task == "openbookqa" else "validation.jsonl")
    write_jsonl(path, [DOCS[task][0], change(DOCS[task][1])])
    with pytest.raises(DataError) as err:
        load(task, str(tmp_path))
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value)
