"""``gpu_check.py``'s checks of the training engine on the device (checks 1-3 of its docstring): what
every check is given (``Setup``), a bf16 training step eager and compiled with its MFU, the model under
flash attention only, and the Trainer's DDP checkpoint and resume; and the small corpus the checks train
and score on."""

from __future__ import annotations

import datetime
import os
import random
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from nfeval.engine.checkpoints import rundir
from nfeval.engine.model.config import preset
from nfeval.engine.model.flops import training_flops_per_token
from nfeval.engine.model.model import Transformer
from nfeval.engine.training.budget import gpu_peak, measure_matmul_flops, synchronize
from nfeval.engine.training.objective import Objective


@dataclass
class Setup:
    """What every check is given: the device, whether this is the dry run, the shapes, a scratch folder."""

    device: torch.device
    dry_run: bool
    model: str  # preset of the throughput and flash checks
    batch: int
    seq: int
    steps: int
    work: Path  # scratch folder (corpus, runs, caches)


def peak_bf16(device: torch.device) -> tuple[float, str]:
    """Returns (dense bf16 peak FLOP/s, where it comes from) of the device."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        found = gpu_peak(name, "bf16")
        if found:
            return found[0], f"datasheet ({found[1]})"
    return measure_matmul_flops(device, torch.bfloat16, seconds=0.2), "measured 1024² bf16 matmul"


def train_step(s: Setup, compiled: bool) -> dict:
    """Times a bf16 training step of the preset model; returns tokens/s, MFU and the last loss."""
    torch.manual_seed(0)
    cfg = preset(s.model, max_seq_len=max(s.seq, preset(s.model).max_seq_len))
    model = Transformer(cfg).to(s.device)
    obj = Objective(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=s.device.type == "cuda")
    step_fn = torch.compile(obj, backend="aot_eager" if s.dry_run else "inductor") if compiled else obj
    x = torch.randint(0, cfg.vocab_size, (s.batch, s.seq), device=s.device)
    y = torch.randint(0, cfg.vocab_size, (s.batch, s.seq), device=s.device)

    def step() -> torch.Tensor:
        with torch.autocast(s.device.type, dtype=torch.bfloat16):
            loss = step_fn(x, y) / y.numel()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.perf_counter()
    step()
    synchronize(s.device)
    first_s = time.perf_counter() - t0
    step()
    synchronize(s.device)
    t0 = time.perf_counter()
    for _ in range(s.steps):
        loss = step()
    synchronize(s.device)
    step_s = (time.perf_counter() - t0) / s.steps
    if not torch.isfinite(loss):
        raise RuntimeError(f"non-finite loss {float(loss)}")
    tps = s.batch * s.seq / step_s
    peak, source = peak_bf16(s.device)
    flops = training_flops_per_token(cfg, s.seq)
    return {
        "preset": s.model,
        "parameters": model.num_params(),
        "batch": s.batch,
        "seq_len": s.seq,
        "first_step_s": first_s,
        "step_ms": step_s * 1e3,
        "tokens_per_s": tps,
        "mfu": tps * flops / peak,
        "peak_flops": peak,
        "peak_source": source,
        "loss": float(loss),
    }


def flash_attention(s: Setup) -> dict:
    """Runs the model with only flash attention allowed; compares flash and math attention outputs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    cfg = preset(s.model, max_seq_len=max(s.seq, preset(s.model).max_seq_len))
    obj = Objective(Transformer(cfg).to(s.device))
    x = torch.randint(0, cfg.vocab_size, (2, s.seq), device=s.device)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), torch.autocast(s.device.type, dtype=torch.bfloat16):
        obj(x, x).backward()  # raises "No available kernel" if flash cannot run this attention
    synchronize(s.device)
    q, k, v = (
        torch.randn(2, cfg.n_head, s.seq, cfg.head_dim, device=s.device, dtype=torch.bfloat16) for _ in "qkv"
    )
    outputs = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        with sdpa_kernel([backend]):
            outputs[backend] = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True
            ).float()
    diff = float((outputs[SDPBackend.FLASH_ATTENTION] - outputs[SDPBackend.MATH]).abs().max())
    if diff > 0.05:
        raise RuntimeError(f"flash and math attention differ by {diff}")
    return {"model_forward_backward_with_flash_only": True, "flash_vs_math_max_abs_diff": diff}


def write_corpus(path: Path, n_docs: int = 300) -> str:
    """Writes a small synthetic text corpus (documents separated by blank lines); returns its path."""
    rng = random.Random(0)
    words = [
        "the",
        "model",
        "learns",
        "a",
        "norm",
        "layer",
        "scales",
        "each",
        "head",
        "and",
        "residual",
        "gain",
        "while",
        "training",
        "tokens",
        "flow",
        "through",
        "blocks",
        "of",
        "attention",
    ]
    docs = [
        "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + "." for _ in range(5))
        for _ in range(n_docs)
    ]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ddp_checkpoint_resume(s: Setup) -> dict:
    """Trains 6 steps under a 1-process DDP strategy with a checkpoint at 3, resumes from it, compares."""
    from nfeval.engine.training.parallel import DDP
    from nfeval.engine.training.train_config import TrainConfig
    from nfeval.engine.training.trainer import Trainer

    backend = "nccl" if s.device.type == "cuda" else "gloo"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group(backend, rank=0, world_size=1, timeout=datetime.timedelta(minutes=5))
    try:
        par = DDP(s.device, 0, 1, bf16=s.device.type == "cuda")
        cfg = TrainConfig(
            preset="normformer-tiny",
            train_data=write_corpus(s.work / "corpus.txt"),
            vocab_size=512,
            batch_size=4,
            seq_len=64,
            max_steps=6,
            log_interval=1,
            eval_interval=3,
            eval_samples=8,
            ckpt_interval=3,
            peak_flops=1e12,
            progress=False,
            lr=3e-3,
            device=str(s.device),
            dtype="bf16" if s.device.type == "cuda" else "fp32",
        )
        full_dir, resumed_dir = s.work / "ddp-full", s.work / "ddp-resumed"
        full = Trainer(cfg, str(full_dir), parallel=par).run()
        shutil.copytree(full_dir, resumed_dir)
        for name in (rundir.COMPLETE, rundir.WEIGHTS):  # as if killed during the final save
            (resumed_dir / name).unlink()
        resumed = Trainer.resume(cfg, str(resumed_dir), parallel=par).run()
    finally:
        dist.destroy_process_group()
    a, b = (rundir.read_metrics(str(d), "train") for d in (full_dir, resumed_dir))
    diff = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    if [r["step"] for r in b] != list(range(1, 7)) or resumed["step"] != 6 or diff > 1e-2:
        raise RuntimeError(f"resume differs: steps {[r['step'] for r in b]}, max loss difference {diff}")
    return {
        "backend": backend,
        "steps": 6,
        "losses_bitwise": diff == 0.0,
        "max_loss_diff": diff,
        "fingerprints_equal": full["fingerprint"] == resumed["fingerprint"],
    }
