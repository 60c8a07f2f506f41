"""Budgets and schedules: steps from a step/token/FLOP/time budget, the LR schedule, peak FLOP/s for MFU.

A time budget is turned into a step count before training (the paper's equal-GPU-time runs): real
training steps are timed, first untimed warm-up steps (at least 2, and at least 2% of the budget up
to 5 s: allocation, kernel selection and compilation settle there), then timed steps (at least
``calibration_steps``, and at least 3% of the budget up to 10 s); the median timed step is the step
time and the run gets floor(max_seconds / step time) steps. Under torchrun every process runs the
same number of calibration steps and the slowest process's step time is used, so all ranks stop at
the same step. The caller restores model, optimizer and RNG afterwards (``Trainer.calibrate``).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from ...base.artifacts import atomic_write_json, cache_dir, hardware, hardware_key
from ...base.errors import ConfigError, DataError, MissingDataError, OutputError
from ...base.jsonio import load_json
from ..fast.cpu_linear import linear
from .train_config import TrainConfig, resolved_warmup

CALIBRATION_WARMUP = 2  # untimed steps before timing: allocation, autotuning, torch.compile's first graphs
# Calibration also lasts a share of the budget (capped), so a run's first-second slowness cannot bias it.
CALIBRATION_WARMUP_SHARE, CALIBRATION_WARMUP_CAP_S = 0.02, 5.0
CALIBRATION_TIMED_SHARE, CALIBRATION_TIMED_CAP_S = 0.03, 10.0

# Dense (no sparsity) peak FLOP/s per GPU from NVIDIA's datasheets, keyed by the exact name
# torch.cuda.get_device_name() reports (without the "NVIDIA " prefix). fp32 is the non-tensor-core rate.
GPU_PEAKS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989e12, "fp32": 67e12},  # H200 SXM
    "H200 NVL": {"bf16": 835e12, "fp32": 60e12},
    "H100 80GB HBM3": {"bf16": 989e12, "fp32": 67e12},  # H100 SXM5
    "H100 PCIe": {"bf16": 756e12, "fp32": 51e12},
    "H100 NVL": {"bf16": 835e12, "fp32": 60e12},
    "GH200 480GB": {"bf16": 989e12, "fp32": 67e12},
    "A100-SXM4-80GB": {"bf16": 312e12, "fp32": 19.5e12},
    "A100-SXM4-40GB": {"bf16": 312e12, "fp32": 19.5e12},
    "A100 80GB PCIe": {"bf16": 312e12, "fp32": 19.5e12},
    "A100-PCIE-40GB": {"bf16": 312e12, "fp32": 19.5e12},
    "L4": {"bf16": 121e12, "fp32": 30.3e12},
    "L40": {"bf16": 181e12, "fp32": 90.5e12},
    "L40S": {"bf16": 366e12, "fp32": 91.6e12},
    "A10": {"bf16": 125e12, "fp32": 31.2e12},
    "RTX A6000": {"bf16": 154.8e12, "fp32": 38.7e12},
    "Tesla V100-SXM2-32GB": {"fp32": 15.7e12},
    "Tesla V100-SXM2-16GB": {"fp32": 15.7e12},
    "Tesla T4": {"fp32": 8.1e12},
}


def gpu_peak(device_name: str, dtype: str) -> tuple[float, str] | None:
    """Returns (datasheet peak FLOP/s, table key) for an exact ``torch.cuda.get_device_name()``, else None."""
    name = device_name.strip()
    key = name.removeprefix("NVIDIA ").strip()
    peaks = GPU_PEAKS.get(key) or GPU_PEAKS.get(name)
    if peaks is None or dtype not in peaks:
        return None
    return peaks[dtype], key if key in GPU_PEAKS else name


def warmup_steps(cfg: TrainConfig, total_steps: int) -> int:
    """Returns the number of warmup steps (``warmup`` is steps if >= 1, else a fraction of the run; unset,
    the recipe's: ``train_config.resolved_warmup``)."""
    warmup = resolved_warmup(cfg)
    if warmup >= 1:
        return int(warmup)
    return max(1, round(warmup * total_steps)) if warmup > 0 else 0


def lr_at(cfg: TrainConfig, step: int, total_steps: int) -> float:
    """Returns the LR of update ``step`` (0-based): linear warmup, then polynomial decay to end_lr."""
    warm = warmup_steps(cfg, total_steps)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    remaining = 1.0 - (step - warm) / max(1, total_steps - warm)
    return (cfg.lr - cfg.end_lr) * remaining**cfg.lr_power + cfg.end_lr


def steps_for_budget(
    cfg: TrainConfig, tokens_per_step: int, flops_per_step: float
) -> tuple[int | None, dict[str, Any]]:
    """Returns (steps allowed by the step/token/FLOP budgets or None if only time is given, budget record)."""
    limits = {}
    if cfg.max_steps is not None:
        limits["max_steps"] = int(cfg.max_steps)
    if cfg.max_tokens is not None:
        limits["max_tokens"] = int(cfg.max_tokens // tokens_per_step)
    if cfg.max_flops is not None:
        limits["max_flops"] = int(cfg.max_flops // flops_per_step)
    for name, steps in limits.items():
        if steps < 1:
            raise ConfigError(
                f"impossible budget: {name}={getattr(cfg, name)!r} is less than one step "
                f"({tokens_per_step} tokens, {flops_per_step:.3g} FLOPs per step)"
            )
    record = {"tokens_per_step": tokens_per_step, "flops_per_step": flops_per_step, "steps_by_budget": limits}
    return (min(limits.values()) if limits else None), record


def check_warmup(cfg: TrainConfig, total_steps: int) -> None:
    """Raises ConfigError when warmup does not leave room for decay."""
    warmup = resolved_warmup(cfg)
    if warmup_steps(cfg, total_steps) >= total_steps and warmup >= 1:
        raise ConfigError(
            f"impossible budget: warmup={warmup:g} steps is not shorter than the run ({total_steps} steps)"
        )


def time_steps(
    cfg: TrainConfig, step: Callable[[int], None], all_done: Callable[[bool], bool]
) -> tuple[list[float], int]:
    """Runs ``step(i)`` until the calibration has enough warm-up and timed steps on every process.

    ``all_done(flag)`` returns whether every process is done (so all run the same number of
    collective steps). Returns (every step's seconds, number of untimed warm-up steps).
    """
    warmup_s = min(CALIBRATION_WARMUP_SHARE * cfg.max_seconds, CALIBRATION_WARMUP_CAP_S)
    timed_s = min(CALIBRATION_TIMED_SHARE * cfg.max_seconds, CALIBRATION_TIMED_CAP_S)
    times: list[float] = []
    n_warmup = None  # steps in the warm-up phase, known once it ends
    while True:
        t0 = time.perf_counter()
        step(len(times))
        times.append(time.perf_counter() - t0)
        if n_warmup is None and len(times) >= CALIBRATION_WARMUP and sum(times) >= warmup_s:
            n_warmup = len(times)
        done = (
            n_warmup is not None
            and len(times) - n_warmup >= cfg.calibration_steps
            and sum(times[n_warmup:]) >= timed_s
        )
        if all_done(done):
            if n_warmup is None:  # another process finished first: this one's steps all count as timed
                n_warmup = min(CALIBRATION_WARMUP, len(times) - 1)
            return times, n_warmup


def calibration_record(times: list[float], n_warmup: int, step_s: float) -> dict[str, Any]:
    """Returns the ``train.budget.calibration`` block of config.json."""
    return {
        "method": "median time of real steps after untimed warm-up steps; model, optimizer and RNG "
        "restored afterwards; the slowest process's median under torchrun",
        "steps_warmup": n_warmup,
        "steps_timed": len(times) - n_warmup,
        "step_s": step_s,
        "step_times_s": times,
    }


def steps_for_time(cfg: TrainConfig, budget: dict[str, Any], step_s: float) -> int:
    """Returns the run's total steps once the time budget is known (and records it in ``budget``)."""
    by_time = int(cfg.max_seconds // step_s)
    if by_time < 1:
        raise ConfigError(
            f"impossible budget: max_seconds={cfg.max_seconds} is less than one step "
            f"({step_s:.3g} s per step)"
        )
    budget["steps_by_budget"]["max_seconds"] = by_time
    total = min(budget["steps_by_budget"].values())
    check_warmup(cfg, total)
    return total


def median_step_s(times: list[float], n_warmup: int) -> float:
    """Returns the median of the timed (post warm-up) step times."""
    return statistics.median(times[n_warmup:])


def peak_flops(cfg: TrainConfig, device: torch.device) -> tuple[float, str]:
    """Returns (peak FLOP/s of one device in the run's dtype, where the number comes from)."""
    if cfg.peak_flops:
        return float(cfg.peak_flops), "configured"
    if device.type == "cuda":
        found = gpu_peak(torch.cuda.get_device_name(device), cfg.dtype)
        if found is not None:
            return found[0], f"datasheet ({found[1]}, dense)"
    path = os.path.join(cache_dir(), "peak_flops.json")
    key = f"{hardware_key(hardware())}|{device.type}|{cfg.dtype}"
    known = _known_peaks(path)
    # A peak is a maximum: each call measures briefly again and the cache keeps the best figure, so one
    # measurement taken under load (which would make every later MFU read high) does not stick.
    seconds = 0.1 if key in known else 0.5
    now = measure_matmul_flops(
        device, torch.bfloat16 if cfg.dtype == "bf16" else torch.float32, seconds=seconds
    )
    if now > known.get(key, 0.0):
        known[key] = now
        try:
            atomic_write_json(path, known)
        except OutputError:  # an unwritable cache (zeroshot --no-cache, a read-only home) keeps nothing
            return now, "measured matmul peak (now; the cache that keeps the best is not writable)"
    return float(known[key]), "measured matmul peak (best so far on this machine)"


def _known_peaks(path: str) -> dict[str, float]:
    """Returns the peak FLOP/s cache {hardware|device|dtype: FLOP/s}; a damaged or unreadable file, or
    entry, counts as none (it is measured again and rewritten)."""
    try:
        known = load_json(path)
    except (MissingDataError, DataError):
        return {}
    return {k: float(v) for k, v in known.items() if type(v) in (int, float) and 0 < v < math.inf}


def synchronize(device: torch.device) -> None:
    """Waits for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_matmul_flops(
    device: torch.device, dtype: torch.dtype, n: int = 1024, seconds: float = 0.5
) -> float:
    """Returns the FLOP/s of n×n matmuls on ``device`` through the engine's linear kernel
    (``cpu_linear.linear``: a practical peak for MFU): the fastest of bursts of 4 matmuls within
    ``seconds``, so that a moment of load on a shared machine does not lower it."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # the run's RNG stays put
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        linear(a, b)
    synchronize(device)
    best, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds or best == 0.0:
        t0 = time.perf_counter()
        for _ in range(4):
            linear(a, b)
        synchronize(device)
        best = max(best, 2.0 * n**3 * 4 / (time.perf_counter() - t0))
    return best
