"""``nfeval train``: compute-matched causal-LM and masked-LM pretraining, resumable, on CPU or GPU.

One loop for one process, DDP or FSDP2 (``torchrun --nproc_per_node N -m nfeval train ... [--fsdp]``).

Optimisation follows fairseq's NormFormer recipe: AdamW (fairseq's Adam decays weights decoupled,
on every parameter) with betas (0.9, 0.98), eps 1e-8, weight decay 0.01, no clipping by default,
linear warmup then polynomial decay (power 1: linear) to ``end_lr`` over the whole budget. The
default peak LR is GPT-3's 6e-4 for 125M (the recipe trains NormFormer-125M at 3e-3: ``--lr 3e-3``).

Budgets. A run stops after ``--max-steps``, ``--max-tokens``, ``--max-flops`` or ``--max-seconds``
(the first reached if several are given); the LR schedule spans exactly that many steps. Tokens and
FLOPs give a step count directly (floor of budget / per-step amount). For a time budget the step
count is decided before training, as the paper's equal-GPU-time runs: real training steps are run on
the real model, optimizer and data, first untimed warm-up steps (at least 2, and at least 2% of the
budget up to 5 s: allocation, kernel selection and compilation settle there; a first run in a fresh
process measured up to 2x slow over its first second on CPU), then timed steps (at least
``calibration_steps``, and at least 3% of the budget up to 10 s); the median timed step is the step
time, the model, optimizer and RNG are restored to their initial state, and the run gets
floor(max_seconds / step time) steps. Under
torchrun the slowest process's step time is used. The calibration is recorded in config.json
(``train.budget``), and the run's real ``wall_s`` is reported beside the budget.

``wall_s`` counts training steps only (data, forward, backward, optimizer), not validation,
checkpointing or calibration, so equal-time comparisons are fair. FLOPs are model FLOPs
(``training_flops_per_token`` × tokens). MFU = achieved model FLOP/s ÷ peak: the peak is
``--peak-flops`` if given, else a table of dense peaks for known GPUs (NVIDIA datasheets), else a
measured matmul peak (1024² matmuls in the run's dtype, measured once per machine and cached).

Resume. Checkpoints (``checkpoints/step_NNNNNNNN``: weights, config, tokenizer and
``training_state.pt`` with optimizer state, RNG states, step, samples consumed, counters) are
written atomically. ``--resume`` continues from the newest one: the data position is the sample
count (see ``nfeval.engine.data``), the LR a function of the step, so a resumed fp32 CPU run reproduces the
uninterrupted run's losses bitwise. A non-finite loss or gradient norm stops the run before any
further checkpoint is written, so the last checkpoint is the last good one.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import math
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import jsonlines
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from ..artifacts import (
    atomic_write_json,
    atomic_write_text,
    cache_dir,
    hardware,
    hardware_key,
    provenance,
)
from . import checkpoint
from .config import ModelConfig, load_json, preset
from .data import (
    Batches,
    TokenData,
    default_corpus,
    get_tokenizer,
    load_hf_corpus,
    load_text_corpus,
    token_shards,
)
from .model import Transformer, training_flops_per_token
from .train_config import DTYPES, TrainConfig, config_from_args, parse_set  # noqa: F401  (re-exported)

METRICS = "metrics.jsonl"
STATE = "training_state.pt"
CALIBRATION_WARMUP = 2  # untimed steps before timing: allocation, autotuning, torch.compile's first graphs
# Calibration also lasts a share of the budget (capped), so a run's first-second slowness cannot bias it.
CALIBRATION_WARMUP_SHARE, CALIBRATION_WARMUP_CAP_S = 0.02, 5.0
CALIBRATION_TIMED_SHARE, CALIBRATION_TIMED_CAP_S = 0.03, 10.0
# Dense peak FLOP/s per GPU (NVIDIA datasheets; SXM parts); fp32 is the non-tensor-core rate.
GPU_PEAKS = {
    "H200": {"bf16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
    "L4": {"bf16": 121e12, "fp32": 30.3e12},
}


class TrainingDiverged(RuntimeError):
    """The loss or gradient norm became NaN/inf."""


# ---------------------------------------------------------------------------------------- setup


def load_data(cfg: TrainConfig, default_vocab: int) -> tuple[Any, TokenData, Any]:
    """Returns (corpus, token shards, tokenizer) for the config's data source."""
    if cfg.train_data:
        corpus = load_text_corpus(cfg.train_data, cfg.valid_data)
    elif cfg.hf_dataset:
        corpus = load_hf_corpus(cfg.hf_dataset, cfg.hf_config, cfg.text_column)
    else:
        corpus = default_corpus()
    tok = get_tokenizer(cfg.tokenizer, corpus, cfg.vocab_size or default_vocab)
    return corpus, token_shards(corpus, tok), tok


def model_config(cfg: TrainConfig, tok_vocab: int, pad_id: int) -> ModelConfig:
    """Returns the model config: the preset, the tokenizer's vocab (rounded up to 64) and pad id, overrides."""
    fields = {"vocab_size": -(-tok_vocab // 64) * 64, "pad_token_id": pad_id}
    if cfg.objective:
        fields["objective"] = cfg.objective
    fields.update(cfg.model)
    mcfg = preset(cfg.preset, **fields)
    if mcfg.vocab_size < tok_vocab:
        raise ValueError(
            f"model vocab_size={mcfg.vocab_size} is smaller than the tokenizer's {tok_vocab} tokens"
        )
    return mcfg


def warmup_steps(cfg: TrainConfig, total_steps: int) -> int:
    """Returns the number of warmup steps (``warmup`` is steps if >= 1, else a fraction of the run)."""
    return (
        int(cfg.warmup)
        if cfg.warmup >= 1
        else max(1, round(cfg.warmup * total_steps))
        if cfg.warmup > 0
        else 0
    )


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
            raise ValueError(
                f"impossible budget: {name}={getattr(cfg, name)!r} is less than one step "
                f"({tokens_per_step} tokens, {flops_per_step:.3g} FLOPs per step)"
            )
    record = {"tokens_per_step": tokens_per_step, "flops_per_step": flops_per_step, "steps_by_budget": limits}
    return (min(limits.values()) if limits else None), record


def check_warmup(cfg: TrainConfig, total_steps: int) -> None:
    """Raises ValueError when warmup does not leave room for decay."""
    if warmup_steps(cfg, total_steps) >= total_steps and cfg.warmup >= 1:
        raise ValueError(
            f"impossible budget: warmup={cfg.warmup:g} steps is not shorter than the run ({total_steps} steps)"
        )


def peak_flops(cfg: TrainConfig, device: torch.device) -> tuple[float, str]:
    """Returns (peak FLOP/s of one device in the run's dtype, where the number comes from)."""
    if cfg.peak_flops:
        return float(cfg.peak_flops), "configured"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, peaks in GPU_PEAKS.items():
            if key in name:
                return peaks[cfg.dtype], f"datasheet ({key})"
    path = os.path.join(cache_dir(), "peak_flops.json")
    key = f"{hardware_key(hardware())}|{device.type}|{cfg.dtype}"
    known = load_json(path) if os.path.isfile(path) else {}
    if key not in known:
        known[key] = measure_matmul_flops(device, torch.bfloat16 if cfg.dtype == "bf16" else torch.float32)
        atomic_write_json(path, known)
    return float(known[key]), "measured matmul peak (cached)"


def measure_matmul_flops(
    device: torch.device, dtype: torch.dtype, n: int = 1024, seconds: float = 0.5
) -> float:
    """Returns the FLOP/s of repeated n×n matmuls on ``device`` (a practical peak for MFU)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    iters, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        iters += 1
        if iters % 8 == 0:
            _sync(device)
    _sync(device)
    return 2.0 * n**3 * iters / (time.perf_counter() - t0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def on(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(requested: str) -> Dist:
    """Returns rank/world/device; under torchrun (WORLD_SIZE > 1) joins the process group (gloo on CPU, NCCL on GPU)."""
    want_cuda = requested.startswith("cuda") or (requested == "auto" and torch.cuda.is_available())
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={requested!r}: CUDA is not available on this machine")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist(
            device=torch.device(
                requested if requested.startswith("cuda") else ("cuda" if want_cuda else "cpu")
            )
        )
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if want_cuda else torch.device("cpu")
    if want_cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if want_cuda else "gloo")
    return Dist(rank=dist.get_rank(), world=world, device=device)


class Objective(nn.Module):
    """The model plus its loss in one forward, so DDP, FSDP2 and torch.compile wrap a single call.

    Returns the summed cross-entropy over targets != -100 (the caller divides by the global count).
    """

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        hidden = self.model.encode(idx)
        if self.model.cfg.causal:  # every position is a target: no gather, static shapes
            logits = self.model.lm_logits(hidden)
            return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
        keep = targets != -100
        logits = self.model.lm_logits(hidden[keep])
        return nn.functional.cross_entropy(logits, targets[keep], reduction="sum")


def wrap(model: Transformer, cfg: TrainConfig, d: Dist) -> nn.Module:
    """Returns the Objective around ``model`` (already on its device), under DDP or FSDP2 when distributed."""
    obj = Objective(model)
    if d.on and cfg.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(d.device.type, (d.world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(obj, mesh=mesh)
    elif d.on:
        obj = nn.parallel.DistributedDataParallel(
            obj, device_ids=[d.device.index] if d.device.type == "cuda" else None
        )
    return obj


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Returns AdamW with the config's hyperparameters (fused kernels when available, not under FSDP)."""
    kwargs = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay)
    if not cfg.fsdp:
        try:
            return torch.optim.AdamW(model.parameters(), fused=True, **kwargs)
        except (RuntimeError, ValueError):
            pass
    return torch.optim.AdamW(model.parameters(), **kwargs)


# ------------------------------------------------------------------------------- state handling


def full_model_state(model: Transformer, cfg: TrainConfig, d: Dist) -> dict[str, torch.Tensor]:
    """Returns the full (unsharded) model state dict on CPU; collective under FSDP."""
    if d.on and cfg.fsdp:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        state = model.state_dict()
    return {k: v.detach().cpu() for k, v in state.items()}


def optimizer_state(obj: nn.Module, opt: torch.optim.Optimizer, cfg: TrainConfig, d: Dist) -> dict[str, Any]:
    """Returns the optimizer state to save (full, on rank 0, under FSDP; collective there)."""
    if d.on and cfg.fsdp:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        return get_optimizer_state_dict(
            obj, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    return opt.state_dict()


def load_optimizer_state(
    obj: nn.Module, opt: torch.optim.Optimizer, state: dict[str, Any], cfg: TrainConfig, d: Dist
) -> None:
    """Restores optimizer state saved by ``optimizer_state``."""
    if d.on and cfg.fsdp:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        set_optimizer_state_dict(obj, opt, state, options=StateDictOptions(full_state_dict=True))
    else:
        opt.load_state_dict(state)


def rng_state(d: Dist) -> list[dict[str, Any]]:
    """Returns every process's RNG states (rank order)."""
    mine = {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    if not d.on:
        return [mine]
    everyone: list[Any] = [None] * d.world
    dist.all_gather_object(everyone, mine)
    return everyone


def set_rng_state(states: list[dict[str, Any]], d: Dist) -> None:
    """Restores this process's RNG states from ``rng_state``'s list."""
    if len(states) != d.world:
        raise ValueError(
            f"checkpoint was written by {len(states)} process(es); resume with the same number (now {d.world})"
        )
    mine = states[d.rank]
    torch.set_rng_state(mine["torch"])
    if mine["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(mine["cuda"])


def latest_checkpoint(out_dir: str) -> str | None:
    """Returns the newest complete ``checkpoints/step_*`` folder of a run, or None."""
    folder = os.path.join(out_dir, "checkpoints")
    if not os.path.isdir(folder):
        return None
    done = sorted(
        n
        for n in os.listdir(folder)
        if n.startswith("step_") and os.path.isfile(os.path.join(folder, n, STATE))
    )
    return os.path.join(folder, done[-1]) if done else None


def truncate_metrics(path: str, last_step: int) -> None:
    """Drops metrics lines logged after ``last_step`` (by a run killed after its last checkpoint)."""
    if not os.path.isfile(path):
        return
    with jsonlines.open(path) as reader:
        keep = [row for row in reader.iter(skip_invalid=True) if row.get("step", 0) <= last_step]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in keep))


# ------------------------------------------------------------------------------------ the loop


def evaluate(
    obj: nn.Module, batches: Batches, n: int, batch_size: int, cfg: TrainConfig, device: torch.device
) -> float:
    """Returns the mean validation loss over the first ``n`` validation samples (the same on every rank).

    The samples and their MLM masks are drawn at once, so they do not depend on the batch size.
    """
    obj.eval()
    x_all, y_all = batches.get(0, n, mask_seed=cfg.seed)
    total, count = torch.zeros((), device=device, dtype=torch.float64), max(int((y_all != -100).sum()), 1)
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.dtype == "bf16"):
        for start in range(0, n, batch_size):
            x, y = x_all[start : start + batch_size], y_all[start : start + batch_size]
            total += obj(x.to(device), y.to(device)).double()
    obj.train()
    return float(total) / count


class Trainer:
    """Holds one run's model, optimizer, data and counters; ``run()`` trains to the end of the budget."""

    def __init__(self, cfg: TrainConfig, out_dir: str, resume: bool = False):
        self.out_dir, self.resume_from = out_dir, None
        if resume:
            self.resume_from = latest_checkpoint(out_dir)
            saved = os.path.join(out_dir, checkpoint.CONFIG)
            if os.path.isfile(saved):  # the run's own config wins over what the command line says now
                cfg = TrainConfig.from_dict(
                    load_json(saved)["train"]["config"], source=f"{saved} field 'train.config'"
                )
        elif os.path.exists(os.path.join(out_dir, METRICS)) or os.path.exists(
            os.path.join(out_dir, checkpoint.CONFIG)
        ):
            raise ValueError(
                f"{out_dir}: already holds a run; pass --resume to continue it or choose another --out"
            )
        cfg.validate()
        self.cfg = cfg
        self.d = init_distributed(cfg.device)
        d = self.d
        if cfg.dtype == "bf16" and d.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError("dtype=bf16: this GPU does not support bfloat16")

        base = preset(cfg.preset)
        if d.main:  # rank 0 fills the caches first, the others then read them
            self.corpus, self.tokens, self.tok = load_data(cfg, base.vocab_size)
        if d.on:
            dist.barrier()
        if not d.main:
            self.corpus, self.tokens, self.tok = load_data(cfg, base.vocab_size)
        self.mcfg = model_config(cfg, self.tok.get_vocab_size(), self.tokens.specials.pad)
        self.seq_len = cfg.seq_len or self.mcfg.max_seq_len
        if self.seq_len > self.mcfg.max_seq_len:
            raise ValueError(
                f"seq_len={self.seq_len} exceeds the model's max_seq_len={self.mcfg.max_seq_len}"
            )
        self.global_batch = cfg.batch_size * cfg.grad_accum * d.world
        self.tokens_per_step = self.global_batch * self.seq_len
        self.flops_per_token = training_flops_per_token(self.mcfg, self.seq_len)
        self.flops_per_step = self.flops_per_token * self.tokens_per_step
        self.total_steps, self.budget = steps_for_budget(cfg, self.tokens_per_step, self.flops_per_step)
        if self.total_steps is not None:
            check_warmup(cfg, self.total_steps)
        tok_vocab = self.tok.get_vocab_size()
        self.train_batches = Batches(
            self.tokens.train, self.seq_len, self.mcfg.objective, self.tokens.specials, tok_vocab, cfg.seed
        )
        self.valid_batches = Batches(
            self.tokens.valid,
            self.seq_len,
            self.mcfg.objective,
            self.tokens.specials,
            tok_vocab,
            cfg.seed,
            shuffle=False,
        )
        self.n_eval = min(cfg.eval_samples, self.valid_batches.blocks.n_blocks)

        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        self.model = Transformer(self.mcfg)
        if self.resume_from:
            self.model.load_state_dict(checkpoint.load_state(self.resume_from, self.model))
        self.model.to(d.device)
        torch.manual_seed(cfg.seed + d.rank)  # dropout differs across ranks
        self.wrapped = wrap(self.model, cfg, d)  # DDP/FSDP hooks live here; self.obj is what is called
        self.obj = torch.compile(self.wrapped) if cfg.compile else self.wrapped
        self.opt = make_optimizer(self.wrapped, cfg)
        self.peak, self.peak_source = peak_flops(cfg, d.device)
        self.step, self.wall_s, self.calibration = 0, 0.0, None
        if self.resume_from:
            state = torch.load(os.path.join(self.resume_from, STATE), map_location="cpu", weights_only=False)
            load_optimizer_state(self.wrapped, self.opt, state["optimizer"], cfg, d)
            set_rng_state(state["rng"], d)
            self.step, self.wall_s, self.total_steps = state["step"], state["wall_s"], state["total_steps"]
            self.calibration = state.get("calibration")
        elif self.total_steps is None or cfg.max_seconds is not None:
            self.calibrate()

    # -- budget -------------------------------------------------------------------------------

    def calibrate(self) -> None:
        """Sets total_steps from the time budget: times real steps, then restores the initial state."""
        cfg, d = self.cfg, self.d
        model_state = {k: v.clone() for k, v in self.wrapped.state_dict().items()}
        warmup_s = min(CALIBRATION_WARMUP_SHARE * cfg.max_seconds, CALIBRATION_WARMUP_CAP_S)
        timed_s = min(CALIBRATION_TIMED_SHARE * cfg.max_seconds, CALIBRATION_TIMED_CAP_S)
        times: list[float] = []
        n_warmup = None  # steps in the warm-up phase, known once it ends
        with torch.random.fork_rng(
            devices=[d.device] if d.device.type == "cuda" else []
        ):  # RNG restored on exit
            while True:
                t0 = time.perf_counter()
                self.train_step(len(times), lr=0.0)
                _sync(d.device)
                times.append(time.perf_counter() - t0)
                if n_warmup is None and len(times) >= CALIBRATION_WARMUP and sum(times) >= warmup_s:
                    n_warmup = len(times)
                done = (
                    n_warmup is not None
                    and len(times) - n_warmup >= cfg.calibration_steps
                    and sum(times[n_warmup:]) >= timed_s
                )
                if d.on:  # every process must run the same number of (collective) steps
                    flag = torch.tensor(float(done), device=d.device)
                    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
                    done = bool(flag.item())
                if done:
                    break
        step_s = statistics.median(times[n_warmup:])
        if d.on:
            t = torch.tensor(step_s, device=d.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            step_s = float(t)
        self.wrapped.load_state_dict(model_state)
        self.opt.state.clear()  # AdamW state is created lazily by the first step
        by_time = int(cfg.max_seconds // step_s)
        if by_time < 1:
            raise ValueError(
                f"impossible budget: max_seconds={cfg.max_seconds} is less than one step ({step_s:.3g} s per step)"
            )
        self.budget["steps_by_budget"]["max_seconds"] = by_time
        self.total_steps = min(self.budget["steps_by_budget"].values())
        check_warmup(cfg, self.total_steps)
        self.calibration = {
            "method": "median time of real steps after untimed warm-up steps; model, optimizer and RNG restored afterwards",
            "steps_warmup": n_warmup,
            "steps_timed": len(times) - n_warmup,
            "step_s": step_s,
            "step_times_s": times,
        }

    # -- one step -----------------------------------------------------------------------------

    def train_step(self, step: int, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs one optimizer update on the global batch of ``step``; returns (loss, grad norm) tensors."""
        cfg, d = self.cfg, self.d
        B = cfg.batch_size
        x_all, y_all = self.train_batches.get(
            step * self.global_batch, self.global_batch, mask_seed=(cfg.seed << 32) + step
        )
        n_targets = max(int((y_all != -100).sum()), 1)
        for group in self.opt.param_groups:
            group["lr"] = lr
        loss = torch.zeros((), device=d.device)
        for micro in range(cfg.grad_accum):
            rows = slice((micro * d.world + d.rank) * B, (micro * d.world + d.rank + 1) * B)
            x, y = x_all[rows].to(d.device, non_blocking=True), y_all[rows].to(d.device, non_blocking=True)
            last = micro == cfg.grad_accum - 1
            sync = contextlib.nullcontext()
            if d.on and not last and isinstance(self.wrapped, nn.parallel.DistributedDataParallel):
                sync = self.wrapped.no_sync()
            elif d.on and cfg.fsdp:
                self.wrapped.set_requires_gradient_sync(last)
            with sync, torch.autocast(d.device.type, dtype=torch.bfloat16, enabled=cfg.dtype == "bf16"):
                summed = self.obj(x, y)
                # DDP/FSDP average gradients over ranks; scaling by world makes it the global-batch mean.
                (summed * (d.world / n_targets)).backward()
            loss += summed.detach() / n_targets
        params = [p for p in self.wrapped.parameters() if p.grad is not None]
        if cfg.clip_grad > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_grad)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss, norm

    # -- the run ------------------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        """Returns config.json's non-model blocks: resolved training config, data, provenance, compute."""
        train = {
            "config": dataclasses.asdict(self.cfg),
            "total_steps": self.total_steps,
            "warmup_steps": warmup_steps(self.cfg, self.total_steps),
            "seq_len": self.seq_len,
            "global_batch": self.global_batch,
            "world_size": self.d.world,
            "device": str(self.d.device),
            "budget": {**self.budget, "calibration": self.calibration},
            "flops_per_token": self.flops_per_token,
            "peak_flops": self.peak,
            "peak_flops_source": self.peak_source,
            "data": {
                "corpus": self.corpus.describe(),
                "tokens": self.tokens.describe(),
                "tokenizer_vocab": self.tok.get_vocab_size(),
            },
        }
        compute = {
            "steps": self.step,
            "tokens": self.step * self.tokens_per_step,
            "flops": self.step * self.flops_per_step,
            "wall_s": self.wall_s,
            "device_hours": self.wall_s * self.d.world / 3600,
            "hardware": hardware(),
        }
        return {
            "train": train,
            "provenance": provenance(seed=self.cfg.seed, data_fingerprint=self.tokens.fingerprint),
            "compute": compute,
        }

    def save_checkpoint(self) -> None:
        """Writes ``checkpoints/step_N`` atomically (a temp folder renamed into place)."""
        d = self.d
        state = full_model_state(self.model, self.cfg, d)
        opt_state = optimizer_state(self.wrapped, self.opt, self.cfg, d)
        rng = rng_state(d)
        if d.main:
            name = f"step_{self.step:08d}"
            final = os.path.join(self.out_dir, "checkpoints", name)
            tmp = os.path.join(self.out_dir, "checkpoints", f".tmp-{name}")
            shutil.rmtree(tmp, ignore_errors=True)
            checkpoint.save(tmp, self.cpu_model(state), self.tok, self.meta())
            torch.save(
                {
                    "step": self.step,
                    "samples": self.step * self.global_batch,
                    "wall_s": self.wall_s,
                    "total_steps": self.total_steps,
                    "calibration": self.calibration,
                    "optimizer": opt_state,
                    "rng": rng,
                },
                os.path.join(tmp, STATE),
            )
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        if d.on:
            dist.barrier()

    def cpu_model(self, state: dict[str, torch.Tensor]) -> Transformer:
        """Returns a CPU Transformer holding ``state`` (what checkpoint.save writes)."""
        if not (self.d.on and self.cfg.fsdp) and self.d.device.type == "cpu":
            return self.model
        with torch.device("meta"):  # no init: it would draw from (and shift) the global RNG
            model = Transformer(self.mcfg)
        model.load_state_dict(state, assign=True)
        return model

    def log(self, row: dict[str, Any], bar: tqdm) -> None:
        if not self.d.main:
            return
        with jsonlines.open(os.path.join(self.out_dir, METRICS), mode="a", flush=True) as w:
            w.write(row)
        if row["kind"] == "train":
            text = f"step {row['step']:>6} | loss {row['loss']:.4f} | lr {row['lr']:.2e} | gnorm {row['grad_norm']:.3f} | {row['tokens_per_s']:,.0f} tok/s | mfu {row['mfu']:.1%}"
        else:
            text = f"step {row['step']:>6} | val loss {row['val_loss']:.4f} | val ppl {row['val_ppl']:.2f}"
        (bar.write if self.cfg.progress else print)(text)

    def validate_now(self, bar: tqdm) -> float:
        # Eager module: a compiled one would recompile for no_grad and the last partial batch.
        val = evaluate(
            self.wrapped, self.valid_batches, self.n_eval, self.cfg.batch_size, self.cfg, self.d.device
        )
        self.log({"kind": "val", **self.counters(), "val_loss": val, "val_ppl": math.exp(min(val, 700))}, bar)
        return val

    def counters(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "tokens": self.step * self.tokens_per_step,
            "wall_s": self.wall_s,
            "flops": self.step * self.flops_per_step,
        }

    def run(self) -> dict[str, Any]:
        """Trains to the end of the budget; returns the run summary. Raises TrainingDiverged on NaN/inf."""
        cfg, d = self.cfg, self.d
        if d.main:
            os.makedirs(self.out_dir, exist_ok=True)
            truncate_metrics(os.path.join(self.out_dir, METRICS), self.step)
            for stale in glob.glob(
                os.path.join(self.out_dir, "checkpoints", ".tmp-*")
            ):  # from a killed checkpoint write
                shutil.rmtree(stale, ignore_errors=True)
            atomic_write_json(
                os.path.join(self.out_dir, checkpoint.CONFIG), {**self.meta(), "model": self.mcfg.to_dict()}
            )
            atomic_write_text(os.path.join(self.out_dir, checkpoint.TOKENIZER), self.tok.to_str(pretty=True))
        bar = tqdm(
            total=self.total_steps,
            initial=self.step,
            disable=not (d.main and cfg.progress),
            desc="train",
            unit="step",
        )
        iv_loss, iv_norm, iv_steps, iv_wall = (
            torch.zeros((), device=d.device),
            torch.zeros((), device=d.device),
            0,
            0.0,
        )
        val_loss = None
        t0 = time.perf_counter()
        while self.step < self.total_steps:
            lr = lr_at(cfg, self.step, self.total_steps)
            loss, norm = self.train_step(self.step, lr)
            iv_loss += loss
            iv_norm += norm.to(iv_norm.dtype)
            iv_steps += 1
            self.step += 1
            bar.update(1)
            end = self.step == self.total_steps

            def boundary(every: int) -> bool:
                return end or (every > 0 and self.step % every == 0)

            if not (boundary(cfg.log_interval) or boundary(cfg.eval_interval) or boundary(cfg.ckpt_interval)):
                continue
            _sync(d.device)
            elapsed = time.perf_counter() - t0
            self.wall_s += elapsed
            iv_wall += elapsed
            if d.on:
                dist.all_reduce(iv_loss)
            mean_loss, mean_norm = float(iv_loss) / iv_steps, float(iv_norm) / iv_steps
            if not (math.isfinite(mean_loss) and math.isfinite(mean_norm)):
                last = latest_checkpoint(self.out_dir)
                raise TrainingDiverged(
                    f"non-finite {'loss' if not math.isfinite(mean_loss) else 'gradient norm'} within steps "
                    f"{self.step - iv_steps + 1}-{self.step} (loss {mean_loss}, grad norm {mean_norm}); stopped. "
                    f"Last good checkpoint: {last or 'none (no checkpoint was written yet)'}. Try a lower --lr, --clip-grad or fp32."
                )
            if boundary(cfg.log_interval):
                tps = iv_steps * self.tokens_per_step / max(iv_wall, 1e-9)
                self.log(
                    {
                        "kind": "train",
                        **self.counters(),
                        "lr": lr,
                        "loss": mean_loss,
                        "grad_norm": mean_norm,
                        "tokens_per_s": tps,
                        "mfu": tps * self.flops_per_token / (self.peak * d.world),
                    },
                    bar,
                )
                bar.set_postfix(loss=f"{mean_loss:.3f}")
                iv_loss.zero_(), iv_norm.zero_()
                iv_steps, iv_wall = 0, 0.0
            if boundary(cfg.eval_interval):
                val_loss = self.validate_now(bar)
            if boundary(cfg.ckpt_interval) and not end:
                self.save_checkpoint()
            t0 = time.perf_counter()
        bar.close()
        if val_loss is None:
            val_loss = self.validate_now(bar)
        state = full_model_state(self.model, cfg, d)
        fingerprint = None
        if d.main:
            fingerprint = checkpoint.save(self.out_dir, self.cpu_model(state), self.tok, self.meta())
        summary = {
            "out_dir": self.out_dir,
            "fingerprint": fingerprint,
            **self.counters(),
            "total_steps": self.total_steps,
            "val_loss": val_loss,
            "val_ppl": math.exp(min(val_loss, 700)),
        }
        if d.on:
            dist.barrier()
        return summary


def train(cfg: TrainConfig, out_dir: str, resume: bool = False) -> dict[str, Any]:
    """Trains a model under ``cfg``'s budget into run dir ``out_dir``; returns the run summary
    (out_dir, fingerprint, step, tokens, wall_s, flops, total_steps, val_loss, val_ppl)."""
    if resume:
        summary = finished_summary(out_dir)
        if summary is not None:
            return summary
    return Trainer(cfg, out_dir, resume).run()


def finished_summary(out_dir: str) -> dict[str, Any] | None:
    """Returns the summary of a run that already finished (final weights written), else None."""
    path = os.path.join(out_dir, checkpoint.CONFIG)
    if not os.path.isfile(os.path.join(out_dir, checkpoint.WEIGHTS)) or not os.path.isfile(path):
        return None
    meta = load_json(path)
    compute = meta["compute"]
    vals = []
    if os.path.isfile(os.path.join(out_dir, METRICS)):
        with jsonlines.open(os.path.join(out_dir, METRICS)) as reader:
            vals = [r for r in reader if r.get("kind") == "val"]
    val = vals[-1]["val_loss"] if vals else None
    return {
        "out_dir": out_dir,
        "fingerprint": meta.get("fingerprint"),
        "step": compute["steps"],
        **{k: compute[k] for k in ("tokens", "wall_s", "flops")},
        "total_steps": meta["train"]["total_steps"],
        "val_loss": val,
        "val_ppl": math.exp(min(val, 700)) if val is not None else None,
    }


# ---------------------------------------------------------------------------------------- CLI

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--config", help="JSON file of TrainConfig fields; command-line flags override it")
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its newest checkpoint"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="model config override, e.g. dropout=0.1 (repeatable)",
    )
    p.add_argument(
        "--preset", help="model preset, e.g. normformer-125M, prenorm-tiny (default normformer-tiny)"
    )
    p.add_argument("--objective", choices=["clm", "mlm"])
    p.add_argument("--train-data", help="text file or folder (documents separated by blank lines)")
    p.add_argument(
        "--valid-data", help="validation text file or folder (default: last 5%% of the training documents)"
    )
    p.add_argument("--hf-dataset", help="Hugging Face dataset name (needs the hub or a local cache)")
    p.add_argument("--hf-config")
    p.add_argument("--text-column")
    p.add_argument(
        "--tokenizer",
        help="tokenizer.json or a folder with GPT-2's encoder.json + vocab.bpe (default: train a BPE)",
    )
    p.add_argument("--vocab-size", type=int, help="BPE vocabulary size when training a tokenizer")
    for name in (
        "batch_size",
        "seq_len",
        "grad_accum",
        "max_steps",
        "calibration_steps",
        "log_interval",
        "eval_interval",
        "eval_samples",
        "ckpt_interval",
        "seed",
    ):
        p.add_argument("--" + name.replace("_", "-"), type=int)
    for name in (
        "max_tokens",
        "max_flops",
        "max_seconds",
        "lr",
        "warmup",
        "end_lr",
        "lr_power",
        "beta1",
        "beta2",
        "eps",
        "weight_decay",
        "clip_grad",
        "peak_flops",
    ):
        p.add_argument("--" + name.replace("_", "-"), type=float)
    p.add_argument("--dtype", choices=DTYPES)
    p.add_argument("--device", help="auto (default), cpu or cuda")
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--fsdp", action="store_true", default=None, help="shard with FSDP2 under torchrun")
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", default=None, help="no progress bar"
    )


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    try:
        summary = train(cfg, args.out, resume=args.resume)
    except TrainingDiverged as e:
        print(f"nfeval train: {e}", file=sys.stderr)
        return 3
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(summary, indent=2))
    return 0
