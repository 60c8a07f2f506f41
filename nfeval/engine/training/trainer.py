"""The training loop: ``Trainer`` holds one run's model, optimizer, data and counters.

Constructing a Trainer sets everything up and trains nothing; ``Trainer.resume`` builds one from a
run's newest valid checkpoint; ``run()`` calibrates a time budget if needed, trains to the end of the
budget and writes the final weights followed by the completion record.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from tqdm import tqdm

from ...base.errors import ConfigError
from ...base.jsonio import append_jsonl
from ...base.progress import progress_bar
from ..checkpoints import checkpoint, rundir, torch_files
from ..fast import cpu_linear
from ..model.flops import training_flops_per_token
from ..model.model import Transformer
from ..text.data import Batches
from . import budget, run_record
from .grad_stats import GradStatsRecorder
from .objective import Objective, evaluate
from .parallel import Strategy, launched_rank, make_strategy
from .run_inputs import load_data, model_config
from .tensorboard import TensorBoardLog, log_dir
from .train_config import TrainConfig, clip_window, parse_grad_stats, training_recipe


class TrainingDiverged(RuntimeError):
    """The loss or gradient norm became NaN/inf; ``step`` is the last step of the logging interval
    in which it did."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


@dataclass
class Interval:
    """What the steps since the last log line add up to (this process's share of the loss)."""

    loss: torch.Tensor
    norm: torch.Tensor
    steps: int = 0
    wall_s: float = 0.0


class Trainer:
    """One run's model, optimizer, data and counters; ``run()`` trains to the end of the budget.

    ``parallel``: the strategy (default: the one torchrun's environment and the config ask for).

    ``gradient_hooks``: callables ``hook(trainer, step)`` run once per update after the backward
    passes (gradients synced) and before clipping and the optimizer step, e.g. per-layer gradient
    statistics (``--grad-stats``, added by ``run()`` after the time calibration)."""

    def __init__(
        self,
        cfg: TrainConfig,
        out_dir: str,
        weights_from: str | None = None,
        parallel: Strategy | None = None,
    ):
        cfg.validate()
        self.cfg, self.out_dir = cfg, out_dir
        self.par = parallel or make_strategy(cfg.device, cfg.fsdp, bf16=cfg.dtype == "bf16")
        if cfg.dtype == "bf16" and self.par.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("dtype=bf16: this GPU does not support bfloat16")
        self._setup_data(weights_from)
        self._setup_model(weights_from)
        self.peak, self.peak_source = budget.peak_flops(cfg, self.par.device)
        self.step, self.wall_s, self.calibration = 0, 0.0, None
        self.interval = self.new_interval()
        self.gradient_hooks: list[Callable[[Trainer, int], None]] = []
        self.grad_stats = None
        self.tensorboard = None  # a TensorBoardLog on rank 0 while run() runs with cfg.tensorboard

    def _setup_data(self, resumed_from: str | None) -> None:
        cfg, par = self.cfg, self.par
        self.corpus_info, self.tokens, self.tok = load_data(cfg, par)
        tok_vocab = self.tok.get_vocab_size()
        self.mcfg = model_config(cfg, tok_vocab, self.tokens.specials.pad)
        self.recipe = training_recipe(cfg, self.mcfg.max_seq_len)
        if cfg.warmup is None:  # the recipe's warm-up, resolved once (so config.json records it)
            self.cfg = cfg = replace(cfg, warmup=self.recipe["warmup"])
        self.flops_per_token = training_flops_per_token(self.mcfg, self.recipe["seq_len"])
        if resumed_from:
            self._continue_as_started(resumed_from)
        self.seq_len = self.recipe["seq_len"]
        if self.seq_len > self.mcfg.max_seq_len:
            raise ConfigError(
                f"seq_len={self.seq_len} exceeds the model's max_seq_len={self.mcfg.max_seq_len}"
            )
        self.global_batch = cfg.batch_size * cfg.grad_accum * par.world
        self.tokens_per_step = self.global_batch * self.seq_len
        self.flops_per_step = self.flops_per_token * self.tokens_per_step
        self.total_steps, self.budget = budget.steps_for_budget(
            cfg, self.tokens_per_step, self.flops_per_step
        )
        if self.total_steps is not None:
            budget.check_warmup(cfg, self.total_steps)
        args = (self.seq_len, self.mcfg.objective, self.tokens.specials, tok_vocab, cfg.seed)
        self.train_batches = Batches(self.tokens.train, *args)
        self.valid_batches = Batches(self.tokens.valid, *args, shuffle=False)
        self.n_eval = min(cfg.eval_samples, self.valid_batches.blocks.n_blocks)

    def _continue_as_started(self, checkpoint_dir: str) -> None:
        """Takes the model config, block size and FLOPs per token that ``checkpoint_dir`` records, so a
        run saved under an older recipe or FLOP count resumes as it started."""
        self.mcfg, meta = checkpoint.read_config(checkpoint_dir)
        started = meta.get("train") or {}
        self.recipe["seq_len"] = started.get("seq_len", self.recipe["seq_len"])
        self.flops_per_token = started.get("flops_per_token", self.flops_per_token)

    def _setup_model(self, weights_from: str | None) -> None:
        cfg, par = self.cfg, self.par
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        self.model = cpu_linear.convert(Transformer(self.mcfg))
        if weights_from:
            self.model.load_state_dict(checkpoint.load_state(weights_from, self.model))
        self.model.to(par.device)
        torch.manual_seed(cfg.seed + par.rank)  # dropout differs across ranks
        self.wrapped = par.wrap(Objective(self.model))  # DDP/FSDP hooks live here; self.obj is what is called
        self.obj = torch.compile(self.wrapped) if cfg.compile else self.wrapped
        r = self.recipe
        betas = (r["beta1"], r["beta2"])
        self.opt = par.make_optimizer(
            self.wrapped, lr=cfg.lr, betas=betas, eps=r["eps"], weight_decay=r["weight_decay"]
        )

    @classmethod
    def resume(cls, cfg: TrainConfig, out_dir: str, parallel: Strategy | None = None) -> Trainer:
        """Returns a Trainer at the newest valid checkpoint of ``out_dir`` (a fresh one if there is none);
        says on stderr which checkpoint it resumes from and which newer ones it skipped."""
        path, skipped = rundir.newest_valid_checkpoint(out_dir, thorough=True)
        notes = [
            *skipped,
            f"resuming from {path}" if path else f"{out_dir}: no valid checkpoint; starting at step 0",
        ]
        if launched_rank() == 0:
            for note in notes:
                print(f"nfeval train: {note}", file=sys.stderr)
        trainer = cls(cfg, out_dir, weights_from=path, parallel=parallel)
        if path:
            trainer.restore(torch_files.load(os.path.join(path, rundir.STATE)))
        return trainer

    def restore(self, state: dict[str, Any]) -> None:
        """Restores optimizer, RNG and counters saved by ``save_checkpoint``."""
        self.par.load_optimizer_state(self.wrapped, self.opt, state["optimizer"])
        self.par.set_rng_state(state["rng"])
        self.step, self.wall_s, self.calibration = state["step"], state["wall_s"], state.get("calibration")
        # The open log interval: each process takes back its own share of the loss sum, so the next line
        # sums in the same order as an uninterrupted run's, bitwise, even when log and checkpoint
        # intervals do not line up. (Older checkpoints hold the reduced sum: counted once, on rank 0.)
        saved = state["interval"]
        loss = saved["losses"][self.par.rank] if "losses" in saved else saved["loss"] * float(self.par.main)
        self.interval = Interval(
            loss=loss.to(self.par.device),
            norm=saved["norm"].to(self.par.device),
            steps=saved["steps"],
            wall_s=saved["wall_s"],
        )
        if self.cfg.max_seconds is not None and self.calibration:
            self.total_steps = budget.steps_for_time(self.cfg, self.budget, self.calibration["step_s"])
        elif self.total_steps is None:
            self.total_steps = state["total_steps"]

    # -- budget -------------------------------------------------------------------------------

    def calibrate(self) -> None:
        """Sets total_steps from the time budget: times real steps, then restores the initial state."""
        par = self.par
        model_state = {k: v.clone() for k, v in self.wrapped.state_dict().items()}

        def step(i: int) -> None:
            self.train_step(i, lr=0.0)
            budget.synchronize(par.device)

        def all_done(done: bool) -> bool:  # every process must run the same number of (collective) steps
            return bool(par.all_reduce(torch.tensor(float(done), device=par.device), op="min").item())

        with torch.random.fork_rng(devices=[par.device] if par.device.type == "cuda" else []):
            times, n_warmup = budget.time_steps(self.cfg, step, all_done)
        step_s = budget.median_step_s(times, n_warmup)
        step_s = float(par.all_reduce(torch.tensor(step_s, device=par.device), op="max"))
        self.wrapped.load_state_dict(model_state)
        self.opt.state.clear()  # AdamW state is created lazily by the first step
        self.total_steps = budget.steps_for_time(self.cfg, self.budget, step_s)
        self.calibration = budget.calibration_record(times, n_warmup, step_s)

    # -- one step -----------------------------------------------------------------------------

    def train_step(self, step: int, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs one optimizer update on the global batch of ``step``; returns (this process's share of
        the loss, the global gradient norm) as tensors."""
        cfg, par = self.cfg, self.par
        B = cfg.batch_size
        x_all, y_all = self.train_batches.get(
            step * self.global_batch, self.global_batch, (cfg.seed << 32) + step
        )
        n_targets = max(int((y_all != -100).sum()), 1)
        for group in self.opt.param_groups:
            group["lr"] = lr
        loss = torch.zeros((), device=par.device)
        for micro in range(cfg.grad_accum):
            rows = slice((micro * par.world + par.rank) * B, (micro * par.world + par.rank + 1) * B)
            x, y = (
                x_all[rows].to(par.device, non_blocking=True),
                y_all[rows].to(par.device, non_blocking=True),
            )
            sync = par.grad_sync(self.wrapped, enabled=micro == cfg.grad_accum - 1)
            with sync, torch.autocast(par.device.type, dtype=torch.bfloat16, enabled=cfg.dtype == "bf16"):
                summed = self.obj(x, y)
                # DDP/FSDP average gradients over ranks; scaling by world makes it the global-batch mean.
                (summed * (par.world / n_targets)).backward()
            loss += summed.detach() / n_targets
        for hook in self.gradient_hooks:  # gradients are final here: synced, not yet clipped or applied
            hook(self, step)
        params = [p for p in self.wrapped.parameters() if p.grad is not None]
        if cfg.clip_grad > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_grad)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self.opt.step()
        self.model.normalize_weights()  # nGPT's weights back on the hypersphere; a no-op for the others
        self.opt.zero_grad(set_to_none=True)
        return loss, norm

    # -- records ------------------------------------------------------------------------------

    def counters(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "tokens": self.step * self.tokens_per_step,
            "wall_s": self.wall_s,
            "flops": self.step * self.flops_per_step,
        }

    def log(self, row: dict[str, Any], bar: tqdm) -> None:
        if not self.par.main:
            return
        append_jsonl(os.path.join(self.out_dir, rundir.METRICS), row)
        if self.tensorboard is not None:
            self.tensorboard.write(row)
        if row["kind"] == "train":
            text = (
                f"step {row['step']:>6} | loss {row['loss']:.4f} | lr {row['lr']:.2e} | gnorm "
                f"{row['grad_norm']:.3f} | {row['tokens_per_s']:,.0f} tok/s | mfu {row['mfu']:.1%}"
            )
        else:
            text = f"step {row['step']:>6} | val loss {row['val_loss']:.4f} | val ppl {row['val_ppl']:.2f}"
        (bar.write if self.cfg.progress else print)(text)

    def validate_now(self, bar: tqdm) -> float:
        # Eager module: a compiled one would recompile for no_grad and the last partial batch.
        val = evaluate(
            self.wrapped,
            self.valid_batches,
            self.n_eval,
            self.cfg.batch_size,
            self.cfg.seed,
            self.cfg.dtype == "bf16",
            self.par,
        )
        self.log({"kind": "val", **self.counters(), "val_loss": val, "val_ppl": math.exp(min(val, 700))}, bar)
        return val

    # -- the run ------------------------------------------------------------------------------

    def new_interval(self) -> Interval:
        return Interval(torch.zeros((), device=self.par.device), torch.zeros((), device=self.par.device))

    def close_interval(self, iv: Interval, elapsed: float) -> tuple[float, float]:
        """Adds ``elapsed`` to the clocks; returns the interval's (mean global loss, mean grad norm).
        Raises TrainingDiverged (on every process alike) when either is not finite."""
        self.wall_s += elapsed
        iv.wall_s += elapsed
        # A reduced copy: the interval's own sum stays this process's share until the next log line.
        mean_loss = float(self.par.all_reduce(iv.loss)) / iv.steps
        mean_norm = float(iv.norm) / iv.steps
        if not (math.isfinite(mean_loss) and math.isfinite(mean_norm)):
            last, _ = rundir.newest_valid_checkpoint(self.out_dir)
            raise TrainingDiverged(
                f"non-finite {'loss' if not math.isfinite(mean_loss) else 'gradient norm'} within steps "
                f"{self.step - iv.steps + 1}-{self.step} (loss {mean_loss}, grad norm {mean_norm}); stopped. "
                f"Last good checkpoint: {last or 'none (no checkpoint was written yet)'}. "
                "Try a lower --lr, --clip-grad or fp32.",
                step=self.step,
            )
        return mean_loss, mean_norm

    def log_train(self, iv: Interval, lr: float, mean_loss: float, mean_norm: float, bar: tqdm) -> None:
        tps = iv.steps * self.tokens_per_step / max(iv.wall_s, 1e-9)
        mfu = tps * self.flops_per_token / (self.peak * self.par.world)
        self.log(
            {
                "kind": "train",
                **self.counters(),
                "lr": lr,
                "loss": mean_loss,
                "grad_norm": mean_norm,
                "tokens_per_s": tps,
                "mfu": mfu,
            },
            bar,
        )
        bar.set_postfix(loss=f"{mean_loss:.3f}")

    def run(self) -> dict[str, Any]:
        """Trains to the end of the budget; returns the run summary. Raises TrainingDiverged on NaN/inf."""
        cfg, par = self.cfg, self.par
        if cfg.max_seconds is not None and self.calibration is None:
            self.calibrate()
        if cfg.grad_stats and self.grad_stats is None:
            self.add_grad_stats()
        run_record.prepare_run_dir(self)
        if cfg.tensorboard is not None and par.main:
            self.tensorboard = TensorBoardLog(log_dir(cfg.tensorboard, self.out_dir), first_step=self.step)
        bar = progress_bar(
            total=self.total_steps,
            initial=self.step,
            enabled=par.main and cfg.progress,
            desc="train",
            unit="step",
        )
        val_loss, t0 = None, time.perf_counter()
        while self.step < self.total_steps:
            lr = budget.lr_at(cfg, self.step, self.total_steps)
            loss, norm = self.train_step(self.step, lr)
            iv = self.interval
            iv.loss += loss
            iv.norm += norm.to(iv.norm.dtype)
            iv.steps += 1
            self.step += 1
            bar.update(1)
            end = self.step == self.total_steps
            due = {
                k: end or (every > 0 and self.step % every == 0)
                for k, every in (
                    ("log", cfg.log_interval),
                    ("eval", cfg.eval_interval),
                    ("ckpt", cfg.ckpt_interval),
                )
            }
            if not any(due.values()):
                continue
            budget.synchronize(par.device)
            mean_loss, mean_norm = self.close_interval(iv, time.perf_counter() - t0)
            if due["log"]:
                self.log_train(iv, lr, mean_loss, mean_norm, bar)
                self.interval = self.new_interval()
            if due["eval"]:
                val_loss = self.validate_now(bar)
            if due["ckpt"] and not end:
                run_record.save_checkpoint(self)
            t0 = time.perf_counter()
        bar.close()
        try:
            return run_record.finish(self, val_loss if val_loss is not None else self.validate_now(bar))
        finally:
            if self.tensorboard is not None:
                self.tensorboard.close()
                self.tensorboard = None

    def add_grad_stats(self) -> None:
        """Records per-layer gradient statistics over ``cfg.grad_stats``'s window (clipped to the run)."""
        window = clip_window(parse_grad_stats(self.cfg.grad_stats), self.total_steps)
        self.grad_stats = GradStatsRecorder(self.model, window, self.out_dir, write=self.par.main)
        self.gradient_hooks.append(record_grad_stats)


def record_grad_stats(trainer: Trainer, step: int) -> None:
    """Gradient hook: records update ``step + 1``'s statistics, also to TensorBoard when it is on."""
    values = trainer.grad_stats.record(step + 1)
    if values is not None and trainer.tensorboard is not None:
        trainer.tensorboard.write_grad_stats(step + 1, values)
