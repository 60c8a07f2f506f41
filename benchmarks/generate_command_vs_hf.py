"""Whole-command generation speed: ``nfeval generate`` vs a plain Hugging Face script, process against
process (start-up, imports, model load and generation on both sides).

The model is a random-weight Pre-LN GPT-2-shaped Transformer (default 4 layers, d=256) with GPT-2's
tokenizer (``../shared/data/tokenizer/gpt2``), saved as an nfeval checkpoint and exported with ``nfeval
export-hf`` (a ``GPT2LMHeadModel`` directory), so both sides decode the same weights. The prompts are
passages of CPython's documentation (as ``generate_vs_hf.py``), one per line. Both sides are greedy, stop
at EOS, and run with ``OMP_NUM_THREADS`` threads; rounds are interleaved (each round runs both commands
once, in alternating order) and each side's median wall time and median CPU time (user + system: what a
machine loaded by other work disturbs least) are kept, each side's fastest and slowest wall time beside
them, and beside each ratio its spread (the lowest and highest ratio of one round's pair). The
completions of the two must be identical. ``--emulate-avx2`` caps both sides' kernels at AVX2 (torch's
own, oneDNN's, fbgemm's and MKL's), as on a CPU without AVX-512 (a Zen 3 EPYC), where nfeval's ``auto``
kernel rule then chooses as it does there. ``--nfeval-reads hf`` gives ``nfeval generate`` the HF
directory the HF script reads (a GPT-2 the engine reproduces: read into the engine,
``engine.fast.hf_gpt2_backend``) instead of the nfeval checkpoint it was exported from; ``--nfeval-reads
hf-transformers`` the same directory with ``--hf-forward transformers`` (the HF model's own ``generate``
inside ``nfeval generate``, what it did with every HF directory before).

    python benchmarks/generate_command_vs_hf.py [--layers 4 --d-model 256] [--settings 1x8 16x16] \
        [--nfeval-reads hf|hf-transformers]
    ... --results benchmarks/RESULTS.md   # replace this shape's block in the generation section
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
from generate_vs_hf import SHARED, gpt2_layout, prompts, ratio_spread, spread, write_results

from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.interop.hf_export import export_hf
from nfeval.engine.model.model import Transformer
from nfeval.engine.text.tokenization import gpt2_tokenizer

HERE = Path(__file__).resolve().parent
# what --nfeval-reads gives nfeval generate, in the table's words
READS = {
    "checkpoint": "the nfeval checkpoint",
    "hf": "the HF directory",
    "hf-transformers": "the HF directory with --hf-forward transformers",
}
# each library's own cap on the instructions it runs, at AVX2: a CPU without AVX-512 (and without VNNI)
AVX2_ONLY = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def build(work: Path, layers: int, d_model: int, n_prompts: int) -> tuple[str, str, str]:
    """Returns (nfeval checkpoint dir, HF model dir, prompts file) written under ``work``."""
    tok = gpt2_tokenizer(str(SHARED / "tokenizer" / "gpt2"))
    cfg = gpt2_layout(layers, d_model, tok.get_vocab_size())  # export-hf writes it as a GPT-2
    torch.manual_seed(0)
    ckpt, hf_dir = str(work / "nfeval"), str(work / "hf")
    checkpoint.save(ckpt, Transformer(cfg), tok)
    export_hf(ckpt, hf_dir, overwrite=True)
    texts = [" ".join(tok.decode(ids).split()) for ids in prompts(n_prompts)]
    path = work / "prompts.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return ckpt, hf_dir, str(path)


def commands(model: list[str], hf_dir: str, prompts_file: str, new: int, batch: int, out: Path) -> dict:
    """Returns each side's command line (nfeval's ``model`` flags, HF reading ``hf_dir``) and the JSONL
    file it writes."""
    nf_out, hf_out = str(out / "nfeval.jsonl"), str(out / "hf.jsonl")
    nfeval = [
        sys.executable, "-m", "nfeval", "generate", *model, "--prompts", prompts_file,
        "--max-new-tokens", str(new), "--batch-size", str(batch), "--device", "cpu", "--output", nf_out,
    ]  # fmt: skip
    hf = [
        sys.executable,
        str(HERE / "hf_generate_script.py"),
        hf_dir,
        prompts_file,
        str(new),
        str(batch),
        hf_out,
    ]
    return {"nfeval": (nfeval, nf_out), "hf": (hf, hf_out)}


def completions(path: str) -> list[str]:
    """Returns the completions of a JSONL file, in prompt order (nfeval's header line skipped)."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    return [r["completion"] for r in rows if r.get("kind", "generation") == "generation"]


def cpu_seconds() -> float:
    """Returns the user + system seconds of this process's finished children (0 on Windows)."""
    times = os.times()
    return times.children_user + times.children_system


def run_interleaved(sides: dict, rounds: int, env: dict) -> dict[str, list[tuple[float, float]]]:
    """Returns each side's (wall, CPU) seconds of every one of ``rounds`` interleaved runs, in order (no
    warm-up: start-up is part of what is measured; the first round also warms the file cache for both)."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in list(sides)[:: 1 if r % 2 == 0 else -1]:
            t0, cpu0 = time.perf_counter(), cpu_seconds()
            done = subprocess.run(sides[name][0], env=env, capture_output=True, text=True)
            times[name].append((time.perf_counter() - t0, cpu_seconds() - cpu0))
            if done.returncode:
                sys.exit(f"{name} side failed: {' '.join(sides[name][0])}\n{done.stderr[-3000:]}")
    return times


def measure(work: Path, ckpt: str, hf_dir: str, all_prompts: str, setting: str, args, env: dict) -> str:
    """Returns the table row of one ``BATCHxPROMPTS`` setting: both commands timed, outputs compared."""
    batch, n = (int(x) for x in setting.split("x"))
    file = work / f"prompts{n}.txt"
    file.write_text("\n".join(Path(all_prompts).read_text().splitlines()[:n]) + "\n")
    model = {
        "checkpoint": ["--ckpt", ckpt],
        "hf": ["--ckpt", hf_dir],
        "hf-transformers": ["--ckpt", hf_dir, "--hf-forward", "transformers"],
    }[args.nfeval_reads]
    sides = commands(model, hf_dir, str(file), args.new_tokens, batch, work)
    times = run_interleaved(sides, args.rounds, env)
    (hf_wall, hf_cpu), (ours_wall, ours_cpu) = (list(zip(*times[k])) for k in ("hf", "nfeval"))
    hf, ours = statistics.median(hf_wall), statistics.median(ours_wall)
    hf_c, ours_c = statistics.median(hf_cpu), statistics.median(ours_cpu)
    got, want = completions(sides["nfeval"][1]), completions(sides["hf"][1])
    same = sum(a == b for a, b in zip(got, want))
    return (
        f"| {batch} | {n} | {hf:.2f} ({min(hf_wall):.2f}-{max(hf_wall):.2f}) | {ours:.2f} "
        f"({min(ours_wall):.2f}-{max(ours_wall):.2f}) | **{hf / ours:.2f}x** | "
        f"{spread(ratio_spread(hf_wall, ours_wall))} | {hf_c:.2f} | {ours_c:.2f} | "
        f"**{hf_c / ours_c:.2f}x** | "
        f"{spread(ratio_spread(hf_cpu, ours_cpu))} | {same}/{n} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--settings", nargs="+", default=["1x8", "16x16"], help="BATCHxPROMPTS ...")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--nfeval-reads", choices=tuple(READS), default="checkpoint",
        help="what nfeval generate reads: the nfeval checkpoint, or the HF directory the HF script reads "
        "(in the engine, or with --hf-forward transformers)",
    )  # fmt: skip
    parser.add_argument("--results", metavar="RESULTS.md", help="write the table into this file")
    parser.add_argument("--note", default="", help="a line above the table (e.g. the machine's state)")
    parser.add_argument(
        "--emulate-avx2", action="store_true", help="both sides' kernels capped at AVX2 (no AVX-512, no VNNI)"
    )
    args = parser.parse_args()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "TOKENIZERS_PARALLELISM": "false",
        **(AVX2_ONLY if args.emulate_avx2 else {}),
    }
    isa = ", kernels capped at AVX2 (`--emulate-avx2`)" if args.emulate_avx2 else ""
    lines = [
        f"Whole commands, Pre-LN L={args.layers} d={args.d_model} (random weights, GPT-2 tokenizer), "
        f"{args.new_tokens} new tokens per prompt (EOS on), {args.threads} thread(s){isa}, nfeval reading "
        f"{READS[args.nfeval_reads]}; {args.rounds} "
        "interleaved rounds, median wall (fastest-slowest) and CPU (user + system) time of the process; "
        "a ratio's spread is the lowest-highest of the rounds' pairs.",
        "",
        "| batch | prompts | HF script s | `nfeval generate` s | nfeval / HF | spread | HF CPU s "
        "| nfeval CPU s | nfeval / HF, CPU | spread | identical completions |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        n_max = max(int(s.split("x")[1]) for s in args.settings)
        ckpt, hf_dir, all_prompts = build(work, args.layers, args.d_model, n_max)
        for setting in args.settings:
            lines.append(measure(work, ckpt, hf_dir, all_prompts, setting, args, env))
            print(lines[-1], flush=True)
    load = os.getloadavg()
    lines.insert(
        1,
        f"Load average after the run {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} ({os.cpu_count()} cores).",
    )
    block = "\n\n".join(x for x in (args.note, "\n".join(lines)) if x)
    print("\n" + block)
    if args.results:
        write_results(args.results, f"command L={args.layers} d={args.d_model}", block)


if __name__ == "__main__":
    main()
