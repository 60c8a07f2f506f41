"""The demo's two runs under ``nfeval reproduce``'s protocol, through the pipelines' one run mechanism
(``pipelines.runs``): the paired step-time ratio of NormFormer to Pre-LN measured before training
(``runs.measure_ratios``), Pre-LN's step budget fixed and NormFormer's derived from it
(``runs.equal_time_budget``: S ÷ ratio), each run completing its own LR schedule (``runs.ensure_run``,
trained here or two at a time by ``runner.train``).

Pre-LN's S is ``--steps`` when given; else it is what the time target buys: the training share of
``--minutes`` over the step time the paired measurement saw (corrected for the machine's load then, the
wall time over the CPU time of the measurement) and the validation and checkpoints on top. Both the
ratio (``step_ratios.json``) and S (``budget.json``) are stored before the first step, so a rerun into
the same folder resumes the same runs and never re-times them.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from ...base.artifacts import atomic_write_json
from ...base.jsonio import load_json
from ...engine.training.train_config import TrainConfig
from .. import runner, runs

ARCHES = ("prenorm", "normformer")  # the baseline first: compare and the leaderboard take it as such
BASELINE = ARCHES[0]
RATIOS_FILE = "step_ratios.json"
BUDGET_FILE = "budget.json"
# The seconds a training step costs over the timed step itself: validation, logging and checkpoints
# (about 10-20% at the demo's settings on a 2-core CPU).
STEP_OVERHEAD = 1.15
MIN_STEPS = 20  # a derived budget never goes below this
SPAWN_S = 10.0  # seconds before two training processes take their first step (imports)
VAL_POINTS = 10  # validation points each run records at least (the last step's included)
WARMUP = 0.05  # the schedule's linear warm-up, a fraction of the run; then linear decay to 0


def run_dir(out: str, arch: str) -> str:
    return os.path.join(out, "runs", arch)


def train_config(cfg, tokenizer: str, arch: str, steps: int, eval_every: int) -> TrainConfig:
    """Returns the TrainConfig of ``arch``: the preset's recipe (fairseq's), the demo's batch and LR (the
    same, untuned, for both), ``steps`` updates with a linear warm-up and decay over them."""
    return TrainConfig(
        preset=f"{arch}-{cfg.size}",
        # a window longer than the training blocks: zero-shot items longer than them still fit
        model={"max_seq_len": max(cfg.seq_len, 1024)},
        tokenizer=tokenizer,
        batch_size=cfg.batch_size,
        seq_len=cfg.seq_len,
        max_steps=steps,
        lr=cfg.lr,
        warmup=WARMUP,
        log_interval=max(1, min(25, eval_every)),
        eval_interval=eval_every,
        eval_samples=cfg.eval_samples,
        ckpt_interval=max(1, steps // 4),
        device=cfg.device,
        seed=cfg.seed,
        progress=cfg.progress and cfg.jobs == 1,  # two runs at a time: the stage line, not two bars
    )


def measure_ratio(cfg, tokenizer: str, log) -> tuple[dict[str, Any], float]:
    """Returns (NormFormer's paired step-time ratio record to Pre-LN, the load factor: wall over CPU time
    while it was measured), measuring only what ``<out>/step_ratios.json`` does not hold yet."""
    path = os.path.join(cfg.out, RATIOS_FILE)
    wall, cpu = time.perf_counter(), time.process_time()
    records = runs.measure_ratios(
        path,
        list(ARCHES),
        baseline_of=lambda arch: BASELINE,
        model_of=lambda arch: arch,
        configs=lambda arch, base: (
            train_config(cfg, tokenizer, base, 1000, 100),
            train_config(cfg, tokenizer, arch, 1000, 100),
        ),
        timing={"pairs": cfg.ratio_pairs, "burst": cfg.ratio_burst, "warmup": cfg.ratio_warmup},
        log=log,
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return records[ARCHES[1]], min(4.0, max(1.0, wall / cpu)) if cpu > 1.0 else 1.0


def step_budget(cfg, ratio: dict[str, Any], load: float) -> dict[str, Any]:
    """Returns Pre-LN's step budget (``budget.json``: max_steps and how it was fixed), fixing it on the
    first call: ``cfg.steps``, else the training share of the time target at the measured step time."""
    path = os.path.join(cfg.out, BUDGET_FILE)
    if os.path.isfile(path) and (cfg.steps is None or load_json(path)["max_steps"] == cfg.steps):
        return load_json(path)
    step_s = ratio["base_step_s"] * load * STEP_OVERHEAD
    parallel = min(cfg.jobs, len(ARCHES))
    spawn = SPAWN_S if parallel > 1 else 0.0  # worker processes start before their first step
    if cfg.steps is not None:
        budget = {"max_steps": cfg.steps, "how": "--steps"}
    else:
        seconds = max(0.0, cfg.train_seconds() - spawn) * parallel / len(ARCHES)
        steps = max(MIN_STEPS, int(seconds / step_s))
        how = (
            f"--minutes {cfg.minutes:g}: {seconds:.0f} s of training per run ÷ {step_s:.4f} s per step "
            f"(Pre-LN's {ratio['base_step_s']:.4f} s timed, × {load:.2f} for the load then, × "
            f"{STEP_OVERHEAD} for validation and checkpoints)"
        )
        budget = {"max_steps": steps, "how": how}
    # the training stage's expected wall time: the runs one after the other, or two at a time
    budget["expected_s"] = round(budget["max_steps"] * step_s * len(ARCHES) / parallel + spawn, 1)
    budget.update(step_s=round(step_s, 5), load_factor=round(load, 3), runs_at_a_time=parallel)
    atomic_write_json(path, budget)
    return budget


def budgets(base_steps: int, ratio: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Returns each run's TrainConfig budget: Pre-LN S steps, NormFormer S ÷ its ratio."""
    base = {"max_steps": base_steps}
    return {BASELINE: base, ARCHES[1]: runs.equal_time_budget(base, ratio)}


def eval_interval(steps: dict[str, dict[str, float]]) -> int:
    """Returns the steps between validations that give every run at least VAL_POINTS points (a run shorter
    than VAL_POINTS steps: one a step)."""
    return max(1, int(min(b["max_steps"] for b in steps.values())) // VAL_POINTS)


def log_line(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


def train_runs(cfg, tokenizer: str, base_steps: int, ratio: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Trains both runs to the end of their schedules through the one runner (``pipelines.runner``;
    resuming; two at a time with ``cfg.jobs`` 2); returns {arch: its run record}."""
    per_run = budgets(base_steps, ratio)
    every = eval_interval(per_run)
    specs = [
        runner.RunSpec(
            name=arch,
            seed=cfg.seed,
            config=train_config(cfg, tokenizer, arch, int(per_run[arch]["max_steps"]), every),
            directory=run_dir(cfg.out, arch),
            record={"name": arch, "budget": per_run[arch], "step_ratio": None if arch == BASELINE else ratio},
        )
        for arch in ARCHES
    ]
    ensure = functools.partial(runner.ensure, log=log_line)
    left = runner.train(
        specs,
        ensure,
        cfg.out,
        jobs=cfg.jobs,
        threads=1,
        device=cfg.device,
        desc="demo",
        progress=cfg.progress,
    )
    if left is not None:
        raise RuntimeError(f"demo: {left}")
    return {arch: runs.finished(run_dir(cfg.out, arch)) for arch in ARCHES}
