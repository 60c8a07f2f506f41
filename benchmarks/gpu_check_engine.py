"""``gpu_check.py``'s checks of the training engine on the device: what every check is given
(``Setup``), a bf16 training step eager and compiled with its MFU, NormFormer's and Pre-LN's compiled
steps at the batch the device wants (``train_mfu``), the model under flash attention only, and the
Trainer's DDP checkpoint and resume; and the small corpus the checks train and score on.

Compiling NormFormer's extra norms needs no converter: ``torch._dynamo.explain`` finds one graph and no
graph break in the NormFormer and the Pre-LN objectives (checked on the CPU)."""

from __future__ import annotations

import datetime
import os
import random
import shutil
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from gpu_check_data import default_data_dir

from nfeval.base.device_memory import free_cached
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
    data_dir: Path = field(default_factory=default_data_dir)  # real data in ../shared/data's layout
    rounds: int = 3  # interleaved rounds of the side-by-side checks
    mfu_batches: tuple[int, ...] = (16, 32)  # train_mfu's candidate batches
    deadline: float | None = None  # time.perf_counter() after which no round or check starts

    def time_for(self, seconds: float) -> bool:
        """Returns whether ``seconds`` more end before the deadline (always, without one)."""
        return self.deadline is None or time.perf_counter() + seconds < self.deadline


class Skipped(Exception):
    """A check that cannot run here (its data is absent): recorded as skipped with the reason, not failed."""


def rounds_within(s: Setup, run_round: Callable[[int], None]) -> int:
    """Runs ``run_round(r)`` for r = 0, 1, … up to ``s.rounds`` times, the first always and each further one
    only while one more round as long as the longest so far ends before the deadline; returns the rounds."""
    longest, r = 0.0, 0
    while r < s.rounds and (r == 0 or s.time_for(longest)):
        t0 = time.perf_counter()
        run_round(r)
        longest, r = max(longest, time.perf_counter() - t0), r + 1
    return r


def peak_bf16(device: torch.device) -> tuple[float, str]:
    """Returns (dense bf16 peak FLOP/s, where it comes from) of the device."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        found = gpu_peak(name, "bf16")
        if found:
            return found[0], f"datasheet ({found[1]})"
    return measure_matmul_flops(device, torch.bfloat16, seconds=0.2), "measured 1024² bf16 matmul"


def make_step(s: Setup, name: str, batch: int, compiled: bool) -> tuple[Callable[[], torch.Tensor], dict]:
    """Returns (one bf16 training step of preset ``name`` on a random batch of ``batch`` × ``s.seq``
    tokens: forward, summed cross-entropy, backward, fused AdamW on a GPU; the step's facts: preset,
    parameters, batch, sequence length, model FLOPs per token)."""
    torch.manual_seed(0)
    cfg = preset(name, max_seq_len=max(s.seq, preset(name).max_seq_len))
    model = Transformer(cfg).to(s.device)
    obj = Objective(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=s.device.type == "cuda")
    backend = "aot_eager" if s.dry_run else "inductor"
    step_fn = torch.compile(obj, backend=backend, dynamic=False) if compiled else obj
    x = torch.randint(0, cfg.vocab_size, (batch, s.seq), device=s.device)
    y = torch.randint(0, cfg.vocab_size, (batch, s.seq), device=s.device)

    def step() -> torch.Tensor:
        with torch.autocast(s.device.type, dtype=torch.bfloat16):
            loss = step_fn(x, y) / y.numel()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    facts = {"preset": name, "parameters": model.num_params(), "batch": batch, "seq_len": s.seq}
    return step, facts | {"flops_per_token": training_flops_per_token(cfg, s.seq)}


def seconds_per_step(step: Callable[[], torch.Tensor], device: torch.device, steps: int) -> float:
    """Returns the mean seconds of ``steps`` calls of ``step``, the device's queue drained before and after;
    raises RuntimeError when the last loss is not finite."""
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    synchronize(device)
    seconds = (time.perf_counter() - t0) / steps
    if not torch.isfinite(loss):
        raise RuntimeError(f"non-finite loss {float(loss)}")
    return seconds


def first_steps(step: Callable[[], torch.Tensor], device: torch.device) -> float:
    """Runs ``step`` twice (compiling, when compiled, and warming up); returns the first one's seconds."""
    t0 = time.perf_counter()
    step()
    synchronize(device)
    first = time.perf_counter() - t0
    step()
    return first


def train_step(s: Setup, compiled: bool) -> dict:
    """Times a bf16 training step of the preset model; returns tokens/s, MFU and the last loss."""
    step, facts = make_step(s, s.model, s.batch, compiled)
    first_s = first_steps(step, s.device)
    step_s = seconds_per_step(step, s.device, s.steps)
    tps = s.batch * s.seq / step_s
    peak, source = peak_bf16(s.device)
    facts["mfu"] = tps * facts.pop("flops_per_token") / peak
    return facts | {
        "first_step_s": first_s,
        "step_ms": step_s * 1e3,
        "tokens_per_s": tps,
        "peak_flops": peak,
        "peak_source": source,
        "loss": float(step()),
    }


def best_batch(s: Setup, name: str) -> tuple[Callable[[], torch.Tensor], dict, dict[str, float | str]]:
    """Compiles preset ``name``'s bf16 step (flash attention only) at each of ``s.mfu_batches``; returns
    (the step of the batch with the most tokens/s, its facts, {batch: tokens/s, or "out of memory"})."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tried: dict[str, float | str] = {}
    best = None
    for batch in s.mfu_batches:
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                step, facts = make_step(s, name, batch, compiled=True)
                first_steps(step, s.device)
                tried[str(batch)] = batch * s.seq / seconds_per_step(step, s.device, s.steps)
        except torch.OutOfMemoryError:
            tried[str(batch)] = "out of memory"
            step = facts = None
            free_cached(s.device)
            continue
        if best is None or tried[str(batch)] > tried[str(best[1]["batch"])]:
            best = (step, facts)
        step = facts = None
        free_cached(s.device)
    if best is None:
        raise RuntimeError(f"{name}: no batch of {s.mfu_batches} fits")
    return best[0], best[1], tried


def train_mfu(s: Setup) -> dict:
    """Times NormFormer's and Pre-LN's compiled bf16 steps (fused AdamW, flash attention only) at the size
    of ``s.model``, each at its best batch of ``s.mfu_batches``, in interleaved rounds; returns per
    architecture the batches tried, the chosen batch, tokens/s (median of the rounds) and MFU against the
    device's dense bf16 peak, and NormFormer's step time over Pre-LN's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    size = s.model.split("-", 1)[1]
    names = {arch: f"{arch}-{size}" for arch in ("normformer", "prenorm")}
    chosen = {arch: best_batch(s, name) for arch, name in names.items()}
    times: dict[str, list[float]] = {arch: [] for arch in names}

    def one_round(r: int) -> None:
        for arch in list(names)[:: 1 if r % 2 == 0 else -1]:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                times[arch].append(seconds_per_step(chosen[arch][0], s.device, s.steps))

    rounds = rounds_within(s, one_round)
    peak, source = peak_bf16(s.device)
    out: dict = {"rounds": rounds, "seq_len": s.seq, "peak_flops": peak, "peak_source": source}
    for arch, (_, facts, tried) in chosen.items():
        step_s = statistics.median(times[arch])
        tps = facts["batch"] * s.seq / step_s
        out |= {f"{arch}_preset": facts["preset"], f"{arch}_parameters": facts["parameters"]}
        out |= {f"{arch}_batches_tried": tried, f"{arch}_batch": facts["batch"]}
        out |= {f"{arch}_step_ms": step_s * 1e3, f"{arch}_tokens_per_s": tps}
        out[f"{arch}_mfu"] = tps * facts["flops_per_token"] / peak
    ratios = [a / b for a, b in zip(times["normformer"], times["prenorm"])]
    out["normformer_over_prenorm_step_time"] = statistics.median(ratios)
    return out


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
