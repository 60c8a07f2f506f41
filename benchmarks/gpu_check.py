"""GPU check: the CUDA paths of a first GPU run and the speed comparisons of issues 26 and 27, each
checked and timed.

    python benchmarks/gpu_check.py [--out benchmarks/gpu_check] [--batch 8] [--seq 2048] [--steps 10]
    python benchmarks/gpu_check.py --checks generate_vs_hf,zeroshot_vs_hflm,glue_vs_trainer
    python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-check   # the same code on CPU, tiny shapes

Checks 1-5 were sized for ≤ 8 minutes on one H100/H200 and 6-8 for a few more, none measured yet: when
one device call (10 minutes at most) may not hold them all, run them as two ``--checks`` calls.

Checks (each reports its time and peak GPU memory; one failing does not stop the others; 1-3 are in
``gpu_check_engine.py``, 4 in ``gpu_check_kill.py``, 5-8 in ``gpu_check_scoring.py``):

1. ``train_step_eager`` / ``train_step_compiled``: a normformer-125M bf16 training step (forward,
   summed cross-entropy, backward, fused AdamW) on a random batch, eager and ``torch.compile``;
   tokens/s and MFU against the datasheet's dense bf16 peak (``nfeval.engine.training.budget.GPU_PEAKS``).
2. ``flash_attention``: the model's forward + backward with only the FLASH_ATTENTION SDPA backend
   allowed (fails if the model's attention cannot use it), and flash vs math attention outputs.
3. ``ddp_checkpoint_resume``: ``nfeval``'s Trainer under a 1-process DDP strategy (NCCL on GPU):
   6 steps with a checkpoint at step 3, then a resume from it; losses and weights compared.
4. ``killed_run_resumes``: ``nfeval train`` (a tiny bf16 run, 40 steps, dropout on) as a child process,
   SIGKILLed once its first checkpoint is on disk and resumed by the same command with ``--resume``;
   its losses and final weights must equal the uninterrupted run's bit for bit (seconds, on a GPU).
5. ``zeroshot_cuda_vs_cpu``: the lm-eval adapter scores the same multiple-choice items with the
   trained checkpoint on the GPU and on the CPU, both fp32; log-likelihoods must agree to 1e-3,
   differing choices, greedy flags and generations are counted.
6. ``generate_vs_hf``: greedy generation of a random 125M-shaped GPT-2 on the device, nfeval (its
   CUDA-graph steps and its eager ones) against HF ``generate`` with its dynamic and its static KV
   cache (which ``generate`` compiles on a GPU), at batch 1 and 16 (``generate_vs_hf.py``): tokens/s,
   ratios, identical rows, the bandwidth limit; and rows the graph steps generate as the eager ones
   do, with early EOS and sampled.
7. ``zeroshot_vs_hflm``: 2,000 loglikelihood requests of a random 125M-shaped HF GPT-2 directory, fp32,
   batch 32, lm-eval's ``HFLM`` against nfeval's adapter (the engine running the GPT-2 weights):
   seconds, ratio, largest log-likelihood difference (must be < 1e-3).
8. ``glue_vs_trainer``: the seven-learning-rate SST-2 sweep (``glue_sweep.py`` defaults, bf16): nfeval
   one point at a time against HF ``Trainer`` in ``group_by_length`` and in random order; seconds,
   ratios, best dev accuracy per side. Real SST-2 when ../shared/data is beside the checkout, else a
   synthetic one (``glue_sweep.synthetic_sst2``).

Writes ``gpu_check.json`` (figures) and ``gpu_check.md`` (a section for benchmarks/RESULTS.md) into
``--out``; exits 1 if any check failed. ``--dry-run`` runs every path on the CPU with tiny shapes
(compile with the ``aot_eager`` backend) so CI knows the script starts.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from gpu_check_engine import Setup, ddp_checkpoint_resume, flash_attention, train_step
from gpu_check_kill import killed_run_resumes
from gpu_check_scoring import generate_vs_hf, glue_vs_trainer, zeroshot_cuda_vs_cpu, zeroshot_vs_hflm

from nfeval.base.artifacts import atomic_write_json, atomic_write_text, provenance


def memory_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def run_check(name: str, fn: Callable[[], dict], s: Setup, results: dict) -> None:
    """Runs one check, recording its status, seconds, peak memory and figures in ``results``."""
    memory_reset(s.device)
    t0 = time.perf_counter()
    try:
        figures, status = fn(), "ok"
    except Exception as e:  # a failing check is a finding, not the end of the script
        figures, status = (
            {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]},
            "failed",
        )
    results[name] = {
        "status": status,
        "seconds": time.perf_counter() - t0,
        "peak_memory_gib": peak_memory_gib(s.device),
        **figures,
    }
    print(
        f"[{status}] {name}: {results[name]['seconds']:.1f} s {figures.get('error', '')}",
        file=sys.stderr,
        flush=True,
    )


def markdown(record: dict, command: str) -> str:
    """Returns the RESULTS.md section: the command, the machine and one row per check."""
    lines = [
        "## GPU check",
        "",
        f"Command: `{command}` — device: {record['device']}, torch {torch.__version__}, "
        f"{record['date']}; total {record['total_s']:.0f} s.",
        "",
        "| check | status | seconds | peak GPU memory (GiB) | figures |",
        "|---|---|---:|---:|---|",
    ]
    skip = {"status", "seconds", "peak_memory_gib", "traceback"}
    for name, r in record["checks"].items():
        figures = ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items() if k not in skip
        )
        mem = f"{r['peak_memory_gib']:.2f}" if r["peak_memory_gib"] is not None else "–"
        lines.append(f"| {name} | {r['status']} | {r['seconds']:.1f} | {mem} | {figures} |")
    return "\n".join(lines) + "\n"


# name -> check(setup); run in this order (zeroshot_cuda_vs_cpu scores ddp_checkpoint_resume's run)
CHECKS: dict[str, Callable[[Setup], dict]] = {
    "train_step_eager": functools.partial(train_step, compiled=False),
    "train_step_compiled": functools.partial(train_step, compiled=True),
    "flash_attention": flash_attention,
    "ddp_checkpoint_resume": ddp_checkpoint_resume,
    "killed_run_resumes": killed_run_resumes,
    "zeroshot_cuda_vs_cpu": zeroshot_cuda_vs_cpu,
    "generate_vs_hf": generate_vs_hf,
    "zeroshot_vs_hflm": zeroshot_vs_hflm,
    "glue_vs_trainer": glue_vs_trainer,
}


def check_names(text: str) -> list[str]:
    """Returns the checks named in the comma-separated ``text``, in ``CHECKS``' order; raises on an
    unknown name or on zeroshot_cuda_vs_cpu without the run it scores."""
    names = text.split(",")
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown check {unknown[0]!r}: expected one of {', '.join(CHECKS)}")
    if "zeroshot_cuda_vs_cpu" in names and "ddp_checkpoint_resume" not in names:
        raise argparse.ArgumentTypeError("zeroshot_cuda_vs_cpu scores ddp_checkpoint_resume's run: add it")
    return [n for n in CHECKS if n in names]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "gpu_check"))
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes: checks that every path starts")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument(
        "--checks",
        type=check_names,
        default=list(CHECKS),
        help=f"comma-separated checks to run (default: all): {', '.join(CHECKS)}",
    )
    args = p.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; run with --dry-run to check the paths on the CPU", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="nfeval-gpu-check-"))
    os.environ["NFEVAL_CACHE"] = str(work / "cache")  # tokenizers and shards of the check stay in scratch
    s = Setup(
        device=torch.device("cpu") if args.dry_run else torch.device("cuda", 0),
        dry_run=args.dry_run,
        model="normformer-tiny" if args.dry_run else "normformer-125M",
        batch=2 if args.dry_run else args.batch,
        seq=32 if args.dry_run else args.seq,
        steps=1 if args.dry_run else args.steps,
        work=work,
    )
    results: dict = {}
    t0 = time.perf_counter()
    for name in args.checks:
        run_check(name, functools.partial(CHECKS[name], s), s, results)
    name = torch.cuda.get_device_name(s.device) if s.device.type == "cuda" else "CPU (dry run)"
    record = {
        "device": name,
        "dry_run": args.dry_run,
        "date": datetime.date.today().isoformat(),
        "total_s": time.perf_counter() - t0,
        "checks": results,
        "provenance": provenance(),
    }
    command = "python benchmarks/gpu_check.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:]))
    atomic_write_json(os.path.join(args.out, "gpu_check.json"), record)
    atomic_write_text(os.path.join(args.out, "gpu_check.md"), markdown(record, command.strip()))
    print(markdown(record, command.strip()))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
