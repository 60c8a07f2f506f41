"""``nfeval train``: compute-matched causal-LM and masked-LM pretraining, resumable, on CPU or GPU.

One loop for one process, DDP or FSDP2 (``torchrun --nproc_per_node N -m nfeval train ... [--fsdp]``);
how the run is spread over processes is the strategy object of ``nfeval.engine.training.parallel``.

Optimisation follows the objective's recipe (``config.RECIPES``; a flag or config field wins):
AdamW (fairseq's Adam decays weights decoupled, on every parameter) with betas (0.9, 0.98), weight
decay 0.01 and eps 1e-8 (fairseq's LM recipe, causal LMs) or 1e-6 on 512-token blocks (RoBERTa's,
masked LMs), no clipping by default, linear warmup then polynomial decay (power 1: linear) to
``end_lr`` over the whole budget. The resolved values are config.json's ``train.recipe``. The
default peak LR is GPT-3's 6e-4 for 125M (the recipe trains NormFormer-125M at 3e-3: ``--lr 3e-3``).

Budgets (``nfeval.engine.training.budget``). A run stops after ``--max-steps``, ``--max-tokens``,
``--max-flops`` or ``--max-seconds`` (the first reached if several are given); the LR schedule spans
exactly that many steps. A time budget is calibrated into a step count at the start of ``run()``.

``wall_s`` counts training steps only (data, forward, backward, optimizer), not validation,
checkpointing or calibration, so equal-time comparisons are fair. FLOPs are model FLOPs
(``training_flops_per_token`` × tokens). MFU = achieved model FLOP/s ÷ peak (``budget.peak_flops``).

Run directory and resume (``nfeval.engine.checkpoints.rundir``). Checkpoints (``checkpoints/step_NNNNNNNN``:
weights, config, tokenizer and ``training_state.pt``, tensors and plain values only, loaded with
``weights_only=True``) are written into a temp folder renamed into place; the final weights are
followed by ``complete.json``, written last. ``--resume`` finishes nothing twice: a complete run
returns its summary, any other continues from the newest *valid* checkpoint (the data position is
the sample count, the LR a function of the step), so a resumed fp32 CPU run reproduces the
uninterrupted run's losses bitwise. A non-finite loss or gradient norm stops the run before any
further checkpoint is written, so the last checkpoint is the last good one. A run folder may be moved
or copied and resumed there; so may its data and tokenizer, given at their new paths: a resume compares
what they hold with what the run read, not their paths (``input_fingerprints``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from ...base.errors import CheckpointError, ConfigError
from ...base.jsonio import load_json
from ..checkpoints import rundir
from . import train_config
from .input_fingerprints import INPUT_PATH_FIELDS, unchanged_inputs
from .out_of_memory import run_within_memory
from .parallel import launched_rank
from .train_config import TrainConfig, fields_with
from .trainer import Trainer

# What a resume may change, from each TrainConfig field's declared rule (train_config.setting).
FIXED = fields_with(train_config.FIXED)
OVERRIDABLE = fields_with(train_config.OVERRIDABLE)
FREE = fields_with(train_config.FREE)


def train(
    cfg: TrainConfig,
    out_dir: str,
    resume: bool = False,
    override_resume: bool = False,
    given: set[str] | None = None,
) -> dict[str, Any]:
    """Trains a model under ``cfg``'s budget into run dir ``out_dir``; returns the run summary
    (out_dir, fingerprint, step, tokens, wall_s, flops, total_steps, val_loss, val_ppl).

    ``resume``: a finished run returns its summary; any other continues from its newest valid
    checkpoint under its saved config. Either way a request that changes a field the run cannot change
    is a ConfigError. ``given`` names the fields the user set (default: those that
    differ from TrainConfig's defaults); changed OVERRIDABLE fields need ``override_resume``.

    The run folder's one writer (rank 0) holds its lock throughout (``rundir.writing``): a second process
    training into it is refused at once. A batch that does not fit on the device is a DeviceMemoryError
    naming the largest that does (``out_of_memory``)."""
    writer = launched_rank() == 0
    with rundir.writing(out_dir, writer):
        if not resume:
            refuse_existing_run(out_dir)
            return run_within_memory(cfg, out_dir, lambda: Trainer(cfg, out_dir))
        cfg = resumed_config(cfg, out_dir, override_resume, given)  # a finished run is checked too
        summary = finished_summary(out_dir)
        if summary is None:
            # deletes what killed writers left, then trains
            return run_within_memory(cfg, out_dir, lambda: Trainer.resume(cfg, out_dir))
        if writer:
            rundir.clean_temp_files(out_dir)  # what a rerun killed at its start left
        return summary


def refuse_existing_run(out_dir: str) -> None:
    """Raises ConfigError when ``out_dir`` already holds a run, saying how to continue or start over."""
    if not any(os.path.exists(os.path.join(out_dir, n)) for n in (rundir.METRICS, rundir.CONFIG)):
        return
    rows = rundir.read_metrics(out_dir)
    state = "finished" if rundir.completion(out_dir) else "unfinished or diverged"
    last = max((r.get("step", 0) for r in rows), default=0)
    raise ConfigError(
        f"{out_dir}: already holds a run; pass --resume to continue it ({state}, last logged step {last}), "
        f"or start over by deleting the folder (rm -r {out_dir}) or choosing another --out"
    )


def changed_fields(saved: TrainConfig, requested: TrainConfig, given: set[str] | None) -> dict[str, tuple]:
    """Returns {field: (saved value, requested value)} for fields the request sets to another value."""
    default = TrainConfig()
    names = (
        given
        if given is not None
        else {n for n in vars(requested) if getattr(requested, n) != getattr(default, n)}
    )
    return {
        n: (getattr(saved, n), getattr(requested, n))
        for n in sorted(names)
        if n in vars(saved) and getattr(requested, n) != getattr(saved, n)
    }


def resumed_config(
    requested: TrainConfig, out_dir: str, override: bool, given: set[str] | None
) -> TrainConfig:
    """Returns the config a resume runs under: the saved one, with FREE fields (and, with ``override``,
    OVERRIDABLE ones) from the request. Input paths (data, tokenizer) may change when they hold what the
    run read (``input_fingerprints``): a moved or copied run or data resumes. Raises ConfigError naming
    any other changed field."""
    path = os.path.join(out_dir, rundir.CONFIG)
    if not os.path.isfile(path):
        return requested  # killed before it wrote anything: a fresh start
    data = load_json(path)
    saved = TrainConfig.from_dict(
        (data.get("train") or {}).get("config") or {}, source=f"{path} field 'train.config'"
    )
    changed = changed_fields(saved, requested, given)
    moved = {n: b for n, (_, b) in changed.items() if n in INPUT_PATH_FIELDS}
    if moved:  # the same files at another path are the same inputs
        moved = unchanged_inputs(saved, out_dir, moved)
        saved = dataclasses.replace(saved, **moved)
        changed = {n: v for n, v in changed.items() if n not in moved}
    fixed = {n: v for n, v in changed.items() if n in FIXED}
    blocked = {n: v for n, v in changed.items() if n in OVERRIDABLE and not override}
    describe = ", ".join(f"{n}: {a!r} -> {b!r}" for n, (a, b) in {**fixed, **blocked}.items())
    if fixed:
        raise ConfigError(
            f"--resume {out_dir}: these fields cannot change on resume ({describe}); start a new run"
        )
    if blocked:
        raise ConfigError(
            f"--resume {out_dir}: the request changes {describe} from the saved run; pass --override-resume "
            "to take the new values (the LR schedule and budget are recomputed), or drop those flags"
        )
    taken = {n: b for n, (_, b) in changed.items() if n in OVERRIDABLE or n in FREE}
    overridden = {n: b for n, b in taken.items() if n in OVERRIDABLE}
    if overridden and launched_rank() == 0:
        print(f"nfeval train: --override-resume: taking {overridden} from the command line", file=sys.stderr)
    return TrainConfig(**{**vars(saved), **taken})


def finished_summary(out_dir: str) -> dict[str, Any] | None:
    """Returns the summary of a run whose completion record exists, else None."""
    record = rundir.completion(out_dir)
    if record is None:
        return None
    try:
        return {"out_dir": out_dir, **{k: record[k] for k in SUMMARY_FIELDS}}
    except KeyError as e:
        raise CheckpointError(f"{os.path.join(out_dir, rundir.COMPLETE)}: missing field {e}") from None


SUMMARY_FIELDS = ("fingerprint", "step", "tokens", "wall_s", "flops", "total_steps", "val_loss", "val_ppl")


# ---------------------------------------------------------------------------------------- CLI
