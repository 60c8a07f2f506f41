"""One writer per zero-shot results file (``sweep_lock.file_lock``): a second ``nfeval zeroshot --output
F`` while one writes F is refused at once, naming F and the holder, so F and its sidecar are one run's;
the sidecar records F's sha256, so a pair from two runs is told even when a run died between the two."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time

import pytest
from conftest import held_elsewhere
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval import cli
from nfeval.base.errors import DataError
from nfeval.base.jsonio import file_sha256
from nfeval.base.sweep_lock import file_lock, file_lock_path
from nfeval.report import paired


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))


def zeroshot(ckpt: str, data_dir, out) -> tuple[int, str]:
    """Returns (exit status, stderr) of ``nfeval zeroshot`` on piqa's local files, writing ``out``."""
    argv = ["zeroshot", "--ckpt", ckpt, "--data-dir", str(data_dir), "--tasks", "piqa", "--output", str(out)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main([*argv, "--device", "cpu", "--no-progress"])
    return code, err.getvalue()


def test_a_second_zeroshot_writing_one_results_file_is_refused_at_once(tiny_clm_ckpt, tmp_path):
    data = tmp_path / "data"
    write_jsonl(data / "piqa" / "validation.jsonl", DOCS["piqa"])
    out = tmp_path / "results" / "zs.json"
    with held_elsewhere(out, "file_lock") as pid:
        start = time.monotonic()
        code, err = zeroshot(tiny_clm_ckpt, data, out)
        assert code == 2 and err.count("\n") == 1, err
        assert f"{out}: being written by another nfeval process (pid {pid} on " in err
        assert time.monotonic() - start < 30  # refused before the model or lm-eval's tasks load
        assert sorted(p.name for p in out.parent.iterdir()) == [".zs.json.lock"]  # nothing written
    code, err = zeroshot(tiny_clm_ckpt, data, out)  # the holder died: its lock with it
    assert code == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["zs.items.json", "zs.json"]  # no lock left
    side = json.loads((tmp_path / "results" / "zs.items.json").read_text())
    assert side["nfeval"]["results_sha256"] == file_sha256(str(out))
    assert set(paired.zeroshot_items_by_task(str(out))) == {"piqa"}


def test_a_sidecar_of_another_run_is_refused_where_results_pair(tiny_clm_ckpt, tmp_path):
    data = tmp_path / "data"
    write_jsonl(data / "piqa" / "validation.jsonl", DOCS["piqa"])
    out = tmp_path / "zs.json"
    assert zeroshot(tiny_clm_ckpt, data, out)[0] == 0
    # another run's results beside this run's sidecar: the same model and scores, another file
    results = json.loads(out.read_text())
    results["nfeval"]["provenance"]["command"] = "another run"
    out.write_text(json.dumps(results))
    with pytest.raises(DataError, match="written with another run's results than"):
        paired.zeroshot_items_by_task(str(out))


def test_file_lock_leaves_nothing_behind_and_refuses_a_second_holder(tmp_path):
    out = tmp_path / "new" / "deeper" / "r.json"
    with file_lock(str(out)):
        assert os.path.isfile(file_lock_path(str(out)))
        with file_lock(str(out)):  # entered again by its holder
            pass
    assert not (tmp_path / "new").exists()  # a failed or refused start leaves no folder
    with file_lock(str(out)):
        out.write_text("{}")
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json"]
    with held_elsewhere(out, "file_lock"):
        with pytest.raises(OSError, match=f"{out}: being written by another nfeval process"):
            with file_lock(str(out)):
                pytest.fail("wrote a file another process writes")
