"""The GPU budget axis as one device call: Figure 2's primary comparison at several token budgets on
``../shared/data/wiki``, as much of it as fits in ``--minutes``, landing what finished.

    python benchmarks/gpu_budget_axis.py --data .data/wiki --out docs/budget_gpu --minutes 8.5
    python benchmarks/gpu_budget_axis.py --dry-run --out /tmp/axis   # the same path on the CPU, tiny

One call:

1. unpacks the records earlier calls landed (each budget's ``records.tar.xz``, carried with the tree);
2. runs ``nfeval reproduce --scale 24x64-gpu --token-budgets … --jobs J`` (J runs share the device: what
   its free memory holds, ``--runs-per-gpu auto``'s count, at most ``--max-jobs``) in a child process,
   and stops it with SIGTERM at the deadline: a tune point or run that finished keeps its record, one in
   flight resumes from its checkpoint on the next call (its checkpoints stay on that machine, so it
   starts again there);
3. packs each budget's records (``nfeval.pipelines.archive``) and writes ``OUT_DIR/budget_gpu.tar`` (the
   reports, figures and archives of every budget, what a commit keeps) and ``OUT_DIR/call.json`` (device,
   driver, torch, J, minutes, finished tune points and runs per budget, their combined tokens per second
   and the runs' model FLOP utilisation): one archive to bring back and land.

``--tune-only`` runs the tunes alone (they do not depend on timing; the judged runs and their paired
step-time ratio want the device to themselves). The corpus travels as its two ``.xz`` files (34 MB:
copy ``../shared/data/wiki`` into an ignored folder of the checkout and name it in ``carry``); with the
tracked tree it must fit the call's 64 MiB, which ``tests/test_tree_travels.py`` checks at every commit.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tarfile
import time

from nfeval.base.artifacts import atomic_write_json
from nfeval.pipelines import archive

TOKEN_BUDGETS = "1.25M,2.5M,5M,10M,20M"  # 16×; 20M is 15 tokens per parameter at 24 × 64


def runs_at_once(scale: str, limit: int) -> int:
    """Returns how many runs share the device: what its free memory holds at the scale's estimated memory
    a run (``nfeval.pipelines.context.gpu_jobs``), at most ``limit``; 1 on the CPU."""
    import torch

    from nfeval.pipelines.context import gpu_jobs
    from nfeval.pipelines.scales import SCALES

    return min(limit, gpu_jobs(SCALES[scale], 0)) if torch.cuda.is_available() else 1


def command(args: argparse.Namespace, jobs: int) -> list[str]:
    """Returns the ``nfeval reproduce`` command line of this call."""
    data = args.data
    argv = [sys.executable, "-m", "nfeval", "reproduce", "--scale", args.scale]
    argv += ["--token-budgets", args.token_budgets, "--jobs", str(jobs), "--out", args.out, "--no-progress"]
    if data:
        argv += ["--train-data", os.path.join(data, "train.txt.xz")]
        argv += ["--valid-data", os.path.join(data, "valid.txt.xz")]
    if args.dry_run:
        argv += ["--seeds", "2", "--tune-seeds", "1", "--device", "cpu"]
    return argv + (["--tune-only"] if args.tune_only else [])


def run_until(argv: list[str], deadline: float, log: str) -> int | None:
    """Runs ``argv`` until it ends or ``deadline`` (time.time()), then stops it with SIGTERM (nfeval
    stops its workers and exits 143); returns its exit status (None: stopped at the deadline)."""
    with open(log, "a", encoding="utf-8") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while child.poll() is None and time.time() < deadline:
            time.sleep(2)
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            child.wait(timeout=60)
            return None
        return child.returncode


def budget_folders(out: str) -> list[str]:
    """Returns the budget folders (``tokens=N``) of the axis in ``out``, by tokens."""
    return sorted(glob.glob(os.path.join(out, "tokens=*")), key=lambda p: int(p.rsplit("=", 1)[1]))


def progress(folder: str) -> dict:
    """Returns what landed in one budget folder: finished tune points and runs, and the runs' training
    tokens, seconds and mean model FLOP utilisation."""
    points = glob.glob(os.path.join(folder, "tune", "*", "points", "**", "point.json"), recursive=True)
    records = glob.glob(os.path.join(folder, "runs", "**", "seed*.json"), recursive=True)
    tokens = seconds = 0.0
    mfu = []
    for path in glob.glob(os.path.join(folder, "**", "config.json"), recursive=True):
        if "checkpoints" in path:
            continue
        config = json.load(open(path))
        compute, peak = config.get("compute") or {}, (config.get("train") or {}).get("peak_flops")
        tokens += compute.get("tokens") or 0
        seconds += compute.get("wall_s") or 0
        if peak and compute.get("wall_s") and compute.get("flops"):
            mfu.append(compute["flops"] / (compute["wall_s"] * peak))
    return {
        "folder": os.path.basename(folder),
        "tune_points": len(points),
        "runs": len(records),
        "report": os.path.isfile(os.path.join(folder, "report.json")),
        "tokens": tokens,
        "train_seconds": seconds,
        "mean_mfu": sum(mfu) / len(mfu) if mfu else None,
    }


def land(out: str, dest: str) -> str:
    """Packs each budget's records and writes ``dest/budget_gpu.tar``: every file a commit keeps of the
    axis (reports, figures, README, the archives); returns its path."""
    for folder in budget_folders(out):
        archive.pack(folder)
    path = os.path.join(dest, "budget_gpu.tar")
    keep = (".md", ".png", ".tar.xz", "report.json", ".gitignore")
    with tarfile.open(path, "w") as tar:
        for root, dirs, files in os.walk(out):
            dirs[:] = [d for d in dirs if d not in ("runs", "tune", "experiments", "checkpoints")]
            for name in sorted(files):
                if name.endswith(keep):
                    full = os.path.join(root, name)
                    tar.add(full, arcname=os.path.relpath(full, os.path.dirname(os.path.abspath(out))))
    return path


def device_facts() -> dict:
    """Returns the device, its driver and torch, as a report states them."""
    import torch

    facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": "cpu"}
    if torch.cuda.is_available():
        facts["device"] = torch.cuda.get_device_name(0)
        try:
            smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            facts["driver"] = subprocess.run(smi, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            facts["driver"] = None
    return facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/budget_gpu", help="the axis folder (default docs/budget_gpu)")
    parser.add_argument("--data", default=None, help="a folder holding train.txt.xz and valid.txt.xz")
    parser.add_argument("--scale", default="24x64-gpu")
    parser.add_argument("--token-budgets", default=TOKEN_BUDGETS)
    parser.add_argument("--minutes", type=float, default=8.5, help="the deadline of this call")
    parser.add_argument("--max-jobs", type=int, default=12, help="at most this many runs share the device")
    parser.add_argument("--tune-only", action="store_true")
    parser.add_argument("--dest", default=os.environ.get("OUT", "."), help="where the landing goes ($OUT)")
    parser.add_argument("--dry-run", action="store_true", help="the smoke scale on the CPU, seconds")
    args = parser.parse_args()
    start = time.time()
    if args.dry_run:
        args.scale, args.token_budgets = "smoke", "64,128"
    os.makedirs(args.out, exist_ok=True)
    for folder in budget_folders(args.out):
        archive.unpack(folder)
    jobs = runs_at_once(args.scale, args.max_jobs)
    status = run_until(command(args, jobs), start + 60 * args.minutes, os.path.join(args.dest, "call.log"))
    landed = land(args.out, args.dest)
    record = {
        **device_facts(),
        "jobs": jobs,
        "command": " ".join(command(args, jobs)[1:]),
        "exit_status": status,
        "stopped_at_deadline": status is None,
        "minutes": (time.time() - start) / 60,
        "budgets": [progress(f) for f in budget_folders(args.out)],
        "landing": os.path.basename(landed),
    }
    seconds = sum(b["train_seconds"] for b in record["budgets"])
    record["combined_tokens_per_s"] = (
        sum(b["tokens"] for b in record["budgets"]) / (60 * record["minutes"]) if seconds else None
    )
    atomic_write_json(os.path.join(args.dest, "call.json"), record)
    print(json.dumps({k: v for k, v in record.items() if k != "budgets"}, indent=1))
    return 0 if status in (0, None) else 1


if __name__ == "__main__":
    sys.exit(main())
