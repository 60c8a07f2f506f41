"""How long the README's quick start takes: the full ``nfeval demo`` timed from a fresh output folder and
an empty results cache, with its stages, its peak memory and how busy the machine was.

Runs ``nfeval demo --out DIR --no-progress`` (``--dry-run``: the smallest setting, ``DemoConfig.smallest``,
seconds, only to check that this script works) in a child process, so the time includes interpreter
start-up and imports, as a user's does. Prints a markdown block for benchmarks/RESULTS.md: wall time,
each stage's seconds (from the demo's ``summary.json``), Pre-LN's and NormFormer's steps, the peak RSS
of the child, the load average before and after and the share of CPU time the hypervisor took (steal)
over the run, since a figure from a busy machine is no figure for a quiet one.

    python benchmarks/demo_wall_time.py [--minutes 7] [--keep DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

SMALLEST = (
    "import sys; from nfeval.pipelines.demo import DemoConfig, run_demo; "
    "run_demo(DemoConfig.smallest(sys.argv[1]))"
)


def cpu_times() -> list[int] | None:
    """Returns the machine's CPU time counters (/proc/stat's first line), None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None


def steal_share(before: list[int] | None, after: list[int] | None) -> float | None:
    """Returns the share of CPU time stolen by the hypervisor between two ``cpu_times`` readings."""
    if not before or not after or len(before) < 8:
        return None
    delta = [b - a for a, b in zip(before, after)]
    return delta[7] / sum(delta) if sum(delta) else None


def run(out: str, minutes: float, dry_run: bool) -> dict:
    """Runs the demo into ``out`` in a child process with an empty cache; returns the measurements."""
    env = dict(os.environ, NFEVAL_CACHE=os.path.join(out, "cache"))
    if dry_run:
        cmd = [sys.executable, "-c", SMALLEST, os.path.join(out, "demo")]
    else:
        cmd = [sys.executable, "-m", "nfeval", "demo", "--out", os.path.join(out, "demo"), "--no-progress"]
        cmd += ["--minutes", f"{minutes:g}"]
    load, stat, t0 = os.getloadavg()[0], cpu_times(), time.perf_counter()
    child = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if child.returncode != 0:
        raise SystemExit(f"demo failed ({child.returncode}):\n{child.stdout[-3000:]}\n{child.stderr[-3000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.load(open(os.path.join(out, "demo", "summary.json"), encoding="utf-8"))
    return {
        "command": " ".join(cmd[1:]) if not dry_run else "DemoConfig.smallest (dry run)",
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "load": (load, os.getloadavg()[0]),
        "steal": steal_share(stat, cpu_times()),
        "cores": os.cpu_count(),
        "summary": summary,
    }


def report(m: dict) -> str:
    """Returns the measurements as a markdown block for RESULTS.md."""
    s = m["summary"]
    stages = ", ".join(f"{name} {sec:.0f} s" for name, sec in s["stage_s"].items())
    steps = ", ".join(f"{arch} {model['steps']}" for arch, model in s["models"].items())
    steal = "unknown" if m["steal"] is None else f"{m['steal']:.0%}"
    return "\n".join(
        [
            f"- `{m['command']}` on {m['cores']} cores, {time.strftime('%Y-%m-%d')}: "
            f"**{m['wall_s'] / 60:.1f} min** wall ({m['cpu_s'] / 60:.1f} min CPU), peak RSS "
            f"{m['peak_rss_mb']:.0f} MB",
            f"- stages: {stages}",
            f"- steps: {steps} (budget: {s['budget']['how']})",
            f"- load average {m['load'][0]:.2f} before, {m['load'][1]:.2f} after; CPU time stolen by the "
            f"hypervisor during the run: {steal}",
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=7.0, help="the demo's time target (default 7)")
    p.add_argument("--keep", help="output folder to keep (default: a temporary one)")
    p.add_argument("--dry-run", action="store_true", help="the smallest setting: checks this script works")
    args = p.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        print(report(run(args.keep, args.minutes, args.dry_run)))
        return
    with tempfile.TemporaryDirectory(prefix="demo-wall-time-") as out:
        print(report(run(out, args.minutes, args.dry_run)))


if __name__ == "__main__":
    main()
