"""The readers of the ``*_local`` tasks' files: one per task, named by its record in ``registry.py``
(``loaders.py`` turns what a reader returns into the lm-eval ``custom_dataset`` hook).

Each reader takes the data folder (the task metadata ``data_dir``: ``nfeval zeroshot`` and ``nfeval
lm-eval`` pass their ``--data-dir`` there), finds the task's files under the folder its record names,
accepts the Hugging Face column schema as JSONL (the layout of ``../shared/data/zeroshot``) or the
official distribution format, checks every record, and returns {split: rows} in the Hugging Face schema
that lm-eval's built-in task reads.

Layout under ``data_dir`` (first match wins):

- ``piqa/validation.jsonl`` | ``piqa/valid.jsonl`` + ``piqa/valid-labels.lst`` (also under ``piqa/original/``)
- ``hellaswag/validation.jsonl`` | ``hellaswag/hellaswag_val.jsonl``
- ``winogrande/validation.jsonl`` | ``winogrande/dev.jsonl``
- ``openbookqa/{validation,test}.jsonl`` (HF or official schema) | ``openbookqa/dev.jsonl``
- ``storycloze/{2016,2018}/{validation,test}.jsonl`` | ``storycloze/*{spring2016,winter2018}*.csv``

Bad records raise ``DataError`` naming the file, the line and the field.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import os
from collections.abc import Callable, Iterator
from typing import Any

from ..base.errors import DataError
from ..base.errors import MissingDataError as MissingData  # a task's local files are absent
from ..base.jsonio import read_jsonl


def read_records(path: str) -> list[tuple[int, dict[str, Any]]]:
    """Returns (line number, object) for each non-blank line of a JSONL file; DataError if it has none."""
    rows, _ = read_jsonl(path, objects_only=True)
    if not rows:
        raise DataError(f"{path}: no records")
    return rows


def field(obj: dict, name: str, kind: type | tuple, where: str) -> Any:
    """Returns ``obj[name]`` after checking it exists and has type ``kind``."""
    if name not in obj:
        raise DataError(f"{where}: missing field {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DataError(f"{where}: field {name!r} is {type(value).__name__} {value!r}, expected {expected}")
    return value


def text(obj: dict, name: str, where: str) -> str:
    """Returns a string field after checking it holds text: an empty answer option would be scored at
    log-probability 0 (and divide ``acc_norm`` by zero), an empty context would score the options alone."""
    value = field(obj, name, str, where)
    if not value.strip():
        raise DataError(f"{where}: field {name!r} is empty, expected text")
    return value


def label(obj: dict, name: str, allowed: list[str], where: str) -> str:
    """Returns a label field as a string after checking it is one of ``allowed`` (int or str accepted)."""
    value = field(obj, name, (int, str), where)
    if str(value).strip() not in allowed:
        raise DataError(f"{where}: field {name!r} = {value!r} is out of range, expected one of {allowed}")
    return str(value).strip()


def strings(obj: dict, name: str, n: int, where: str) -> list[str]:
    """Returns a list field of exactly ``n`` strings."""
    value = field(obj, name, list, where)
    if len(value) != n or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}: field {name!r} must be a list of {n} strings, got {value!r}"[:300])
    empty = [i for i, v in enumerate(value) if not v.strip()]
    if empty:
        raise DataError(
            f"{where}: field {name!r} has an empty answer option (index {empty[0]}), expected text"
        )
    return value


@contextlib.contextmanager
def _utf8(path: str) -> Iterator[None]:
    """Within the block, text of ``path`` that is not UTF-8 is a DataError naming the file and the byte
    (``read_jsonl`` says the same of the JSONL files)."""
    try:
        yield
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start})") from None


def first_existing(root: str, *candidates: str) -> str | None:
    """Returns the first of ``candidates`` (relative to ``root``) that is a file, or None."""
    return next((os.path.join(root, c) for c in candidates if os.path.isfile(os.path.join(root, c))), None)


def records(path: str, convert: Callable[[dict, str], dict]) -> list[dict]:
    """Returns ``convert(obj, "FILE:LINE")`` for every record of a JSONL file."""
    return [convert(obj, f"{path}:{lineno}") for lineno, obj in read_records(path)]


def validation_rows(
    task: str, root: str, convert: Callable[[dict, str], dict], *candidates: str
) -> dict[str, list[dict]]:
    """Returns {"validation": rows} from the first of ``candidates`` under ``root``; names them all when
    none exists."""
    path = first_existing(root, *candidates)
    if path is None:
        raise missing(task, root, " or ".join(candidates))
    return {"validation": records(path, convert)}


def missing(task: str, root: str, expected: str) -> MissingData:
    return MissingData(f"{task}: no data under {root}; expected {expected}")


# ---------------------------------------------------------------- PIQA


def _piqa(obj: dict, where: str) -> dict:
    return {
        "goal": text(obj, "goal", where),
        "sol1": text(obj, "sol1", where),
        "sol2": text(obj, "sol2", where),
        "label": int(label(obj, "label", ["0", "1"], where)),
    }


def piqa_rows(root: str) -> dict[str, list[dict]]:
    """Returns PIQA validation rows from HF-schema JSONL or the official valid.jsonl + valid-labels.lst."""
    hf = first_existing(root, "piqa/validation.jsonl")
    if hf:
        return {"validation": records(hf, _piqa)}
    for sub in ("piqa", "piqa/original"):
        data, labels = (
            first_existing(root, f"{sub}/valid.jsonl"),
            first_existing(root, f"{sub}/valid-labels.lst"),
        )
        if data and labels:
            with _utf8(labels), open(labels, encoding="utf-8") as f:
                lines = [(n, s.strip()) for n, s in enumerate(f, 1) if s.strip()]
            objs = read_records(data)
            if len(lines) != len(objs):
                raise DataError(f"{labels}: {len(lines)} labels for {len(objs)} records in {data}")
            rows = []
            for (lineno, obj), (label_line, value) in zip(objs, lines):
                if value not in ("0", "1"):
                    raise DataError(
                        f"{labels}:{label_line}: field 'label' = {value!r} is out of range, expected 0 or 1"
                    )
                rows.append(_piqa({**obj, "label": int(value)}, f"{data}:{lineno}"))
            return {"validation": rows}
    raise missing("piqa", root, "piqa/validation.jsonl, or piqa/valid.jsonl + piqa/valid-labels.lst")


# ---------------------------------------------------------------- HellaSwag


def _hellaswag(obj: dict, where: str) -> dict:
    row = {
        "ind": obj.get("ind", 0) if isinstance(obj.get("ind", 0), int) else 0,
        "activity_label": field(obj, "activity_label", str, where),
        "ctx_a": text(obj, "ctx_a", where),
        "ctx_b": field(obj, "ctx_b", str, where),
        "ctx": obj.get("ctx") if isinstance(obj.get("ctx"), str) else "",
        "endings": strings(obj, "endings", 4, where),
        "source_id": str(obj.get("source_id", "")),
        "split": str(obj.get("split", "val")),
        "split_type": str(obj.get("split_type", "")),
        "label": label(obj, "label", ["0", "1", "2", "3"], where),
    }
    return row


def hellaswag_rows(root: str) -> dict[str, list[dict]]:
    """Returns HellaSwag validation rows from HF-schema JSONL or the official hellaswag_val.jsonl."""
    return validation_rows(
        "hellaswag", root, _hellaswag, "hellaswag/validation.jsonl", "hellaswag/hellaswag_val.jsonl"
    )


# ---------------------------------------------------------------- WinoGrande


def _winogrande(obj: dict, where: str) -> dict:
    sentence = field(obj, "sentence", str, where)
    if sentence.count("_") < 1:
        raise DataError(f"{where}: field 'sentence' has no '_' blank")
    return {
        "sentence": sentence,
        "option1": text(obj, "option1", where),
        "option2": text(obj, "option2", where),
        "answer": label(obj, "answer", ["1", "2"], where),
    }


def winogrande_rows(root: str) -> dict[str, list[dict]]:
    """Returns WinoGrande dev rows from HF-schema JSONL or the official dev.jsonl."""
    return validation_rows(
        "winogrande", root, _winogrande, "winogrande/validation.jsonl", "winogrande/dev.jsonl"
    )


# ---------------------------------------------------------------- OpenBookQA


def _openbookqa(obj: dict, where: str) -> dict:
    if isinstance(obj.get("question"), dict):  # official: {"question": {"stem", "choices": [{text, label}]}}
        q = obj["question"]
        choices = field(q, "choices", list, f"{where} (question)")
        if not all(
            isinstance(c, dict) and isinstance(c.get("text"), str) and isinstance(c.get("label"), str)
            for c in choices
        ):
            raise DataError(f"{where}: field 'question.choices' must be a list of {{text, label}} strings")
        stem = text(q, "stem", f"{where} (question)")
        texts, labels = [c["text"] for c in choices], [c["label"] for c in choices]
    else:
        stem = text(obj, "question_stem", where)
        ch = field(obj, "choices", dict, where)
        texts, labels = (
            field(ch, "text", list, f"{where} (choices)"),
            field(ch, "label", list, f"{where} (choices)"),
        )
        if len(texts) != len(labels) or not texts:
            raise DataError(f"{where}: field 'choices' has {len(texts)} texts and {len(labels)} labels")
    if len(texts) < 2 or not all(isinstance(t, str) and t.strip() for t in texts):
        raise DataError(
            f"{where}: field 'choices' must hold 2 or more non-empty answer texts, got {texts!r}"[:300]
        )
    key = field(obj, "answerKey", str, where)
    if key.lstrip() not in labels:
        raise DataError(f"{where}: field 'answerKey' = {key!r} is out of range, expected one of {labels}")
    return {
        "id": str(obj.get("id", "")),
        "question_stem": stem,
        "choices": {"text": texts, "label": labels},
        "answerKey": key,
    }


def openbookqa_rows(root: str) -> dict[str, list[dict]]:
    """Returns OpenBookQA rows: ``test`` (evaluated, as lm-eval's built-in) and ``validation`` when
    present."""
    out = {}
    for split, names in (("validation", ("validation.jsonl", "dev.jsonl")), ("test", ("test.jsonl",))):
        path = first_existing(root, *(f"openbookqa/{n}" for n in names))
        if path:
            out[split] = records(path, _openbookqa)
    if not out:
        raise missing(
            "openbookqa", root, "openbookqa/test.jsonl and/or openbookqa/validation.jsonl (or dev.jsonl)"
        )
    return out


# ---------------------------------------------------------------- StoryCloze

CSV_COLUMNS = {
    "story_id": "InputStoryid",
    "input_sentence_1": "InputSentence1",
    "input_sentence_2": "InputSentence2",
    "input_sentence_3": "InputSentence3",
    "input_sentence_4": "InputSentence4",
    "sentence_quiz1": "RandomFifthSentenceQuiz1",
    "sentence_quiz2": "RandomFifthSentenceQuiz2",
    "answer_right_ending": "AnswerRightEnding",
}


def _storycloze(obj: dict, where: str) -> dict:
    row = {
        name: text(obj, name, where)
        for name in CSV_COLUMNS
        if name not in ("story_id", "answer_right_ending")
    }
    row["story_id"] = str(obj.get("story_id", ""))
    row["answer_right_ending"] = int(label(obj, "answer_right_ending", ["1", "2"], where))
    return row


def read_storycloze_csv(path: str) -> list[dict]:
    """Returns rows of an official StoryCloze CSV in the HF schema."""
    with _utf8(path), open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        try:
            absent = [c for c in CSV_COLUMNS.values() if c not in (reader.fieldnames or [])]
            if absent:
                raise DataError(
                    f"{path}:1: missing column {absent[0]!r} (expected {list(CSV_COLUMNS.values())})"
                )
            return [
                _storycloze({hf: rec[col] for hf, col in CSV_COLUMNS.items()}, f"{path}:{lineno}")
                for lineno, rec in enumerate(reader, 2)
            ]
        except csv.Error as e:  # a field past the csv module's limit; line_num counts the lines read before
            raise DataError(f"{path}:{reader.line_num + 1}: not a StoryCloze CSV row ({e})") from None


# DIR is a folder of the user's: the one given may be the slices shipped inside the installed package
STORYCLOZE_HELP = (
    "StoryCloze is not public: request it at https://cs.rochester.edu/nlp/rocstories/, put the CSVs "
    "(e.g. 'cloze_test_val__spring2016 - cloze_test_ALL_val.csv', 'cloze_test_test__spring2016 - "
    "cloze_test_ALL_test.csv', "
    "'cloze_test_val__winter2018-cloze_test_ALL_val - 1 - 1.csv') in a folder of yours, DIR/storycloze/, "
    "or HF-schema JSONL in DIR/storycloze/{year}/validation.jsonl and test.jsonl, then pass --data-dir DIR"
)


def storycloze_rows(root: str, year: str) -> dict[str, list[dict]]:
    """Returns StoryCloze rows for ``year`` (2016 or 2018): ``validation`` and/or ``test``."""
    season = {"2016": "spring2016", "2018": "winter2018"}[year]
    out = {}
    for split, tag in (("validation", "val"), ("test", "test")):
        jsonl = first_existing(root, f"storycloze/{year}/{split}.jsonl")
        if jsonl:
            out[split] = records(jsonl, _storycloze)
            continue
        found = sorted(glob.glob(os.path.join(glob.escape(root), "storycloze", f"*_{tag}__{season}*.csv")))
        if found:
            out[split] = read_storycloze_csv(found[0])
    if not out:
        raise MissingData(f"storycloze_{year}: no data under {root}. " + STORYCLOZE_HELP.format(year=year))
    return out


# ---------------------------------------------------------------- corpus cloze (nfeval/zeroshot/cloze.py)


def _corpus_cloze(obj: dict, where: str) -> dict:
    choices = field(obj, "choices", list, where)
    if len(choices) < 2 or not all(isinstance(c, str) and c.strip() for c in choices):
        raise DataError(f"{where}: field 'choices' must be a list of 2 or more non-empty strings")
    gold = field(obj, "label", int, where)
    if not 0 <= gold < len(choices):
        raise DataError(f"{where}: field 'label' = {gold} is out of range, expected 0..{len(choices) - 1}")
    return {"context": field(obj, "context", str, where), "choices": choices, "label": gold}


def corpus_cloze_rows(root: str) -> dict[str, list[dict]]:
    """Returns the cloze rows ``nfeval demo`` writes (nfeval/zeroshot/cloze.py)."""
    return validation_rows("corpus_cloze", root, _corpus_cloze, "corpus_cloze/validation.jsonl")
