"""Independent points run here, ``jobs`` at a time: the local counterpart of ``cluster.run_points``.

Each job is a spawned process bound to one device (the visible GPUs in turn, else the requested
device) and its share of the CPU cores, flushing denormals as every process nfeval owns does
(``engine.kernels.denormals``), set up before torch starts its threads. A point is a ``LaunchPoint``: it
resumes from and marks itself finished in its own folder, so a killed pool loses no finished point.
With one job the points run in this process, in order.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from typing import Any

from .jobs import LaunchPoint

_DEVICE: dict[str, str] = {}


def job_devices(device: str, jobs: int) -> list[str]:
    """Returns the device of each of ``jobs`` workers: the visible GPUs in turn for "auto"/"cuda", else
    ``device`` for every one."""
    import torch

    n = torch.cuda.device_count() if device in ("auto", "cuda") else 0
    return [f"cuda:{i % n}" for i in range(jobs)] if n else [device] * jobs


def init_worker(devices: Any, threads: int) -> None:
    """Binds this worker process to the next device of the ``devices`` queue and ``threads`` CPU threads,
    flushing denormals: the initializer of every nfeval process pool (these points', GLUE's, tune's);
    returns None."""
    import torch

    from ..engine.kernels import denormals

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


def _call(point: LaunchPoint) -> Any:
    return point.fn(*point.args)


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
            done(i, _call(point))
        return [results[i] for i in range(len(points))]
    ctx = mp.get_context("spawn")
    devices = ctx.Queue()
    for d in job_devices(device, jobs):
        devices.put(d)
    share = threads or max(1, (os.cpu_count() or 1) // jobs)
    with cf.ProcessPoolExecutor(
        jobs, mp_context=ctx, initializer=init_worker, initargs=(devices, share)
    ) as pool:
        futures = {pool.submit(_call, p): i for i, p in enumerate(points)}
        try:
            for fut in cf.as_completed(futures):
                done(futures[fut], fut.result())
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return [results[i] for i in range(len(points))]
