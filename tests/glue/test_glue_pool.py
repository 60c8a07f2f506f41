"""The sweep's process pool: when the points do not divide among the jobs, some are split at an epoch
boundary so the jobs end together, and a split point's results are the unsplit one's."""

import json
import math
import os
import types

import pytest
import torch
from test_glue import write_cat_tasks

from nfeval.glue import sweep as glue
from nfeval.glue.config import GlueConfig
from nfeval.glue.points import Point
from nfeval.glue.pool import Work, plan_work


def points(n: int, epochs: int) -> list[Point]:
    recipe = types.SimpleNamespace(epochs=epochs)
    return [Point("rte", 1e-4 * (i + 1), 0, recipe, f"lr{i}", {}) for i in range(n)]


def makespan(work: list[Work], jobs: int) -> int:
    """Returns when the last job ends, in epochs, handing out ``work`` in order to the first free job (as
    a process pool does); a point's last epochs wait for its first ones."""
    free, heads = [0] * jobs, {}  # heads: {lr: (when its first epochs end, how many)}
    for w in work:
        job = min(range(jobs), key=free.__getitem__)
        point = w.point
        if w.until is not None:
            free[job] += w.until
            heads[point.lr] = (free[job], w.until)
            continue
        head_end, head_epochs = heads.get(point.lr, (0, 0))
        free[job] = max(free[job], head_end) + point.recipe.epochs - head_epochs
    return max(free)


def test_the_remainder_is_split_so_seven_lrs_take_seven_epochs_on_two_jobs():
    work = plan_work(points(7, 2), jobs=2)
    assert [(w.point.lr, w.until, w.wait) for w in (work[0], work[-1])] == [
        (7e-4, 1, False),
        (7e-4, None, True),
    ]
    assert [w.until for w in work[1:-1]] == [None] * 6 and not any(w.wait for w in work[1:-1])
    assert makespan(work, 2) == 7
    assert makespan([Work(p) for p in points(7, 2)], 2) == 8  # unsplit: the last point runs alone


@pytest.mark.parametrize(
    ("n", "jobs", "epochs"), [(7, 2, 2), (5, 2, 2), (3, 2, 3), (5, 4, 2), (6, 4, 2), (9, 2, 10)]
)
def test_split_work_ends_within_an_epoch_of_an_even_share(n, jobs, epochs):
    assert makespan(plan_work(points(n, epochs), jobs), jobs) <= math.ceil(n * epochs / jobs) + epochs % 2


@pytest.mark.parametrize(("n", "jobs", "epochs"), [(4, 2, 2), (1, 2, 2), (3, 4, 2), (7, 2, 1)])
def test_nothing_is_split_where_it_cannot_help(n, jobs, epochs):
    assert plan_work(points(n, epochs), jobs) == [Work(p) for p in points(n, epochs)]


def test_a_point_run_in_two_calls_equals_one_call(tiny_mlm_ckpt, tmp_path):
    glue_dir = write_cat_tasks(tmp_path / "glue", n_train=160, n_dev=64)
    recipe = glue.Recipe(epochs=3, batch_size=32)  # dropout on: the masks must resume too
    args = dict(glue_dir=glue_dir, recipe=recipe, progress=False)
    whole = glue.sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=[1e-3], out_dir=str(tmp_path / "whole"), **args)
    )

    real = glue.run_point

    def first_epoch_then_rest(*a, **k):
        assert real(*a, **k, until=1) is None  # stops after one epoch, leaving its state
        assert (tmp_path / "cut" / "glue" / "sst2" / "lr=0.001" / "seed=0" / "state.pt").exists()
        return real(*a, **k)

    glue.run_point = first_epoch_then_rest
    try:
        cut = glue.sweep(
            tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=[1e-3], out_dir=str(tmp_path / "cut"), **args)
        )
    finally:
        glue.run_point = real
    assert cut["tasks"] == whole["tasks"]

    def history(out):
        path = out / "glue" / "sst2" / "lr=0.001" / "seed=0" / "result.json"
        return [(h["epoch"], h["train_loss"], h["metrics"]) for h in json.loads(path.read_text())["history"]]

    assert history(tmp_path / "cut") == history(tmp_path / "whole")


def test_a_pool_with_a_split_point_gives_the_one_process_results(tiny_mlm_ckpt, tmp_path):
    glue_dir = write_cat_tasks(tmp_path / "glue", n_train=160, n_dev=64)
    recipe = glue.Recipe(epochs=2, batch_size=32)
    lrs = [3e-4, 1e-3, 3e-3]  # three points in two jobs: the last one split
    args = dict(glue_dir=glue_dir, recipe=recipe, progress=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))  # each job's share: threads move rounding
    try:
        alone = glue.sweep(
            tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=lrs, out_dir=str(tmp_path / "alone"), **args)
        )
    finally:
        torch.set_num_threads(threads)
    pooled = glue.sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=lrs, out_dir=str(tmp_path / "pool"), jobs=2, **args)
    )
    assert pooled["tasks"]["sst2"]["per_lr"] == alone["tasks"]["sst2"]["per_lr"]
    for lr in ("0.0003", "0.001", "0.003"):
        point = f"glue/sst2/lr={lr}/seed=0"
        assert not (tmp_path / "pool" / point / "state.pt").exists()
        results = [
            json.loads((tmp_path / side / point / "result.json").read_text()) for side in ("alone", "pool")
        ]
        assert [r["cpu_flush_denormals"] for r in results] == [False, True]  # in process; a pool worker
        assert [h["train_loss"] for h in results[0]["history"]] == [
            h["train_loss"] for h in results[1]["history"]
        ]
