"""A batch that does not fit: training that runs out of device memory ends in one line naming the batch,
the device and the largest batch that fits, found by trying forward and backward steps at halving batch
sizes on the same device, and leaves no half-written run behind.

``run_within_memory`` wraps one training run (``train.train`` and through it every pipeline's runs).
A run that saved no checkpoint leaves an empty folder, so the same command with a smaller batch starts
afresh; one that did keeps its checkpoints, and the line says how to go on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...base.device_memory import free_cached, halving_search
from ...base.errors import DeviceMemoryError
from ..checkpoints import rundir
from .grad_stats import GRAD_STATS
from .parallel import launched_rank
from .train_config import TrainConfig
from .trainer import Trainer


def run_within_memory(cfg: TrainConfig, out_dir: str, make: Callable[[], Trainer]) -> dict[str, Any]:
    """Returns ``make()``'s trainer's run summary; raises DeviceMemoryError (one line: the batch, the
    device, the largest batch that fits) when the device runs out of memory while it builds or trains."""
    trainer = None
    try:
        trainer = make()
        return trainer.run()
    except torch.OutOfMemoryError:
        pass  # probed below, outside the handler: its traceback holds the failed step's tensors
    fits = None if trainer is None else largest_batch(trainer)
    kept = rundir.newest_valid_checkpoint(out_dir)[0] is not None
    if not kept and launched_rank() == 0:
        rundir.discard_unstarted(out_dir, (GRAD_STATS,))
    raise DeviceMemoryError(did_not_fit(cfg, out_dir, trainer, fits, kept))


def largest_batch(trainer: Trainer) -> int | None:
    """Returns the largest of batch_size / 2, / 4, …, 1 whose forward and backward steps (and optimizer
    update) fit on the trainer's device, 0 when none does; None when it was not probed (several
    processes: one trying alone would wait on the others' collectives)."""
    if trainer.par.world > 1:
        return None
    return halving_search(lambda rows: try_rows(trainer, rows), trainer.cfg.batch_size, lambda: free(trainer))


def try_rows(trainer: Trainer, rows: int) -> None:
    """Runs one forward and backward step on ``rows`` training sequences on the trainer's device, and an
    optimizer update at LR 0 (it allocates the optimizer's state, which every real step holds)."""
    cfg, par = trainer.cfg, trainer.par
    x, y = trainer.train_batches.get(0, rows, cfg.seed)
    with torch.autocast(par.device.type, dtype=torch.bfloat16, enabled=cfg.dtype == "bf16"):
        summed = trainer.wrapped(x.to(par.device), y.to(par.device))  # eager: compiling is not the question
    summed.backward()
    for group in trainer.opt.param_groups:
        group["lr"] = 0.0
    trainer.opt.step()
    free(trainer)


def free(trainer: Trainer) -> None:
    """Frees what the last step left on the trainer's device: its gradients, and CUDA's cached blocks."""
    trainer.opt.zero_grad(set_to_none=True)
    free_cached(trainer.par.device)


def did_not_fit(cfg: TrainConfig, out_dir: str, trainer: Trainer | None, fits: int | None, kept: bool) -> str:
    """Returns the one line that says which batch did not fit where, what fits and how to go on."""
    if trainer is None:
        return f"{out_dir}: the model does not fit in the memory of {cfg.device}; train a smaller model"
    seq, device = trainer.seq_len, trainer.par.device
    accum = f", grad_accum {cfg.grad_accum}" if cfg.grad_accum > 1 else ""
    said = (
        f"{out_dir}: a batch of {cfg.batch_size} × {seq} tokens (batch_size × seq_len{accum}) does not fit "
        f"in the memory of {device}"
    )
    if fits is None:
        return f"{said} (not probed under {trainer.par.world} processes); try a smaller --batch-size"
    if fits == 0:
        return f"{said}, nor does a batch of 1 sequence: the model and its optimizer state need more memory"
    sequences = cfg.batch_size * cfg.grad_accum
    flags = f"--batch-size {fits}"
    if sequences % fits == 0:
        flags += f" --grad-accum {sequences // fits}"  # the same global batch, in more micro-steps
    found = f"{said}; the largest that fits is {fits} × {seq} (forward and backward tried at halving sizes)"
    if kept:
        return (
            f"{found}. Its checkpoints hold batch_size {cfg.batch_size}, which a resume keeps: resume on a "
            f"device with more memory, or start a new run with {flags}"
        )
    return f"{found}: rerun with {flags} (the run folder holds nothing of this try)"
