"""What a finished command leaves behind: no lock files naming processes long gone (folder and sweep-point
locks are removed as they are let go), and a GLUE table whose marks are explained."""

from __future__ import annotations

import os

from conftest import held_elsewhere

from nfeval.base import sweep_lock
from nfeval.base.errors import OutputError
from nfeval.glue import summary


def test_folder_and_point_locks_leave_no_lock_file(tmp_path):
    run, point = tmp_path / "run", tmp_path / "sweep" / "lr=0.1"
    run.mkdir()
    with sweep_lock.folder_lock(str(run)):
        (run / "model.safetensors").write_text("weights")
        assert (run / sweep_lock.LOCK).is_file()
    with sweep_lock.point_lock(str(point)) as held:
        assert held and (point / sweep_lock.LOCK).is_file()
    assert sorted(os.listdir(run)) == ["model.safetensors"] and os.listdir(point) == []


def test_a_held_folder_is_still_refused_and_then_free(tmp_path):
    with held_elsewhere(tmp_path) as pid:
        try:
            with sweep_lock.folder_lock(str(tmp_path)):
                raise AssertionError("entered a folder another process holds")
        except OutputError as e:
            assert f"pid {pid}" in str(e)
    with sweep_lock.folder_lock(str(tmp_path)):
        pass
    assert os.listdir(tmp_path) == []


def test_the_glue_tables_best_mark_is_explained():
    per_lr = {"0.0001": {"pearson": -0.0528}, "0.0002": {"pearson": -0.1}}
    entry = {"metric": "pearson", "best_lr": 0.0001, "best": {"pearson": -0.0528}, "score": -0.0528}
    entry |= {"per_lr": per_lr, "majority": {"metrics": {"pearson": 0.0}}, "beats_majority": False}
    table = summary.format_table({"tasks": {"stsb": entry}, "glue_average": -0.0528})
    assert "-0.0528*" in table and summary.BEST_MARK_NOTE in table
    assert "*: the best learning rate" in summary.BEST_MARK_NOTE
