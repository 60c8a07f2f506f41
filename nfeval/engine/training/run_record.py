"""What a run records about itself: ``config.json``'s non-model blocks and each checkpoint's metadata,
and the writing of the run folder (config and tokenizer, checkpoints, final weights, completion record)."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Protocol

import torch

from ...base.artifacts import atomic_write_json, atomic_write_text, hardware, provenance
from ..checkpoints import checkpoint, rundir
from ..fast import cpu_linear, denormals
from ..model.config import ModelConfig
from ..model.model import Transformer
from . import budget, recipe
from .grad_stats import GradStatsRecorder
from .parallel import Strategy
from .train_config import TrainConfig


class TrainingRun(Protocol):
    """What this module reads of a run in progress (``trainer.Trainer`` is one)."""

    cfg: TrainConfig
    mcfg: ModelConfig
    recipe: dict[str, Any]
    out_dir: str
    par: Strategy
    model: torch.nn.Module
    wrapped: torch.nn.Module
    opt: torch.optim.Optimizer
    tok: Any  # a tokenizers.Tokenizer
    tokens: Any  # the training token stream (data.TokenStream)
    corpus_info: dict[str, Any]
    grad_stats: GradStatsRecorder | None
    interval: Any  # trainer.Interval: the steps since the last log line
    budget: dict[str, Any]
    calibration: dict[str, Any] | None
    step: int
    total_steps: int
    seq_len: int
    global_batch: int
    tokens_per_step: int
    flops_per_token: float
    flops_per_step: float
    peak: float
    peak_source: str
    wall_s: float

    def counters(self) -> dict[str, Any]: ...


def meta(run: TrainingRun) -> dict[str, Any]:
    """Returns the trainer's config.json non-model blocks: resolved training config, data, the recipe
    (``engine.training.recipe``), provenance, compute.

    Written into ``config.json`` when a run starts and into every checkpoint."""
    train = {
        "config": dataclasses.asdict(run.cfg),
        "recipe": run.recipe,  # the optimizer and block size the run took (the config's None: these)
        "total_steps": run.total_steps,
        "warmup_steps": budget.warmup_steps(run.cfg, run.total_steps),
        "seq_len": run.seq_len,
        "global_batch": run.global_batch,
        "world_size": run.par.world,
        "parallel": run.par.name,
        "device": str(run.par.device),
        "budget": {**run.budget, "calibration": run.calibration},
        "flops_per_token": run.flops_per_token,
        "peak_flops": run.peak,
        "peak_flops_source": run.peak_source,
        "data": {
            "corpus": run.corpus_info,
            "tokens": run.tokens.describe(),
            "tokenizer_vocab": run.tok.get_vocab_size(),
        },
    }
    if run.grad_stats is not None:
        train["grad_stats"] = run.grad_stats.summary()
    compute = {
        "steps": run.step,
        "tokens": run.step * run.tokens_per_step,
        "flops": run.step * run.flops_per_step,
        "wall_s": run.wall_s,
        "device_hours": run.wall_s * run.par.world / 3600,
        "hardware": {
            **hardware(),
            "cpu_linear_kernel": cpu_linear.describe(),
            "cpu_flush_denormals": denormals.flushing(),
        },
    }
    return {
        "train": train,
        # the whole recipe (init to precision) in one record, so runs can be checked to share it
        "recipe": recipe.record(run.mcfg.to_dict(), train["config"], run.recipe),
        "provenance": provenance(seed=run.cfg.seed, data_fingerprint=run.tokens.fingerprint),
        "compute": compute,
    }


def cpu_model(trainer: TrainingRun, state: dict[str, torch.Tensor]) -> Transformer:
    """Returns a CPU Transformer holding ``state`` (what checkpoint.save writes)."""
    if trainer.par.name != "fsdp2" and trainer.par.device.type == "cpu":
        return trainer.model
    with torch.device("meta"):  # no init: it would draw from (and shift) the global RNG
        model = Transformer(trainer.mcfg)
    model.load_state_dict(state, assign=True)
    return model


def prepare_run_dir(trainer: TrainingRun) -> None:
    """Rank 0: drops metrics after the resumed step and stale temp files; writes config and tokenizer."""
    if not trainer.par.main:
        return
    os.makedirs(trainer.out_dir, exist_ok=True)
    rundir.truncate_metrics(trainer.out_dir, trainer.step)
    rundir.clean_temp_files(trainer.out_dir)
    if os.path.exists(os.path.join(trainer.out_dir, rundir.COMPLETE)):  # a stale record: this run is redone
        os.remove(os.path.join(trainer.out_dir, rundir.COMPLETE))
    atomic_write_json(
        os.path.join(trainer.out_dir, rundir.CONFIG), {**meta(trainer), "model": trainer.mcfg.to_dict()}
    )
    atomic_write_text(os.path.join(trainer.out_dir, rundir.TOKENIZER), trainer.tok.to_str(pretty=True))


def save_checkpoint(trainer: TrainingRun) -> None:
    """Writes ``checkpoints/step_N`` atomically (a temp folder renamed into place)."""
    par = trainer.par
    state = par.model_state(trainer.model)
    opt_state = par.optimizer_state(trainer.wrapped, trainer.opt)
    rng = par.rng_state()
    iv = trainer.interval
    interval = {
        "losses": par.all_gather_object(iv.loss.cpu()),  # each process's share, in rank order
        "norm": iv.norm.cpu(),
        "steps": iv.steps,
        "wall_s": iv.wall_s,
    }
    if par.main:
        training_state = {
            "step": trainer.step,
            "samples": trainer.step * trainer.global_batch,
            "wall_s": trainer.wall_s,
            "total_steps": trainer.total_steps,
            "calibration": trainer.calibration,
            "optimizer": opt_state,
            "rng": rng,
            "interval": interval,
        }
        rundir.write_checkpoint(
            trainer.out_dir,
            trainer.step,
            lambda folder: checkpoint.save(folder, cpu_model(trainer, state), trainer.tok, meta(trainer)),
            training_state,
        )
    par.barrier()


def finish(trainer: TrainingRun, val_loss: float) -> dict[str, Any]:
    """Writes the final weights, then the completion record (last); returns the run summary."""
    state = trainer.par.model_state(trainer.model)
    summary = {
        "out_dir": trainer.out_dir,
        "fingerprint": None,
        **trainer.counters(),
        "total_steps": trainer.total_steps,
        "val_loss": val_loss,
        "val_ppl": math.exp(min(val_loss, 700)),
    }
    if trainer.par.main:
        run_meta = meta(trainer)
        model = cpu_model(trainer, state)
        summary["fingerprint"] = checkpoint.save(trainer.out_dir, model, trainer.tok, run_meta)
        rundir.mark_complete(
            trainer.out_dir,
            {**{k: v for k, v in summary.items() if k != "out_dir"}, "compute": run_meta["compute"]},
        )
    trainer.par.barrier()
    return summary
