"""GPU check: the CUDA paths of the engine, and nfeval against its peers on the device, each checked and
timed, side by side in one process, written into one gpu_check.json (+ a gpu_check.md section).

    python benchmarks/gpu_check_data.py          # once, here: ../shared/data's files into .gpu_data
    python benchmarks/gpu_check.py --out $OUT --minutes 8.5 --checks call1   # device call 1
    python benchmarks/gpu_check.py --out $OUT --minutes 8.5 --checks call2   # device call 2
    python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-check   # the same code on CPU, tiny shapes

The two device calls (``carry: [".gpu_data"]`` beside what the environment needs; ``timeout_s`` 540):

- ``call1``: train_step_eager, train_step_compiled, flash_attention, ddp_checkpoint_resume,
  killed_run_resumes, zeroshot_cuda_vs_cpu, train_mfu, runs_sharing_device, out_of_memory_exits,
  generate_vs_hf, zeroshot_vs_hflm;
- ``call2``: zeroshot_full_vs_hflm, glue_vs_trainer.

Sizing (``ESTIMATE_S``, seconds on one H100/H200). These are estimates, not measurements. The train
steps, flash, DDP, CUDA-vs-CPU scoring, generation and small HFLM checks come from their H200/H100 runs
of 2026-12-04/06 (benchmarks/gpu_check_2026-12-0*, rounded up); the others are reasoned from those:
``killed_run_resumes`` is three ``nfeval train`` starts (~10 s each) and 80 tiny steps; ``train_mfu``
compiles 2 models × 2 batches (the 2026-12-04 compile of the 125M step took 31 s; a recompile in the
same process ~25 s) and times 10 steps a batch and round; ``runs_sharing_device`` is 2 scales × (about
20 s to start the runs and warm up + 3 rounds × 2 phases × 4 s); ``out_of_memory_exits`` is one
``nfeval train`` start (~10 s) and a halving search of 6 tries; ``zeroshot_full_vs_hflm`` scores 50,378
requests (about 4.4M tokens, ~1.1 PFLOP a pass): HFLM ~12 s bf16 / ~30 s fp32 a pass, nfeval a third of
that if it meets its target, times 3 rounds, plus a tenth of a pass per batch setting tried and ~10 s to
build the requests; the GLUE sweep took 49 s (nfeval) and 67 s (Trainer) on 4,000 synthetic rows, so
about twice that on 8,000 SST-2 rows.
Call 1 adds up to ~470 s and call 2 to ~420 s, each with ~20 s of start-up. ``--minutes`` guards the 9
minutes: a check whose estimate would end past it is skipped (recorded so), and the side-by-side checks
stop adding rounds when the next one would end past it (they run one at least).

Checks (each reports its time and peak GPU memory; one failing does not stop the others; a check whose
data is absent is recorded as skipped with the reason):

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
6. ``train_mfu``: NormFormer-125M and Pre-LN-125M bf16 steps, compiled, fused AdamW, flash attention
   only, each at the best of ``--mfu-batches`` × ``--seq``; interleaved rounds; tokens/s, MFU against
   989 TFLOP/s on an H100 SXM or H200 (``GPU_PEAKS``) and NormFormer's step time over Pre-LN's
   (``gpu_check_engine.py``).
7. ``runs_sharing_device``: the budget axis's ``24x64-gpu`` and ``12x128-gpu`` runs, N at once on the
   device (N as ``--runs-per-gpu auto`` computes it) against one alone: combined tokens/s and the ratio
   (target ≥ 4×; ``gpu_check_sharing.py``).
8. ``out_of_memory_exits``: ``nfeval train`` with a batch of 1,024 × 2,048 tokens of the 125M shape must
   exit 2 with one line naming the batch and the largest batch that fits, leaving an empty run folder
   (``gpu_check_kill.py``).
9. ``generate_vs_hf``: greedy generation of a random 125M-shaped GPT-2 on the device, nfeval (its
   CUDA-graph steps and its eager ones) against HF ``generate`` with its dynamic and its static KV
   cache (which ``generate`` compiles on a GPU), at batch 1 and 16 (``generate_vs_hf.py``): tokens/s,
   ratios, identical rows, the bandwidth limit; and rows the graph steps generate as the eager ones
   do, with early EOS and sampled.
10. ``zeroshot_vs_hflm``: 2,000 loglikelihood requests of a random 125M-shaped HF GPT-2 directory, fp32,
    batch 32, lm-eval's ``HFLM`` against nfeval's adapter (the engine running the GPT-2 weights):
    seconds, ratio, largest log-likelihood difference (must be < 1e-3).
11. ``zeroshot_full_vs_hflm``: the whole validation sets of PIQA, HellaSwag, WinoGrande and OpenBookQA
    (``DATA/zeroshot``), a random GPT-2-shaped 125M directory, bf16 and fp32, nfeval's adapter against
    HFLM each at its fastest batch setting: seconds, ratio (target ≥ 3×), acc / acc_norm per task on
    each side and whether they are identical (``gpu_check_zeroshot.py``).
12. ``glue_vs_trainer``: the seven-learning-rate SST-2 sweep (``glue_sweep.py`` defaults, bf16) on 8,000
    of SST-2's training rows and its whole dev set (``DATA/glue/SST-2``; a synthetic SST-2 without it):
    nfeval one point at a time against HF ``Trainer`` in ``group_by_length`` order (its strongest
    configuration; its random order, which ``glue_sweep.py --trainer-order`` still measures, is left out
    for time); seconds, the ratio, best dev accuracy per side. One round: a round is ~4 minutes.

``--data-dir DATA`` is a folder in the layout of ``../shared/data`` (default: ``.gpu_data`` in the
checkout when it exists, else ``../shared/data``). Writes ``gpu_check.json`` (figures) and
``gpu_check.md`` (a section for benchmarks/RESULTS.md) into ``--out``; exits 1 if any check failed.
``--dry-run`` runs every path on the CPU with tiny shapes (compile with the ``aot_eager`` backend) so CI
knows the script starts.
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
from gpu_check_data import default_data_dir
from gpu_check_engine import Setup, Skipped, ddp_checkpoint_resume, flash_attention, train_mfu, train_step
from gpu_check_kill import killed_run_resumes, out_of_memory_exits
from gpu_check_scoring import generate_vs_hf, glue_vs_trainer, zeroshot_cuda_vs_cpu, zeroshot_vs_hflm
from gpu_check_sharing import runs_sharing_device
from gpu_check_zeroshot import zeroshot_full_vs_hflm

from nfeval.base.artifacts import atomic_write_json, atomic_write_text, provenance


def memory_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def run_check(name: str, fn: Callable[[], dict], s: Setup, results: dict) -> None:
    """Runs one check, recording its status (ok, failed or skipped), seconds, peak memory and figures in
    ``results``; skips it when its estimated seconds would end past the deadline."""
    memory_reset(s.device)
    t0 = time.perf_counter()
    if not s.time_for(0 if s.dry_run else ESTIMATE_S[name]):
        figures, status = {"reason": f"no time left for its estimated {ESTIMATE_S[name]} s"}, "skipped"
    else:
        figures, status = attempt(fn)
    results[name] = {
        "status": status,
        "seconds": time.perf_counter() - t0,
        "peak_memory_gib": peak_memory_gib(s.device),
        **figures,
    }
    said = figures.get("error", figures.get("reason", ""))
    print(f"[{status}] {name}: {results[name]['seconds']:.1f} s {said}", file=sys.stderr, flush=True)


def attempt(fn: Callable[[], dict]) -> tuple[dict, str]:
    """Returns (figures, status) of calling ``fn``: its figures and "ok", the reason and "skipped" when it
    raised Skipped, the error and "failed" when it raised anything else."""
    try:
        return fn(), "ok"
    except Skipped as e:
        return {"reason": str(e)}, "skipped"
    except Exception as e:  # a failing check is a finding, not the end of the script
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}, "failed"


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
    "train_mfu": train_mfu,
    "runs_sharing_device": runs_sharing_device,
    "out_of_memory_exits": out_of_memory_exits,
    "generate_vs_hf": generate_vs_hf,
    "zeroshot_vs_hflm": zeroshot_vs_hflm,
    "zeroshot_full_vs_hflm": zeroshot_full_vs_hflm,
    "glue_vs_trainer": glue_vs_trainer,
}
# Estimated seconds of each check on one H100/H200 (not measured: see the docstring's sizing)
ESTIMATE_S = {
    "train_step_eager": 15, "train_step_compiled": 40, "flash_attention": 5, "ddp_checkpoint_resume": 12,
    "killed_run_resumes": 45, "zeroshot_cuda_vs_cpu": 5, "train_mfu": 120, "runs_sharing_device": 100,
    "out_of_memory_exits": 25, "generate_vs_hf": 80, "zeroshot_vs_hflm": 20, "zeroshot_full_vs_hflm": 200,
    "glue_vs_trainer": 220,
}  # fmt: skip
# the two device calls of at most 9 minutes each (``--checks call1``, ``--checks call2``)
CALLS = {
    "call1": "train_step_eager,train_step_compiled,flash_attention,ddp_checkpoint_resume,killed_run_resumes,"
    "zeroshot_cuda_vs_cpu,train_mfu,runs_sharing_device,out_of_memory_exits,generate_vs_hf,zeroshot_vs_hflm",
    "call2": "zeroshot_full_vs_hflm,glue_vs_trainer",
}


def check_names(text: str) -> list[str]:
    """Returns the checks named in the comma-separated ``text`` (or those of a device call of ``CALLS``), in
    ``CHECKS``' order; raises on an unknown name or on zeroshot_cuda_vs_cpu without the run it scores."""
    names = CALLS.get(text, text).split(",")
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
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the side-by-side checks")
    p.add_argument(
        "--mfu-batches",
        type=lambda text: tuple(int(b) for b in text.split(",")),
        default=(16, 32),
        help="train_mfu's candidate batches (sequences of --seq tokens; default 16,32)",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        help="real data in the layout of ../shared/data (default: .gpu_data when it exists)",
    )
    p.add_argument(
        "--minutes", type=float, default=None, help="skip checks and rounds ending past this many minutes"
    )
    p.add_argument(
        "--checks",
        type=check_names,
        default=list(CHECKS),
        help=f"comma-separated checks to run (default: all), or call1 / call2: {', '.join(CHECKS)}",
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
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
        data_dir=args.data_dir.resolve(),
        rounds=min(args.rounds, 2) if args.dry_run else args.rounds,
        mfu_batches=(1, 2) if args.dry_run else args.mfu_batches,
        deadline=None if args.minutes is None else t0 + 60 * args.minutes,
    )
    results: dict = {}
    for name in args.checks:
        run_check(name, functools.partial(CHECKS[name], s), s, results)
    name = torch.cuda.get_device_name(s.device) if s.device.type == "cuda" else "CPU (dry run)"
    record = {
        "device": name,
        "dry_run": args.dry_run,
        "data_dir": str(s.data_dir),
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
    return 0 if all(r["status"] != "failed" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
