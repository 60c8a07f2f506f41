"""Running GLUE sweep points in parallel: one process per job (spread over the visible GPUs), each caching
its checkpoint and encoded tasks across the points it runs; or one Slurm job per point (``run_as_jobs``)."""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from ..base.errors import DataError
from ..engine.checkpoints import checkpoint as ckpt_lib
from ..launch import cluster, local
from ..launch.jobs import LaunchPoint
from . import data as glue_data
from .config import GlueConfig
from .finetune import EncodedTask, encode_task, run_point
from .points import Point, claim_and_run


@functools.lru_cache(maxsize=1)
def _worker_ckpt(path: str, trust_checkpoint: bool) -> ckpt_lib.Checkpoint:
    return ckpt_lib.load(path, trust_checkpoint=trust_checkpoint)


@functools.lru_cache(maxsize=4)
def _worker_task(
    ckpt_path: str, trust: bool, glue_dir: str | None, task: str, max_len: int, limit: int | None
) -> EncodedTask:
    data = glue_data.load(task, glue_dir).limited(limit)
    return encode_task(data, _worker_ckpt(ckpt_path, trust).tokenizer, max_len)


class Work(NamedTuple):
    """A piece of the pool's work: a point trained up to ``until`` finished epochs (None: to the end);
    ``wait``: whether to wait for a process that holds its lock."""

    point: Point
    until: int | None = None
    wait: bool = False


def plan_work(points: list[Point], jobs: int) -> list[Work]:
    """Returns ``points`` as the pool's work, in the order the pool hands it out.

    When the points do not divide among the jobs, the last ``len(points) % jobs`` points are split
    at half their epochs: their first halves go first, their second halves last (each waits for its first
    half), so the jobs end together instead of one training the remainder while the others idle (seven
    learning rates of two epochs in two jobs: seven epochs' time instead of eight). Both halves run in
    processes of the same thread count and the second resumes from the first's exact state, so a split
    point's result is the unsplit one's.
    """
    splittable = [p for p in points if p.recipe.epochs > 1]
    left = len(points) % jobs
    if len(points) < jobs or not left or len(splittable) < left:
        return [Work(p) for p in points]
    split = splittable[-left:]
    whole = [Work(p) for p in points if not any(p is s for s in split)]
    heads = [Work(p, until=p.recipe.epochs // 2) for p in split]
    return heads + whole + [Work(p, wait=True) for p in split]


def _worker_point(
    ckpt_path: str, glue_dir: str | None, trust_checkpoint: bool, device: str | None, work: Work
) -> tuple[dict | None, Point | None]:
    """Returns (result, None) of one piece of work on ``device`` (None: this pool worker's), or (None, its
    point) when another sweep holds the point; (None, None) for the first epochs of a point (or when
    another sweep holds it then: the point's last epochs wait for that sweep)."""
    p = work.point
    ckpt = _worker_ckpt(ckpt_path, trust_checkpoint)
    limit = p.key["data"].get("limit")  # --limit is part of the data's fingerprint
    enc = _worker_task(ckpt_path, trust_checkpoint, glue_dir, p.task, p.recipe.max_len, limit)
    if ckpt.fingerprint != p.key["checkpoint"] or enc.fingerprint != p.key["data"]:
        raise DataError(f"{ckpt_path} or the {p.task} data changed while the sweep was running")
    device = device or local.worker_device()
    run = functools.partial(
        run_point, ckpt, enc, p.lr, p.seed, p.recipe, p.directory, p.key, device, False, work.until
    )
    result = claim_and_run(p.directory, p.key, wait=work.wait, run=run)
    if work.until is not None:
        return None, None
    return (None, work.point) if result is None else (result, None)


def say_waiting(held: list) -> None:
    """Prints that the sweep waits for the ``held`` points another sweep is running."""
    print(f"nfeval glue: waiting for {len(held)} point(s) another sweep is running", flush=True)


def run_in_pool(ckpt, points: list[Point], cfg: GlueConfig, on_done) -> None:
    """Runs ``points`` in ``cfg.jobs`` processes (one device each: ``launch.local.worker_pool``), as
    ``plan_work`` hands them out, calling ``on_done(_, result)`` with each point's result; a point another
    sweep holds is waited for here at the end (``launch.local.run_deferring``)."""
    args = (ckpt.path, cfg.glue_dir, cfg.trust_checkpoint)
    pieces = [
        LaunchPoint(w.point.name, _worker_point, (*args, None, w), w.point.directory)
        for w in plan_work(points, cfg.jobs)
    ]

    def waiting(piece: LaunchPoint) -> LaunchPoint:  # in this process, not a worker: on the sweep's device
        return dataclasses.replace(piece, args=(*args, cfg.device, Work(piece.args[-1].point, wait=True)))

    def done(piece: LaunchPoint, outcome: tuple[dict | None, Point | None]) -> None:
        if outcome[0] is not None:  # None: a point's first epochs
            on_done(piece, outcome[0])

    local.run_deferring(
        pieces,
        done,
        jobs=cfg.jobs,
        device=cfg.device,
        held=lambda outcome: outcome[1] is not None,
        before_waiting=say_waiting,
        waiting=waiting,
    )


def job_point(ckpt_path: str, glue_dir: str | None, device: str, trust_checkpoint: bool, point: Point):
    """Runs one point in a Slurm job (a process of its own, on ``device``); returns its result, None when
    another sweep holds the point (a rerun collects it)."""
    return _worker_point(ckpt_path, glue_dir, trust_checkpoint, device, Work(point))[0]


def run_as_jobs(ckpt_path: str, points: list[Point], cfg: GlueConfig) -> None:
    """Runs ``points`` as one Slurm job array (``cfg.launch``), a point per job on ``cfg.device``. Each
    result lands in its point's folder, where the sweep reads it."""
    jobs = []
    for p in points:
        args = (ckpt_path, cfg.glue_dir, cfg.device, cfg.trust_checkpoint, p)
        jobs.append(LaunchPoint(p.name, job_point, args, p.directory))
    cluster.run_points(jobs, cfg.out_dir, cfg.launch, "glue", cfg.progress)
