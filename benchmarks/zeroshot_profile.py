"""Where ``nfeval zeroshot`` spends its time end to end, stage by stage (cProfile, cumulative seconds).

Scores a random GPT-2-shaped HF model (GPT-2's tokenizer from ``../shared/data/tokenizer/gpt2``) on the
first N items of each task in ``../shared/data/zeroshot``, under cProfile, and prints the seconds spent
in each stage (stages nest: the forward is part of scoring) and the calls that took longest.

    python benchmarks/zeroshot_profile.py [--limit 100] [--d-model 256] [--layers 4] [--tasks piqa ...]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

import torch
from zeroshot_vs_hf import SHARED, TASKS, build_model

from nfeval.model_adapters.config import ScoringConfig
from nfeval.zeroshot.config import ZeroShotConfig

# stage -> (file substring, function name) whose cumulative time is the stage's
STAGES = {
    "task building (TaskManager, load)": ("zeroshot.py", "load_tasks"),
    "dataset loading (tasks/loaders.py)": ("tasks/loaders.py", "load"),
    "datasets .map (process_docs etc.)": ("arrow_dataset.py", "map"),
    "request building (lm-eval build_all_requests)": ("api/task.py", "build_all_requests"),
    "tokenization (tok_encode)": ("model_adapters/lm.py", "tok_encode"),
    "scoring (scorer.score)": ("model_adapters/scorer.py", "score"),
    "forward (backend.features_at)": ("model_adapters/hf_backend.py", "features_at"),
    "LM head, logsumexp, argmax (vocab_head.target_log_probs)": (
        "engine/inference/vocab_head.py",
        "target_log_probs",
    ),
    "metrics (lm-eval process_results/aggregate)": ("lm_eval/evaluator.py", "evaluate"),
}


def stage_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Returns the cumulative seconds of each stage's function (the largest match)."""
    out = {}
    for stage, (path, name) in STAGES.items():
        found = [
            v[3] for (f, _, fn), v in stats.stats.items() if path in f.replace(os.sep, "/") and fn == name
        ]
        out[stage] = round(max(found, default=0.0), 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch-size", default="16")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    t0 = time.perf_counter()  # a fresh process's start and imports, as `nfeval zeroshot` pays them
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import lm_eval, nfeval.model_adapters, nfeval.tasks, nfeval.zeroshot.evaluate",
        ],
        check=True,
    )
    t_imports = time.perf_counter() - t0
    from nfeval.zeroshot import evaluate as zeroshot

    os.environ["NFEVAL_CACHE"] = tempfile.mkdtemp(prefix="nfeval-profile-cache-")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(os.path.join(tmp, "gpt2-random"), args.d_model, args.layers)
        batch = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
        profiler = cProfile.Profile()
        t0 = time.perf_counter()
        profiler.enable()
        cfg = ZeroShotConfig(tasks=args.tasks, data_dir=str(SHARED / "zeroshot"), limit=args.limit,
                             use_cache=False, output=os.path.join(tmp, "r.json"),
                             scoring=ScoringConfig(batch_size=batch, device="cpu"))  # fmt: skip
        out = zeroshot.evaluate(model_dir, cfg)
        profiler.disable()
        wall = time.perf_counter() - t0
    stats = pstats.Stats(profiler)
    model = f"GPT-2 shape d={args.d_model} L={args.layers}"
    report = {"limit": args.limit, "tasks": args.tasks, "model": model,
              "threads": torch.get_num_threads(), "batch_size": args.batch_size,
              "process_start_and_imports_s": round(t_imports, 2), "evaluate_wall_s": round(wall, 2),
              "stages_s": stage_seconds(stats), "scoring": out["nfeval"].get("scoring")}  # fmt: skip
    print(json.dumps(report, indent=2))
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
