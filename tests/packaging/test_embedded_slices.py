"""The task slices shipped in the package (``nfeval.embedded``, issue 40): each read with its documented
row count, its SOURCE.md's sha256 and its licence file present, loaded through the real task definitions
(lm-eval's TaskManager over ``tasks/``, ``glue.data``) by name, and, where ``../shared/data`` is beside
the checkout, rebuilt byte for byte by ``derive.py``."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from nfeval import embedded
from nfeval.embedded import SLICES

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
# what each LICENSE must name: the licence and its URL
LICENCE_WORDS = {
    "MIT": ("MIT License", "https://opensource.org/license/mit", "Copyright (c) 2019 Rowan Zellers"),
    "AFL-3.0": ("Academic Free License", "https://opensource.org/license/afl-3-0-php"),
    "CC-BY-2.0": ("Creative Commons Attribution 2.0", "https://creativecommons.org/licenses/by/2.0/"),
    "Apache-2.0": ("Apache License", "https://www.apache.org/licenses/LICENSE-2.0"),
}
STSB_WORDS = ("Attribution-ShareAlike 4.0", "https://creativecommons.org/licenses/by-sa/4.0/")


def rows_of(path: str) -> int:
    """Returns the records of a JSONL file (each parsed) or the rows after a TSV's header."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    lines = [line for line in lines if line]
    if path.endswith(".jsonl"):
        return len([json.loads(line) for line in lines])
    return len(lines) - 1


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_slices() -> list[str]:
    """Returns one line per problem of the shipped slices (rows, SOURCE.md, licence files); [] when all
    is well."""
    problems = []
    for s in SLICES:
        source = os.path.join(s.path, embedded.SOURCE_FILE)
        licence = os.path.join(s.path, embedded.LICENCE_FILE)
        if not os.path.isfile(source) or not os.path.isfile(licence):
            problems.append(f"{s.folder}: SOURCE.md or LICENSE missing")
            continue
        text = open(source, encoding="utf-8").read()
        for name, rows in s.files.items():
            path = os.path.join(s.path, name)
            if rows_of(path) != rows:
                problems.append(f"{s.folder}/{name}: {rows_of(path)} rows, documented {rows}")
            row = f"| {name} | {rows} | {s.full_rows[name]} | {sha256(path)} |"
            if row not in text:
                problems.append(f"{s.folder}/SOURCE.md: no row {row!r}")
        if "@ `" not in text or not re.search(r"[0-9a-f]{40}", text):
            problems.append(f"{s.folder}/SOURCE.md: no origin repository @ commit")
    return problems


def test_every_slice_has_its_documented_rows_sha256_and_licence():
    assert check_slices() == []
    licence_text = {s.folder: open(os.path.join(s.path, "LICENSE"), encoding="utf-8").read() for s in SLICES}
    for s in SLICES:
        words = STSB_WORDS if s.task == "stsb" else LICENCE_WORDS[s.licence]
        assert all(w in licence_text[s.folder] for w in words), (s.folder, words)
    stsb = next(s for s in SLICES if s.task == "stsb")
    notes = open(os.path.join(stsb.path, "LICENSE.txt"), encoding="utf-8").read()
    assert sha256(os.path.join(stsb.path, "LICENSE.txt")) == (
        "3dfc3217395f8c5dd05c5f8995f25fe2f8fd258e6dd770b3de480749caee8c70"  # the shared copy, unchanged
    )
    assert "Share Alike 4.0" in notes
    # StoryCloze is never shipped
    assert not os.path.exists(os.path.join(embedded.ZEROSHOT_ROOT, "storycloze"))


def test_stsb_slice_keeps_only_the_image_captions():
    stsb = next(s for s in SLICES if s.task == "stsb")
    for name in stsb.files:
        lines = open(os.path.join(stsb.path, name), encoding="utf-8").read().splitlines()
        column = lines[0].split("\t").index("filename")
        assert {line.split("\t")[column] for line in lines[1:]} == {"images"}


def test_zeroshot_slices_load_through_the_task_definitions_by_name():
    from nfeval.zeroshot.config import ZeroShotConfig
    from nfeval.zeroshot.evaluate import task_manager

    data_dir = ZeroShotConfig(data_dir="embedded").checked().data_dir
    assert data_dir == embedded.ZEROSHOT_ROOT
    names = [f"{s.task}_local" for s in SLICES if s.folder.startswith("zeroshot/")]
    manager = task_manager(data_dir, names)
    for s in (s for s in SLICES if s.folder.startswith("zeroshot/")):
        task = manager.load([f"{s.task}_local"])["tasks"][f"{s.task}_local"]
        docs = list(task.eval_docs)
        assert len(docs) == sum(s.files.values()), s.task
        assert task.doc_to_text(docs[0]) and len(task.doc_to_choice(docs[0])) >= 2


def test_glue_slice_loads_by_name():
    from nfeval.glue import data as glue_data

    data = glue_data.load("stsb", "embedded")
    assert (len(data.train), len(data.dev["dev"])) == (400, 200)
    assert all(0.0 <= y <= 5.0 for y in data.train.labels + data.dev["dev"].labels)


def test_the_commands_take_embedded_by_name(tmp_path, capsys):
    from nfeval.cli import main

    # a checkpoint that does not exist fails after the data folder was accepted, naming the checkpoint
    code = main(
        ["zeroshot", "--ckpt", str(tmp_path / "none"), "--data-dir", "embedded", "--output", "x.json"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--data-dir" not in err and "none" in err


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_derive_rebuilds_the_slices_byte_for_byte(tmp_path):
    from nfeval.embedded.derive import derive

    derive(str(SHARED), str(tmp_path))
    for s in SLICES:
        for name in [*s.files, embedded.SOURCE_FILE]:
            assert (tmp_path / s.folder / name).read_bytes() == Path(s.path, name).read_bytes(), (
                s.folder,
                name,
            )
