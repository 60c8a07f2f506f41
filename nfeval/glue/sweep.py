"""GLUE fine-tuning: ``nfeval glue --ckpt PATH --sweep`` fine-tunes a checkpoint on each task at every
learning rate of a grid (and ``--seeds N`` seeds), picks the best learning rate on dev, and writes

    <out>/glue/<task>/lr=<lr>/seed=<s>/result.json   one point, written atomically when it finishes
    <out>/glue.json                                   the summary (per-LR table, best LR, GLUE average)

Tasks run by separate invocations into the same ``--out`` (of the same checkpoint) share one summary.

Recipe defaults are those of fairseq's RoBERTa GLUE recipe (examples/roberta/README.glue.md): 10 epochs,
linear warmup over 6% of the updates then linear decay to 0, Adam(W) β=(0.9, 0.98), eps 1e-6, weight
decay 0.1 on every parameter, dropout and attention dropout 0.1, no gradient clipping, batch 32 for
the large tasks (MNLI, QNLI, QQP, SST-2) and 16 for the others, sequences truncated to 512 tokens
(capped at the model's ``max_seq_len``). As fairseq's ``--best-checkpoint-metric``, each point reports
the epoch with the best dev score (``--select last_epoch`` reports the last epoch instead).

The paper's seven-value grid is not public; the default grid is seven roughly log-spaced values for
base-sized models, ``DEFAULT_LRS`` = 1e-5 … 3e-4 (small CPU models usually want larger values: pass
``--lrs``). Without ``--sweep`` and ``--lrs`` each task runs once at fairseq's recipe learning rate.

Inputs are ``<s> A </s>`` or ``<s> A </s></s> B </s>`` (RoBERTa), pairs truncated longest-first. The
head pools the first token of an encoder and the last real token of a causal model
(``nfeval.engine.model.model.SequenceClassifier``); STS-B is a one-output regression with MSE loss.

Speed: batches are padded only to their longest member, and drawn from length-sorted pools of 100
batches (bucketing); bf16 autocast on GPUs that support it; ``--jobs N`` runs points in N processes
(spread over the visible GPUs; a remainder of points split at an epoch: ``pool.plan_work``). Resume:
finished points are skipped (their result.json records the checkpoint fingerprint, data sha256s and
recipe, and a mismatch is an error, never a silent mix); an unfinished point restarts from its last
finished epoch (``state.pt``, deleted when the point is done).

This module plans, runs and summarises a sweep; ``recipe.py`` holds the recipe, ``finetune.py`` one point,
``points.py`` a point's files and lock.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from ..base.artifacts import atomic_write_json, provenance
from ..base.errors import ConfigError, MissingDataError
from ..base.jsonio import load_json
from ..base.progress import progress_bar
from ..base.sweep_points import point_dir
from ..engine.checkpoints import checkpoint as ckpt_lib
from ..launch import local
from ..launch.jobs import LaunchPoint
from ..launch.options import LaunchOptions
from . import data as glue_data
from . import metrics as glue_metrics
from .config import DEFAULT_LRS, GlueConfig
from .finetune import EncodedTask, encode_task, run_point
from .points import SWEEP, Point, claim_and_run, finished_on_disk, finished_result
from .pool import run_as_jobs, run_in_pool, say_waiting
from .recipe import Recipe, ResolvedRecipe
from .summary import glue_average, summarize_task

# A learning rate more than this factor outside DEFAULT_LRS is refused: small CPU models want up to ~10x
# more, while 3e5 for 3e-5 trains at 300000 and reports a diverged model's score.
LR_MARGIN = 100


# --- planning and running -------------------------------------------------------------------------------


def check_lr(lr: float) -> None:
    """Raises ConfigError naming ``lr`` when it is not positive, or more than ``LR_MARGIN`` times outside
    the recipe's default grid (``3e5`` typed for ``3e-5``); returns None."""
    low, high = min(DEFAULT_LRS) / LR_MARGIN, max(DEFAULT_LRS) * LR_MARGIN
    if low <= lr <= high:
        return
    mantissa, _, exponent = f"{lr:e}".partition("e")
    flipped = float(f"{mantissa}e{-int(exponent)}") if lr > 0 and math.isfinite(lr) else None
    hint = f"; did you mean {flipped:g}?" if flipped and low <= flipped <= high else ""
    raise ConfigError(
        f"--lrs: learning rate {lr:g} is more than {LR_MARGIN}x outside the recipe's grid "
        f"({min(DEFAULT_LRS):g} to {max(DEFAULT_LRS):g}): expected {low:g} to {high:g}{hint}"
    )


def _check_arguments(cfg: GlueConfig) -> tuple[list[str], dict[str, list[float]]]:
    """Returns (``cfg``'s tasks without duplicates, {task: learning-rate grid}); raises ConfigError on bad
    values."""
    if cfg.seeds < 1:
        raise ConfigError(f"--seeds {cfg.seeds}: expected at least 1")
    if cfg.jobs < 1:
        raise ConfigError(f"--jobs {cfg.jobs}: expected at least 1")
    if cfg.limit is not None and cfg.limit < 1:
        raise ConfigError(f"--limit {cfg.limit}: expected a positive number of rows")
    tasks = list(dict.fromkeys(cfg.tasks or ()))
    if not tasks:
        raise ConfigError("--tasks: no GLUE task given")
    for t in tasks:
        glue_data.spec(t)  # unknown task names fail here, before any loading
    grids = {t: list(dict.fromkeys(float(x) for x in grid)) for t, grid in cfg.grids(tasks).items()}
    for grid in grids.values():
        for lr in grid:
            check_lr(lr)
    return tasks, grids


def plan_points(
    ckpt: ckpt_lib.Checkpoint,
    data: Mapping[str, glue_data.TaskData],
    resolved: Mapping[str, ResolvedRecipe],
    grids: Mapping[str, list[float]],
    seeds: int,
    out_dir: str,
) -> tuple[dict[str, list[dict]], list[Point]]:
    """Returns ({task: results of the points already finished}, the points still to run)."""
    points, results = [], {t: [] for t in grids}
    for t, grid in grids.items():
        for lr in grid:
            for seed in range(seeds):
                key = {
                    "task": t,
                    "lr": lr,
                    "seed": seed,
                    "checkpoint": ckpt.fingerprint,
                    "data": data[t].fingerprint(),
                    "recipe": resolved[t].as_dict(),
                }
                directory = point_dir(out_dir, SWEEP, t, lr, seed)
                done = finished_result(directory, key)
                if done is not None:
                    results[t].append(done)
                else:
                    points.append(Point(t, lr, seed, resolved[t], directory, key))
    return results, points


def encode_tasks(ckpt, data, points) -> dict[tuple[str, int], EncodedTask]:
    """Returns each (task, max_len) of ``points`` encoded once."""
    encoded: dict[tuple[str, int], EncodedTask] = {}
    for p in points:
        if (p.task, p.recipe.max_len) not in encoded:
            encoded[p.task, p.recipe.max_len] = encode_task(data[p.task], ckpt.tokenizer, p.recipe.max_len)
    return encoded


def _point_here(ckpt, encoded, device, progress: bool, point: Point, wait: bool = True) -> dict | None:
    """Returns the result of ``point`` run in this process on ``encoded`` ((task, max_len) -> its encoded
    task); None when another sweep holds the point and ``wait`` is False."""
    enc = encoded[point.task, point.recipe.max_len]
    args = (point.lr, point.seed, point.recipe, point.directory, point.key, device, progress)
    return claim_and_run(point.directory, point.key, wait, functools.partial(run_point, ckpt, enc, *args))


def run_here(ckpt, data, points, results, cfg: GlueConfig) -> None:
    """Runs ``points`` (in ``cfg.jobs`` processes when more than one) on ``cfg.device``, appending each
    result to ``results``; points another sweep holds are waited for at the end
    (``launch.local.run_deferring``). Returns None."""
    if not points:  # all finished: nothing to encode
        return
    bar = progress_bar(total=len(points), enabled=cfg.progress, desc="glue sweep", unit="point")

    def done(_, result: dict) -> None:
        results[result["task"]].append(result)
        bar.update(1)

    if cfg.jobs == 1 or len(points) == 1:
        encoded = encode_tasks(ckpt, data, points)
        args = (ckpt, encoded, cfg.device, cfg.progress)
        here = [LaunchPoint(p.name, _point_here, (*args, p), p.directory, {"wait": False}) for p in points]
        local.run_deferring(here, done, before_waiting=say_waiting)
    else:  # each worker encodes the tasks it trains
        run_in_pool(ckpt, points, cfg, done)
    bar.close()


# --- summarising ----------------------------------------------------------------------------------------


def majority(data: glue_data.TaskData) -> dict[str, Any]:
    """Returns the task's majority-class baseline on its dev rows (``metrics.majority``)."""
    dev = {name: split.labels for name, split in data.dev.items()}
    return glue_metrics.majority(data.spec.name, data.train.labels, dev)


def write_summary(out_dir, ckpt, glue_dir, data, resolved, results, grids, seeds: int) -> dict[str, Any]:
    """Writes ``<out_dir>/glue.json`` from ``results``, keeping the tasks of an earlier summary of the
    same checkpoint that this sweep did not run; returns it."""
    path = os.path.join(out_dir, "glue.json")
    source = os.path.abspath(glue_dir) if glue_dir else glue_data.HUB_DATASET
    tasks_out = {t: summarize_task(t, points, majority(data[t])) for t, points in results.items()}
    recipes = {t: {**resolved[t].as_dict(), "lrs": grids[t], "seeds": seeds} for t in results}
    data_meta = {t: {"source": source, "sha256": d.fingerprint(), "limit": d.limit} for t, d in data.items()}
    earlier = earlier_summary(path, ckpt.fingerprint)
    for t in earlier.get("tasks", {}):
        if t not in tasks_out:
            tasks_out[t] = earlier["tasks"][t]
            recipes[t] = earlier["nfeval"]["recipe"][t]
            data_meta[t] = earlier["nfeval"]["data"][t]
    order = sorted(tasks_out, key=glue_data.TASKS.index)
    out = {
        "nfeval": {
            "provenance": provenance(),
            "model": ckpt_lib.summary(ckpt),
            "recipe": {t: recipes[t] for t in order},
            "data": {t: data_meta[t] for t in order},
        },
        "tasks": {t: tasks_out[t] for t in order},
        "glue_average": glue_average(tasks_out),
    }
    atomic_write_json(path, out)
    return out


def sweep(ckpt: str | ckpt_lib.Checkpoint, cfg: GlueConfig) -> dict[str, Any] | None:
    """Fine-tunes every (task, lr, seed) point of ``cfg`` not yet finished, writes
    ``<cfg.out_dir>/glue.json``; returns it.

    The grid per task is ``cfg.lrs``, else with ``cfg.sweep`` ``DEFAULT_LRS``, else fairseq's recipe
    learning rate of the task. All data is read and checked before any training starts. The summary's GLUE
    average is the mean of the task scores of this sweep's tasks and of those kept from an earlier summary
    of the same checkpoint in ``out_dir``. Concurrent sweeps into one ``out_dir`` never compute a point
    twice (a per-point lock: a point held by another sweep is waited for at the end), and each task's
    summary covers every finished point on disk for the same checkpoint, data and recipe. ``cfg.launch``
    (``--launcher slurm``): the points as Slurm jobs (``pool.run_as_jobs``); the summary then covers the
    tasks with a finished point, and None is returned when there is none yet. ``cfg.limit`` (``--limit``):
    the first N rows of each task's train and dev splits. A learning rate far outside the recipe's grid is
    refused before any work (``check_lr``).
    """
    tasks, grids = _check_arguments(cfg)
    out_dir, glue_dir, launch, recipe = cfg.out_dir, cfg.glue_dir, cfg.launch, cfg.recipe
    if isinstance(ckpt, str):
        ckpt = ckpt_lib.load(ckpt, trust_checkpoint=cfg.trust_checkpoint)
    if ckpt.tokenizer is None:
        raise MissingDataError(f"{ckpt.path}: no tokenizer.json (GLUE needs the checkpoint's tokenizer)")
    cfg = dataclasses.replace(cfg, device=_device(cfg.device, recipe, launch))
    data = {t: glue_data.load(t, glue_dir).limited(cfg.limit) for t in tasks}
    resolved = {t: recipe.resolve(glue_data.spec(t), ckpt.config.max_seq_len, cfg.device) for t in tasks}

    results, points = plan_points(ckpt, data, resolved, grids, cfg.seeds, out_dir)
    total = sum(len(v) for v in results.values()) + len(points)
    print(
        f"nfeval glue: {total} point(s), {total - len(points)} already finished, {len(points)} to run",
        flush=True,
    )
    if launch is not None and launch.on_cluster:
        run_as_jobs(ckpt.path, points, cfg)
    else:
        run_here(ckpt, data, points, results, cfg)
    for t in tasks:  # points finished by concurrent sweeps (or Slurm jobs) into the same folder count too
        same_run = {
            "checkpoint": ckpt.fingerprint,
            "data": data[t].fingerprint(),
            "recipe": resolved[t].as_dict(),
        }
        seen = {(p["lr"], p["seed"]) for p in results[t]}
        results[t] += [p for p in finished_on_disk(out_dir, t, same_run) if (p["lr"], p["seed"]) not in seen]
        grids[t] = sorted({p["lr"] for p in results[t]})
    if launch is not None and launch.on_cluster:  # --no-wait, failed jobs: the tasks with a finished point
        results = {t: r for t, r in results.items() if r}
    return (
        write_summary(out_dir, ckpt, glue_dir, data, resolved, results, grids, cfg.seeds) if results else None
    )


def _device(device: str | None, recipe: Recipe, launch: LaunchOptions | None) -> str:
    """Returns the device the points train on: the given one, else cuda when this machine (or, with
    ``--launcher slurm``, the jobs' machines) has a GPU. ``--dtype auto`` for Slurm jobs needs a GPU here
    to tell whether theirs support bf16 (it is part of each point's key)."""
    on_cluster = launch is not None and launch.on_cluster
    if on_cluster and recipe.dtype == "auto" and not torch.cuda.is_available() and device != "cpu":
        raise ConfigError(
            "--launcher slurm with --dtype auto: this machine has no GPU to tell whether the jobs' GPUs "
            "support bf16; pass --dtype bf16 (A100, H100) or --dtype fp32"
        )
    return device or ("cuda" if torch.cuda.is_available() or on_cluster else "cpu")


def earlier_summary(path: str, fingerprint: str) -> dict:
    """Returns the glue.json at ``path`` when it summarises the same checkpoint, else {}.

    Its tasks that a sweep does not rerun are kept, so tasks run by separate invocations (say MNLI on
    one GPU, the small tasks on another) end up in one summary; each task records its own recipe and grid.
    """
    if not os.path.isfile(path):
        return {}
    summary = load_json(path, hint="delete it to rebuild the summary")
    return summary if summary.get("nfeval", {}).get("model", {}).get("fingerprint") == fingerprint else {}
