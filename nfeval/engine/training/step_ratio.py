"""The paired step-time ratio of a candidate training config to a baseline one, robust to machine load.

Timing each run on its own (``budget.time_steps``) measures the machine as much as the model: on a
shared CPU the step time of one config moves by tens of percent from one minute to the next, so two
calibrations taken apart compare two loads. Here both configs' Trainers are built in this process on
the same device, each runs untimed warm-up steps, then bursts of ``burst`` steps alternate in ABBA
order (pair i times A then B when i is even, B then A when it is odd, so a load that rises or falls
steadily within a pair cancels too). Each pair gives log(t_B / t_A) of two bursts run back to back,
under the same load; the ratio is the exponential of the median per-pair log-ratio, with the
distribution-free confidence interval of a median (order statistics of the per-pair values, ranks from
the binomial distribution; with few pairs the interval is [min, max] and its coverage is stated).

The clock. On a GPU, and on a CPU with several torch threads, it is the wall clock (after a device
synchronize). On a CPU with one torch thread it is the process's CPU time (``time.process_time``): for
a single-threaded step that is the wall time the step takes on an idle core, without the time the OS
hands to other processes, which on a shared machine is the largest error of a short burst's wall time.
Pairing still cancels what changes the work rate itself (clock frequency, caches shared with others).

Under sharing. Runs that share one GPU (``--runs-per-gpu``) each train while the others do, and a small
model's step time there is set by the contention as much as by the model. ``sharing`` N measures the
ratio while N neighbour processes train the baseline config on the same device (``busy_neighbours``),
as the runs it plans will. A CPU run keeps its own cores (and one thread is timed on its process clock),
so there the pipelines measure alone.

The steps run at learning rate 0 on throwaway Trainers (nothing is written to a run dir), so they
time exactly what training runs: data, forward, backward, optimizer. ``equal_time_steps`` turns a
ratio into the candidate's step budget: the baseline gets S steps, the candidate S ÷ ratio, so each
completes its own LR schedule in the same time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing as mp
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .budget import synchronize
from .train_config import TrainConfig

CONFIDENCE = 0.95
METHOD = (
    "paired: interleaved bursts of baseline and candidate steps (ABBA order) after untimed warm-up, in "
    "one process on one device; ratio = exp(median per-pair log(t_cand / t_base)); CI: order-statistic "
    "interval of the median"
)
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "process_cpu": time.process_time}


@dataclass(frozen=True)
class StepRatio:
    """A paired measurement: candidate step time ÷ baseline step time, with its confidence interval."""

    ratio: float
    ci_low: float
    ci_high: float
    confidence: float  # the interval's coverage (below CONFIDENCE with too few pairs for it)
    pairs: int
    burst: int  # steps of each config per burst
    warmup: int  # untimed steps of each config before the first pair
    per_pair: tuple[float, ...]  # t_cand / t_base of each pair, in order
    base_step_s: float  # median seconds per baseline step over the bursts (for reference)
    cand_step_s: float
    clock: str = "wall"  # a CLOCKS key
    sharing: int = 0  # neighbour processes training the baseline on the same device while it was timed

    def to_dict(self) -> dict[str, Any]:
        """Returns the measurement as a JSON-safe dict, with the method in words."""
        return {**asdict(self), "per_pair": list(self.per_pair), "method": METHOD}


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Returns (low, high, coverage) of the distribution-free interval for the median of ``values``:
    the order statistics x_(k) and x_(n+1-k) with the largest k whose coverage 1 − 2·P(Bin(n, ½) < k)
    is at least ``confidence``; [min, max] (coverage 1 − 2·0.5^n) when no k reaches it."""
    from scipy import stats

    x, n = sorted(values), len(values)
    k = 1
    while k + 1 <= n // 2 and 1 - 2 * stats.binom.cdf(k, n, 0.5) >= confidence:
        k += 1
    coverage = 1 - 2 * float(stats.binom.cdf(k - 1, n, 0.5))
    return x[k - 1], x[n - k], coverage


def paired_ratio(
    base_step: Callable[[int], None],
    cand_step: Callable[[int], None],
    pairs: int = 20,
    burst: int = 3,
    warmup: int = 3,
    synchronize: Callable[[], None] = lambda: None,
    clock: str = "wall",
) -> StepRatio:
    """Returns the paired ratio of ``cand_step``'s time to ``base_step``'s (each called with a step
    index, running one step) on ``clock`` (a CLOCKS key); ``synchronize`` waits for queued device
    work before the clock is read."""
    if pairs < 1 or burst < 1 or warmup < 0:
        raise ValueError(f"paired_ratio: pairs={pairs}, burst={burst}, warmup={warmup}; expected 1+, 1+, 0+")
    counters = {"base": 0, "cand": 0}
    steps = {"base": base_step, "cand": cand_step}
    now = CLOCKS[clock]

    def run(name: str, n: int) -> float:
        synchronize()
        t0 = now()
        for _ in range(n):
            steps[name](counters[name])
            counters[name] += 1
        synchronize()
        return now() - t0

    run("base", warmup)
    run("cand", warmup)
    times: dict[str, list[float]] = {"base": [], "cand": []}
    for i in range(pairs):
        for name in ("base", "cand") if i % 2 == 0 else ("cand", "base"):
            times[name].append(run(name, burst))
    per_pair = [c / b for b, c in zip(times["base"], times["cand"])]
    logs = [math.log(r) for r in per_pair]
    low, high, coverage = median_interval(logs)
    return StepRatio(
        ratio=math.exp(statistics.median(logs)),
        ci_low=math.exp(low),
        ci_high=math.exp(high),
        confidence=coverage,
        pairs=pairs,
        burst=burst,
        warmup=warmup,
        per_pair=tuple(per_pair),
        base_step_s=statistics.median(times["base"]) / burst,
        cand_step_s=statistics.median(times["cand"]) / burst,
        clock=clock,
    )


def step_clock(device: torch.device) -> str:
    """Returns the CLOCKS key that times a training step on ``device`` (see the module docstring)."""
    return "process_cpu" if device.type == "cpu" and torch.get_num_threads() == 1 else "wall"


def measure_step_ratio(
    base: TrainConfig,
    cand: TrainConfig,
    pairs: int = 20,
    burst: int = 3,
    warmup: int = 3,
    clock: str | None = None,
    sharing: int = 0,
) -> StepRatio:
    """Returns the paired step-time ratio of training ``cand`` to training ``base``: both Trainers
    built here (same process, same device), their real training steps timed in interleaved bursts on
    ``clock`` (default: ``step_clock``'s for the device), while ``sharing`` neighbour processes train
    ``base`` on the same device (``busy_neighbours``). The caller's RNG state is left as it was."""
    from .trainer import Trainer  # the trainer and its checkpoints: readers of CONFIDENCE skip them

    with (
        tempfile.TemporaryDirectory(prefix="nfeval-step-ratio-") as scratch,
        torch.random.fork_rng(),
        busy_neighbours(base, sharing),
    ):
        trainers = [Trainer(cfg, scratch) for cfg in (base, cand)]
        device = trainers[0].par.device
        a, b = (lambda i, t=t: t.train_step(i, lr=0.0) for t in trainers)
        sync = lambda: synchronize(device)  # noqa: E731
        clock = clock or step_clock(device)
        ratio = paired_ratio(a, b, pairs, burst, warmup, synchronize=sync, clock=clock)
    return dataclasses.replace(ratio, sharing=sharing)


def _neighbour(cfg: TrainConfig, ready: Any, stop: Any, steps: Any) -> None:
    """Trains ``cfg`` at LR 0 (nothing written) until ``stop`` is set, counting its steps in ``steps``;
    sets ``ready`` after its first step: a ``busy_neighbours`` process."""
    from .trainer import Trainer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="nfeval-neighbour-") as scratch:
        trainer = Trainer(cfg, scratch)
        while not stop.is_set():
            trainer.train_step(steps.value, lr=0.0)
            steps.value += 1
            ready.set()


@contextlib.contextmanager
def busy_neighbours(cfg: TrainConfig, count: int) -> Iterator[list[Any]]:
    """Runs ``count`` spawned processes training ``cfg`` on its device while the block runs (the block
    starts once each has stepped); yields their step counters (``multiprocessing.Value``); stops and
    joins them on exit. ``count`` 0: nothing runs."""
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    workers = []
    for _ in range(count):
        ready, steps = ctx.Event(), ctx.Value("l", 0)
        process = ctx.Process(target=_neighbour, args=(cfg, ready, stop, steps), daemon=True)
        process.start()
        workers.append((process, ready, steps))
    try:
        for process, ready, _ in workers:
            while not ready.wait(1.0):
                if not process.is_alive():
                    raise RuntimeError(f"a neighbour training {cfg.preset} exited ({process.exitcode})")
        yield [steps for _, _, steps in workers]
    finally:
        stop.set()
        for process, _, _ in workers:
            process.join(timeout=60)
            if process.is_alive():
                process.terminate()


def equal_time_steps(base_steps: int, ratio: float) -> int:
    """Returns the candidate's step budget for the baseline's ``base_steps``: round(base_steps / ratio),
    at least 1, so that both spend the same time on their complete schedules."""
    if not (ratio > 0 and math.isfinite(ratio)):
        raise ValueError(f"equal_time_steps: ratio {ratio!r}; expected a positive number")
    return max(1, round(base_steps / ratio))
