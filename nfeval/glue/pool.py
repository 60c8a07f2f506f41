"""Running GLUE sweep points in parallel: one process per job (spread over the visible GPUs), each caching
its checkpoint and encoded tasks across the units (a point, or an ensemble of points) it runs; or one
Slurm job per unit (``run_as_jobs``)."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import multiprocessing as mp
import os
from typing import Any, NamedTuple

import torch

from ..base.errors import DataError
from ..engine import checkpoint as ckpt_lib
from ..engine import denormals
from . import data as glue_data
from . import ensemble
from .finetune import EncodedTask, encode_task, run_point
from .points import Point, claim_and_run, lr_key

_WORKER: dict[str, Any] = {}


def _init_worker(devices, threads: int, trust_checkpoint: bool) -> None:
    """Binds this worker process to its device and its share of the CPU cores, flushing denormals (before
    torch starts its threads: ``engine.denormals``)."""
    device = devices.get()
    _WORKER.update(device=device, trust_checkpoint=trust_checkpoint)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    torch.set_num_threads(threads)
    denormals.flush_in_this_process()


@functools.lru_cache(maxsize=1)
def _worker_ckpt(path: str) -> ckpt_lib.Checkpoint:
    return ckpt_lib.load(path, trust_checkpoint=_WORKER.get("trust_checkpoint", False))


@functools.lru_cache(maxsize=4)
def _worker_task(ckpt_path: str, glue_dir: str | None, task: str, max_len: int) -> EncodedTask:
    return encode_task(glue_data.load(task, glue_dir), _worker_ckpt(ckpt_path).tokenizer, max_len)


class Work(NamedTuple):
    """A unit of the pool's work (a point, or an ensemble of points) trained up to ``until`` finished
    epochs (None: to the end); ``wait``: whether to wait for a process that holds its point's lock."""

    unit: list[Point]
    until: int | None = None
    wait: bool = False


def plan_work(units: list[list[Point]], jobs: int) -> list[Work]:
    """Returns ``units`` as the pool's work, in the order the pool hands it out.

    When the units do not divide among the jobs, the last ``len(units) % jobs`` single points are split
    at half their epochs: their first halves go first, their second halves last (each waits for its first
    half), so the jobs end together instead of one training the remainder while the others idle (seven
    learning rates of two epochs in two jobs: seven epochs' time instead of eight). Both halves run in
    processes of the same thread count and the second resumes from the first's exact state, so a split
    point's result is the unsplit one's.
    """
    singles = [u for u in units if len(u) == 1 and u[0].recipe.epochs > 1]
    left = len(units) % jobs
    if len(units) < jobs or not left or len(singles) < left:
        return [Work(u) for u in units]
    split = singles[-left:]
    whole = [Work(u) for u in units if not any(u is s for s in split)]
    heads = [Work(u, until=u[0].recipe.epochs // 2) for u in split]
    return heads + whole + [Work(u, wait=True) for u in split]


def _worker_unit(ckpt_path: str, glue_dir: str | None, work: Work) -> tuple[list[dict], list[Point]]:
    """Returns (results, points another sweep holds) of one piece of work; none of either for the first
    epochs of a point (or for those another sweep holds: the point's last epochs wait for that sweep)."""
    unit = work.unit
    ckpt = _worker_ckpt(ckpt_path)
    task, recipe = unit[0].task, unit[0].recipe
    enc = _worker_task(ckpt_path, glue_dir, task, recipe.max_len)
    if ckpt.fingerprint != unit[0].key["checkpoint"] or enc.fingerprint != unit[0].key["data"]:
        raise DataError(f"{ckpt_path} or the {task} data changed while the sweep was running")
    device = _WORKER["device"]
    if len(unit) > 1:
        return ensemble.claim_and_run_ensemble(ckpt, enc, unit, device, progress=False, wait=False)
    _, lr, seed, _, directory, key = unit[0]
    run = functools.partial(run_point, ckpt, enc, lr, seed, recipe, directory, key, device, False, work.until)
    result = claim_and_run(directory, key, wait=work.wait, run=run)
    if work.until is not None:
        return [], []
    return ([], unit) if result is None else ([result], [])


def _job_devices(device: str, jobs: int) -> list[str]:
    if device == "cuda" and torch.cuda.is_available():
        return [f"cuda:{i % torch.cuda.device_count()}" for i in range(jobs)]
    return [device] * jobs


def run_in_pool(ckpt, glue_dir, units, results, device, jobs, trust_checkpoint, bar) -> list[Point]:
    """Runs ``units`` (lists of points: one point, or an ensemble) in ``jobs`` processes (one device
    each); returns the points another sweep holds."""
    ctx = mp.get_context("spawn")
    devices = ctx.Queue()
    for d in _job_devices(device, jobs):
        devices.put(d)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    deferred = []
    with cf.ProcessPoolExecutor(
        jobs, mp_context=ctx, initializer=_init_worker, initargs=(devices, threads, trust_checkpoint)
    ) as pool:
        futures = [pool.submit(_worker_unit, ckpt.path, glue_dir, work) for work in plan_work(units, jobs)]
        try:
            for fut in cf.as_completed(futures):
                done, held = fut.result()
                deferred += held
                for result in done:
                    results[result["task"]].append(result)
                bar.update(len(done))
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return deferred


def job_unit(ckpt_path: str, glue_dir: str | None, device: str, trust_checkpoint: bool, unit: list[Point]):
    """Runs one unit in a Slurm job (a process of its own, on ``device``); returns its results (none for
    points another sweep holds: a rerun collects them)."""
    _WORKER.update(device=device, trust_checkpoint=trust_checkpoint)
    return _worker_unit(ckpt_path, glue_dir, Work(unit))[0]


def run_as_jobs(ckpt_path, glue_dir, points, setting, device, trust_checkpoint, launch, out_dir, progress):
    """Runs ``points`` as one Slurm job array (``launch``), a unit per job: one point, or ``--ensemble N``
    points of one task and seed (``auto`` measures the free memory of a GPU this machine may not have:
    there, one point per job). Each result lands in its point's folder, where the sweep reads it."""
    from ..launch import cluster
    from ..launch.jobs import LaunchPoint

    units = ensemble.plan_units(points, 1 if setting == ensemble.AUTO else setting, jobs=1)
    jobs = []
    for unit in units:
        name = f"{unit[0].task}/lr={','.join(lr_key(p.lr) for p in unit)}/seed={unit[0].seed}"
        args = (ckpt_path, glue_dir, device, trust_checkpoint, unit)
        jobs.append(LaunchPoint(name, job_unit, args, unit[0].directory))
    cluster.run_points(jobs, out_dir, launch, "glue", progress)
