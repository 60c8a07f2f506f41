"""What a run records about itself: ``config.json``'s non-model blocks and each checkpoint's metadata,
and the writing of the run folder (config and tokenizer, checkpoints, final weights, completion record)."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, Any

import torch

from ..base.artifacts import atomic_write_json, atomic_write_text, hardware, provenance
from . import budget, checkpoint, rundir
from .model import Transformer

if TYPE_CHECKING:
    from .trainer import Trainer


def meta(self: Trainer) -> dict[str, Any]:
    """Returns the trainer's config.json non-model blocks: resolved training config, data, provenance,
    compute.

    Written into ``config.json`` when a run starts and into every checkpoint."""
    train = {
        "config": dataclasses.asdict(self.cfg),
        "recipe": self.recipe,  # the optimizer and block size the run took (the config's None: these)
        "total_steps": self.total_steps,
        "warmup_steps": budget.warmup_steps(self.cfg, self.total_steps),
        "seq_len": self.seq_len,
        "global_batch": self.global_batch,
        "world_size": self.par.world,
        "parallel": self.par.name,
        "device": str(self.par.device),
        "budget": {**self.budget, "calibration": self.calibration},
        "flops_per_token": self.flops_per_token,
        "peak_flops": self.peak,
        "peak_flops_source": self.peak_source,
        "data": {
            "corpus": self.corpus_info,
            "tokens": self.tokens.describe(),
            "tokenizer_vocab": self.tok.get_vocab_size(),
        },
    }
    if self.grad_stats is not None:
        train["grad_stats"] = self.grad_stats.summary()
    compute = {
        "steps": self.step,
        "tokens": self.step * self.tokens_per_step,
        "flops": self.step * self.flops_per_step,
        "wall_s": self.wall_s,
        "device_hours": self.wall_s * self.par.world / 3600,
        "hardware": hardware(),
    }
    return {
        "train": train,
        "provenance": provenance(seed=self.cfg.seed, data_fingerprint=self.tokens.fingerprint),
        "compute": compute,
    }


def cpu_model(trainer: Trainer, state: dict[str, torch.Tensor]) -> Transformer:
    """Returns a CPU Transformer holding ``state`` (what checkpoint.save writes)."""
    if trainer.par.name != "fsdp2" and trainer.par.device.type == "cpu":
        return trainer.model
    with torch.device("meta"):  # no init: it would draw from (and shift) the global RNG
        model = Transformer(trainer.mcfg)
    model.load_state_dict(state, assign=True)
    return model


def prepare_run_dir(trainer: Trainer) -> None:
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


def save_checkpoint(trainer: Trainer) -> None:
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


def finish(trainer: Trainer, val_loss: float) -> dict[str, Any]:
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
        rundir.crash_point("final-save")
        rundir.mark_complete(
            trainer.out_dir,
            {**{k: v for k, v in summary.items() if k != "out_dir"}, "compute": run_meta["compute"]},
        )
    trainer.par.barrier()
    return summary
