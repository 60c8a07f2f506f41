"""A report folder's records as one archive: packed when the report is written, unpacked before the
command reads anything, the same bytes for the same records, never overwriting what lies on disk."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest

from nfeval.base.errors import DataError
from nfeval.pipelines import archive


def _folder(root) -> str:
    out = root / "report"
    for rel, text in {
        "report.json": "{}",
        "report.md": "# r",
        "fig.png": "png",
        "reproduce.json": '{"scale": "tiny"}',
        "runs/a/seed1.json": '{"val_ppl": 1}',
        "runs/a/seed1/metrics.jsonl": "{}\n",
        "runs/a/seed1/model.safetensors": "weights",
        "runs/a/seed1/checkpoints/step_1/config.json": "{}",
        "experiments/fig2/compare_seed1.txt": "table",
        "experiments/fig2/plot.png": "png",
        "tokens=128/reproduce.json": "{}",  # a report of its own: its own archive
        "tokens=128/runs/b/seed1.json": "{}",
        "previous_run/report.json": "{}",
        "previous_run/experiments/x.json": "{}",
    }.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return str(out)


def test_pack_keeps_the_records_and_leaves_reports_figures_weights_and_sub_reports(tmp_path):
    out = _folder(tmp_path)
    assert archive.members(out) == [
        "experiments/fig2/compare_seed1.txt",
        "reproduce.json",
        "runs/a/seed1.json",
        "runs/a/seed1/metrics.jsonl",
    ]
    path = archive.pack(out)
    with tarfile.open(path, "r:xz") as tar:
        assert tar.getnames() == archive.members(out)
        assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o644 for m in tar.getmembers())
    first = open(path, "rb").read()
    os.utime(os.path.join(out, "runs/a/seed1.json"), (1, 1))  # another time, the same records
    assert open(archive.pack(out), "rb").read() == first
    (tmp_path / "empty").mkdir()
    assert archive.pack(str(tmp_path / "empty")) is None  # nothing to archive: no archive


def test_a_fresh_clone_is_unpacked_once_and_nothing_on_disk_is_overwritten(tmp_path):
    out = _folder(tmp_path)
    archive.pack(out)
    os.remove(os.path.join(out, archive.UNPACKED))
    for rel in archive.members(out):
        os.remove(os.path.join(out, rel))
    with open(os.path.join(out, "reproduce.json"), "w") as f:
        f.write('{"scale": "newer"}')  # a file on disk is newer than the archive
    written = archive.unpack(out)
    assert sorted(written) == [
        "experiments/fig2/compare_seed1.txt",
        "runs/a/seed1.json",
        "runs/a/seed1/metrics.jsonl",
    ]
    assert json.load(open(os.path.join(out, "runs/a/seed1.json"))) == {"val_ppl": 1}
    assert json.load(open(os.path.join(out, "reproduce.json"))) == {"scale": "newer"}
    os.remove(os.path.join(out, "runs/a/seed1.json"))  # deleted to train the run again: stays deleted
    assert archive.unpack(out) == [] and not os.path.exists(os.path.join(out, "runs/a/seed1.json"))


def test_a_damaged_archive_or_a_member_outside_the_folder_is_refused(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / archive.ARCHIVE).write_bytes(b"not xz")
    with pytest.raises(DataError, match="not a readable records archive"):
        archive.unpack(str(out))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        info = tarfile.TarInfo("../escape.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    (out / archive.ARCHIVE).write_bytes(buffer.getvalue())
    with pytest.raises(DataError, match="not a file inside the folder"):
        archive.unpack(str(out))
    assert not (tmp_path / "escape.json").exists()
