"""End-to-end time and accuracy of ``nfeval zeroshot`` vs lm-eval's stock ``hf`` model, side by side.

Both score the same Hugging Face GPT-2-shaped model (random weights, GPT-2's tokenizer from
``../shared/data/tokenizer/gpt2``, saved to a temp dir) on the same first N items of every task in
``../shared/data/zeroshot`` (StoryCloze when its files are there); the accuracies must agree. Each
side is a whole process, start-up and imports included: ``python -m nfeval zeroshot`` (cold cache:
a fresh ``$NFEVAL_CACHE``, ``--no-cache``) against a process that runs lm-eval's ``simple_evaluate``
with ``model="hf"`` on the same task definitions. Rounds interleave the two (the order alternates), so
machine load hits both alike; the ratio is the median of the per-round ratios. The load average is
printed with every round.

    python benchmarks/zeroshot_vs_hf.py [--limit 500] [--d-model 256] [--layers 4] [--batch-size 16]
        [--rounds 5] [--tasks piqa hellaswag ...]

``--packing N`` instead scores the first N HellaSwag items with a 125M-shaped (GPT-2 small) random
model through ``NFEvalLM``, packed and unpacked: tokens, model FLOPs, time and the largest |Δ log-prob|.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from results_md import write_block

# ../shared/data beside the checkout; $NFEVAL_SHARED_DATA for a checkout elsewhere (a git worktree)
SHARED = Path(os.environ.get("NFEVAL_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
TASKS = [t for t in ("piqa", "hellaswag", "winogrande", "openbookqa", "storycloze_2016")
         if (SHARED / "zeroshot" / t.split("_")[0]).is_dir()]  # fmt: skip
METRICS = ("acc,none", "acc_norm,none")
HEADING = "## Zero-shot fixed costs removed (issue 26, zero-shot half)"  # where --results adds its table


def build_model(path: str, d_model: int, layers: int, tokenizer_dir: str | None = None) -> str:
    """Saves a random GPT2LMHeadModel with GPT-2's tokenizer (from ``tokenizer_dir``, default
    ``../shared/data/tokenizer/gpt2``) to ``path``; returns ``path``."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from nfeval.engine.text.tokenization import GPT2_EOT, gpt2_tokenizer

    bpe = gpt2_tokenizer(tokenizer_dir or str(SHARED / "tokenizer" / "gpt2"))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=GPT2_EOT, eos_token=GPT2_EOT, pad_token="<pad>"
    )
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=bpe.get_vocab_size(),
        n_embd=d_model,
        n_layer=layers,
        n_head=max(1, d_model // 64),
        n_positions=1024,
    )
    GPT2LMHeadModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--packing", type=int, default=None, metavar="N")
    parser.add_argument("--results", metavar="RESULTS.md", help="write the rounds' table into this file")
    parser.add_argument("--note", default="", help="a line above the table (e.g. the machine's state)")
    parser.add_argument("--hf-side", nargs=2, metavar=("MODEL_DIR", "OUT"), help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.hf_side:  # the stock side's own process (see run_hf)
        hf_side(*args.hf_side, args)
    elif args.packing:
        packing_comparison(args.packing, args.batch_size)
    else:
        side_by_side(args)


def hf_side(model_dir: str, out: str, args: argparse.Namespace) -> None:
    """Runs lm-eval's ``hf`` model over the tasks (this process is the stock side); writes results."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    import nfeval.tasks as nf_tasks

    manager = TaskManager(include_path=nf_tasks.TASKS_DIR, include_defaults=False,
                          metadata={"data_dir": str(SHARED / "zeroshot")})  # fmt: skip
    stock = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={model_dir},dtype=float32",
        tasks=[f"{t}_local" for t in args.tasks], task_manager=manager, limit=args.limit,
        batch_size=args.batch_size, device="cpu", log_samples=False,
    )  # fmt: skip
    Path(out).write_text(json.dumps({"results": stock["results"]}, default=str))


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Returns the wall seconds of running ``argv`` as a process (its output discarded)."""
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def run_side(side: str, model_dir: str, tmp: str, args: argparse.Namespace) -> tuple[float, dict]:
    """Returns (wall s, results JSON) of one whole-process run of ``side`` ("hf" or "nfeval")."""
    out = os.path.join(tmp, f"{side}.json")
    env = dict(os.environ, NFEVAL_CACHE=tempfile.mkdtemp(prefix="cold-cache-", dir=tmp))
    if side == "hf":
        argv = [sys.executable, __file__, "--hf-side", model_dir, out, "--limit", str(args.limit),
                "--batch-size", str(args.batch_size), "--tasks", *args.tasks]  # fmt: skip
    else:
        argv = [sys.executable, "-m", "nfeval", "zeroshot", "--ckpt", model_dir, "--data-dir",
                str(SHARED / "zeroshot"), "--limit", str(args.limit), "--batch-size", str(args.batch_size),
                "--device", "cpu", "--no-cache", "--output", out, "--tasks", *args.tasks]  # fmt: skip
    wall = timed(argv, env)
    return wall, json.loads(Path(out).read_text())


def side_by_side(args: argparse.Namespace) -> None:
    """Prints each interleaved round (walls, ratio, load average), the medians and the accuracy check."""
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(os.path.join(tmp, "gpt2-random"), args.d_model, args.layers)
        for r in range(args.rounds):
            order = ("hf", "nfeval") if r % 2 == 0 else ("nfeval", "hf")
            load_before = os.getloadavg()
            runs = {side: run_side(side, model_dir, tmp, args) for side in order}
            walls = {side: round(runs[side][0], 1) for side in runs}
            ratio = round(walls["hf"] / walls["nfeval"], 2)
            row = {"round": r + 1, "order": order, "wall_s": walls, "ratio": ratio,
                   "load_avg_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
                   "running_processes": _running()}  # fmt: skip
            print(json.dumps(row), flush=True)
            rounds.append((row, runs))
    result = summary(args, rounds)
    print(json.dumps(result, indent=2))
    if args.results:
        block = "\n\n".join(x for x in (args.note, table(args, rounds, result)) if x)
        marker = f"zeroshot_vs_hf limit={args.limit} d={args.d_model} L={args.layers}"
        write_block(args.results, marker, block, HEADING)


def table(args: argparse.Namespace, rounds: list, result: dict) -> str:
    """Returns the markdown of the rounds (walls, ratio, load), their median and nfeval's scoring line."""
    same = "identical on every task in every round." if result["metrics_identical"] else "**NOT identical**."
    command = (
        f"OMP_NUM_THREADS=1 python benchmarks/zeroshot_vs_hf.py --limit {args.limit} "
        f"--d-model {args.d_model} --layers {args.layers} --rounds {args.rounds}"
    )
    lines = [
        f"`{command}`: {result['model']}, tasks {', '.join(args.tasks)}, {args.limit} items each, batch size "
        f"{args.batch_size}, {result['torch_threads']} torch thread(s), cold cache, whole processes; metrics "
        f"(acc, acc_norm) {same}",
        "",
        "| round (order) | lm-eval `hf` s | `nfeval zeroshot` s | ratio | load avg 1m (before, after) |",
        "|---|---:|---:|---:|---|",
    ]
    for row, _ in rounds:
        load = ", ".join(f"{x:.2f}" for x in row["load_avg_1m"])
        lines.append(f"| {row['round']} ({row['order'][0]} first) | {row['wall_s']['hf']:.1f} | "
                     f"{row['wall_s']['nfeval']:.1f} | {row['ratio']:.2f} | {load} |")  # fmt: skip
    walls = result["median_wall_s"]
    median = result["median_ratio"]
    lines.append(f"| **median** | {walls['hf']:.1f} | {walls['nfeval']:.1f} | **{median:.2f}** | |")
    scoring = result["nfeval_scoring"]
    lines += ["", f"nfeval's own scoring report (last round): `{json.dumps(scoring)}`"]
    return "\n".join(lines)


def _running() -> int:
    """Returns the number of runnable processes now (``/proc/loadavg``), this benchmark's included."""
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0])


def summary(args: argparse.Namespace, rounds: list) -> dict:
    """Returns the medians, the per-round ratios, the last nfeval scoring report and the accuracy check
    (every round, every task, acc and acc_norm equal)."""
    names = [f"{t}_local" for t in args.tasks]
    accuracy, match = {}, True
    for _, runs in rounds:
        hf, nf = runs["hf"][1]["results"], runs["nfeval"][1]["results"]
        for task in names:
            ours = nf[task]  # both key results by the lm-eval task that ran (piqa_local)
            pairs = {m: {"hf": hf[task][m], "nfeval": ours[m]} for m in METRICS if m in hf[task]}
            match = match and all(v["hf"] == v["nfeval"] for v in pairs.values())
            accuracy[task] = pairs
    walls = {side: statistics.median(row["wall_s"][side] for row, _ in rounds) for side in ("hf", "nfeval")}
    return {
        "limit": args.limit, "tasks": names, "batch_size": args.batch_size, "rounds": len(rounds),
        "model": f"GPT-2 shape d={args.d_model} L={args.layers} vocab=50259 (random)",
        "torch_threads": torch.get_num_threads(),
        "median_wall_s": walls,
        "median_ratio": statistics.median(row["ratio"] for row, _ in rounds),
        "ratios": [row["ratio"] for row, _ in rounds],
        "load_avg_1m": [row["load_avg_1m"] for row, _ in rounds],
        "nfeval_scoring": rounds[-1][1]["nfeval"][1]["nfeval"]["scoring"],
        "metrics_identical": match, "accuracy": accuracy,
    }  # fmt: skip


def packing_comparison(n_docs: int, batch_size: int) -> None:
    """Prints tokens, FLOPs, time and max |Δ log-prob| of packed vs unpacked scoring of HellaSwag."""
    from lm_eval.tasks import TaskManager

    import nfeval.tasks as nf_tasks
    from nfeval.model_adapters import NFEvalLM
    from nfeval.model_adapters.config import ScoringConfig

    manager = TaskManager(include_path=nf_tasks.TASKS_DIR, include_defaults=False,
                          metadata={"data_dir": str(SHARED / "zeroshot")})  # fmt: skip
    task = manager.load(["hellaswag_local"])["tasks"]["hellaswag_local"]
    task.build_all_requests(limit=n_docs, rank=0, world_size=1)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(os.path.join(tmp, "gpt2-125m-random"), 768, 12)
        report, scores = (
            {"docs": n_docs, "requests": len(task.instances), "threads": torch.get_num_threads()},
            {},
        )
        for packed in (False, True):
            lm = NFEvalLM(
                model_dir, ScoringConfig(device="cpu", batch_size=batch_size, pack=packed, progress=False)
            )
            t0 = time.perf_counter()
            scores[packed] = [ll for ll, _ in lm.loglikelihood(task.instances, disable_tqdm=True)]
            wall = time.perf_counter() - t0
            report["packed" if packed else "unpacked"] = dict(
                lm.scoring_report(), end_to_end_s=round(wall, 1)
            )
    report["max_abs_delta"] = max(abs(a - b) for a, b in zip(scores[True], scores[False]))
    report["flops_ratio"] = report["unpacked"]["flops"] / report["packed"]["flops"]
    report["time_ratio"] = report["unpacked"]["wall_s"] / report["packed"]["wall_s"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
