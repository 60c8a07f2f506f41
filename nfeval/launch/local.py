"""Independent points run here, ``jobs`` at a time: the local counterpart of ``cluster.run_points``.

Each job is a spawned process bound to one device (the visible GPUs in turn, else the requested
device) and its share of the CPU cores, flushing denormals as every process nfeval owns does
(``engine.fast.denormals``), set up before torch starts its threads. A point is a ``LaunchPoint``: it
resumes from and marks itself finished in its own folder, so a killed pool loses no finished point.
With one job the points run in this process, in order. ``worker_pool`` is the one process pool of
nfeval (these points', GLUE's, tune's): a stopped command takes its workers down with it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..base.errors import ConfigError
from ..base.interrupts import STOPS
from ..base.progress import bars_lock_of_this_process
from .jobs import LaunchPoint

_DEVICE: dict[str, str] = {}


def job_devices(device: str, jobs: int) -> list[str]:
    """Returns the device of each of ``jobs`` workers: the visible GPUs in turn for "auto"/"cuda", else
    ``device`` for every one."""
    import torch

    n = torch.cuda.device_count() if device in ("auto", "cuda") else 0
    return [f"cuda:{i % n}" for i in range(jobs)] if n else [device] * jobs


def gpu_jobs(runs_per_gpu: int, per_run_bytes: int) -> int:
    """Returns how many runs train at a time on the visible GPUs: ``runs_per_gpu`` on each, or with 0 as
    many as the GPU with the least free memory holds at ``per_run_bytes`` a run
    (``engine.training.memory.training_bytes``), at least one; at most the CPU cores either way (each
    run's process drives its GPU from one). ConfigError when no GPU is visible: the runs of a CPU share
    its cores (``--jobs``)."""
    import torch

    gpus = torch.cuda.device_count()
    if not gpus:
        raise ConfigError(
            "--runs-per-gpu: no GPU is visible here; on the CPU, --jobs says how many runs at a time"
        )
    if runs_per_gpu == 0:
        free = min(torch.cuda.mem_get_info(i)[0] for i in range(gpus))
        runs_per_gpu = max(1, free // per_run_bytes)
    return max(1, min(gpus * runs_per_gpu, os.cpu_count() or 1))


def init_worker(devices: Any, threads: int) -> None:
    """Binds this worker process to the next device of the ``devices`` queue and ``threads`` CPU threads,
    flushing denormals, and makes it ignore Ctrl-C (a terminal sends it to the whole process group; the
    parent stops the pool): the initializer of ``worker_pool``; returns None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    from ..engine.fast import denormals

    bars_lock_of_this_process()
    device = devices.get()
    _DEVICE["device"] = device
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    use_threads(threads)
    denormals.flush_in_this_process()


def use_threads(threads: int | None) -> None:
    """Sets the torch CPU threads of this process, one nfeval owns (a worker, a command), to ``threads``
    (None: torch's default stays); returns None."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def worker_device() -> str | None:
    """Returns the device this worker was bound to (None outside a pool worker)."""
    return _DEVICE.get("device")


def run_points(
    points: Sequence[LaunchPoint],
    jobs: int = 1,
    threads: int | None = None,
    device: str = "auto",
    on_done: Callable[[LaunchPoint, Any], None] | None = None,
) -> list[Any]:
    """Runs ``points`` ``jobs`` at a time (each worker on ``threads`` CPU threads, default an even share
    of the cores); returns their results in the order of ``points``. ``on_done(point, result)`` is called
    as each finishes (in completion order). An exception in a point stops the pool and is raised."""
    results: dict[int, Any] = {}

    def done(i: int, result: Any) -> None:
        results[i] = result
        if on_done is not None:
            on_done(points[i], result)

    if jobs <= 1 or len(points) <= 1:
        for i, point in enumerate(points):
            done(i, point())
        return [results[i] for i in range(len(points))]
    with worker_pool(device, jobs, threads) as pool:
        futures = {pool.submit(p): i for i, p in enumerate(points)}
        for fut in cf.as_completed(futures):
            done(futures[fut], fut.result())
    return [results[i] for i in range(len(points))]


def waited(point: LaunchPoint) -> LaunchPoint:
    """Returns ``point`` called with ``wait=True``: it waits for the process that holds its lock."""
    return dataclasses.replace(point, kwargs={**point.kwargs, "wait": True})


def run_deferring(
    points: Sequence[LaunchPoint],
    on_done: Callable[[LaunchPoint, Any], None],
    jobs: int = 1,
    threads: int | None = None,
    device: str = "auto",
    held: Callable[[Any], bool] = lambda result: result is None,
    before_waiting: Callable[[list[LaunchPoint]], None] | None = None,
    waiting: Callable[[LaunchPoint], LaunchPoint] = waited,
) -> None:
    """Runs the points of a sweep ``jobs`` at a time (``run_points``), handing each result to ``on_done``.
    A point another process is computing (it holds the point's lock: ``held(result)``) is set aside and,
    once the others are done, run here as ``waiting(point)`` (by default with ``wait=True``), in the order
    the points were given: that waits for the other process and reads its result, or computes the point
    when that process died. ``before_waiting(set aside)`` is called first when there are any (to say
    so)."""
    order = {id(p): i for i, p in enumerate(points)}
    set_aside: list[LaunchPoint] = []

    def done(point: LaunchPoint, result: Any) -> None:
        if held(result):
            set_aside.append(point)
        else:
            on_done(point, result)

    run_points(points, jobs=jobs, threads=threads, device=device, on_done=done)
    if set_aside and before_waiting is not None:
        before_waiting(set_aside)
    for point in sorted(set_aside, key=lambda p: order[id(p)]):
        on_done(point, waiting(point)())


@contextlib.contextmanager
def worker_pool(device: str, jobs: int, threads: int | None = None) -> Iterator[cf.ProcessPoolExecutor]:
    """Yields a pool of ``jobs`` spawned worker processes, each bound by ``init_worker`` to a device of
    ``job_devices(device, jobs)`` and ``threads`` CPU threads (default an even share of the cores).

    Stopped by Ctrl-C or SIGTERM (``base.interrupts.STOPS``), the pool terminates its workers at once
    (their points resume on a rerun) and the stop goes on; any other exception in the block lets the
    running points finish, cancels the queued ones and goes on."""
    ctx = mp.get_context("spawn")
    devices = ctx.Queue()
    for d in job_devices(device, jobs):
        devices.put(d)
    share = threads or max(1, (os.cpu_count() or 1) // jobs)
    pool = cf.ProcessPoolExecutor(jobs, mp_context=ctx, initializer=init_worker, initargs=(devices, share))
    workers = pool._processes  # the live workers, by pid; shutdown() drops the executor's reference to it
    try:
        try:
            yield pool
        except STOPS:
            raise
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    except STOPS:
        _terminate(pool, workers)
        raise


def _terminate(pool: cf.ProcessPoolExecutor, workers: dict[int, Any]) -> None:
    """Terminates the pool's ``workers`` (SIGTERM), waits for them and shuts the pool down."""
    # ProcessPoolExecutor stops running work only from Python 3.14 on (terminate_workers)
    for process in list(workers.values()):
        process.terminate()
    for process in list(workers.values()):
        process.join()
    pool.shutdown(wait=False, cancel_futures=True)
