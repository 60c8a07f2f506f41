"""GLUE sweep time: ``nfeval.glue.sweep`` (one point at a time, in ``--jobs`` processes) vs Hugging Face
``Trainer`` in its strongest configuration: dynamic padding (``DataCollatorWithPadding``) and
``group_by_length=True`` (``train_sampling_strategy="group_by_length"`` in transformers 5), one fine-tune
per learning rate.

Both sides fine-tune the same RoBERTa-shaped encoder (post-LN, embedding LayerNorm, learned positions;
random init, no pretraining: no weights can be downloaded) from the same weights (the nfeval checkpoint's
and the head nfeval's seed 0 draws, copied into ``RobertaForSequenceClassification`` and checked to give
the same scores) on the same subset of each GLUE task, with the same token ids, learning-rate grid,
epochs, batch size, warmup, Adam betas/eps, weight decay and dropout, evaluating on the full dev set after
every epoch. The Trainer is held to nfeval's (fairseq's RoBERTa GLUE) recipe where its defaults differ:
no gradient clipping (its ``max_grad_norm`` is 1.0), weight decay on every parameter (it exempts
biases and LayerNorm gains), nfeval's warmup (the Trainer's first update runs at lr 0) and no trained
token-type embedding (nfeval's encoder has none). Fed the same batches with dropout off, the two then
train alike to ~1e-8 at every step (``glue_gap_probe.py``). Rounds interleave the sides (nfeval first in
even rounds, the Trainer first in odd ones) so that a change in the machine's load hits both; each side's
time is its fastest round. Reported per task: wall time of the whole sweep on each side, the ratio, and
the dev metric (best epoch, and last epoch) at each learning rate, so that speed is compared at an equal
dev score. The Trainer's dev scores are lower at short schedules and low learning rates because of its
``group_by_length`` order (each epoch runs from long to short rows); on nfeval's batches or a plain
shuffle it scores within ~0.01 of nfeval (``glue_gap_probe.py --order``, benchmarks/HISTORY.md, session 6).

    python benchmarks/glue_sweep.py --tasks sst2,rte --train 4000 --epochs 2 --layers 6 --d-model 256
    ... --threads 2 --jobs 2   # the whole 2-core machine: a 2-thread Trainer against two 1-thread points
    ... --trainer-order group_by_length,random   # also the Trainer on a plain shuffle (equal dev scores)
    ... --device cuda   # both sides on the GPU, bf16
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import tempfile
import time
from pathlib import Path

import torch
from glue_trainer import run_trainer

from nfeval.base.sweep_points import point_dir
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.fast import denormals
from nfeval.engine.model.config import ModelConfig
from nfeval.engine.model.model import Transformer
from nfeval.engine.text.tokenization import train_bpe
from nfeval.glue import data as glue_data
from nfeval.glue import finetune, points
from nfeval.glue import metrics as glue_metrics
from nfeval.glue import sweep as glue
from nfeval.glue.config import GlueConfig

DEFAULT_GLUE = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"
TRAINER = "HF Trainer"  # the name of its side in group_by_length order; other orders add theirs
TRAINER_COMPILE = {"off": [False], "on": [True], "both": [False, True]}  # --trainer-compile's sides
SEVEN_LRS = "1e-4,2e-4,3e-4,5e-4,1e-3,2e-3,3e-3"  # a random-init model wants larger LRs than RoBERTa's grid


def subset_glue_dir(glue_dir: str, task: str, n_train: int, out: str) -> str:
    """Writes a GLUE folder for ``task`` with ``n_train`` random training rows (header kept) and the full
    dev set."""
    spec = glue_data.spec(task)
    src, dst = Path(glue_dir) / spec.folder, Path(out) / spec.folder
    dst.mkdir(parents=True, exist_ok=True)
    lines = (src / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    head, rows = (lines[:1], lines[1:]) if isinstance(spec.label_column, str) else ([], lines)
    rows = random.Random(0).sample(rows, min(n_train, len(rows)))
    (dst / "train.tsv").write_text("".join(head + rows), encoding="utf-8")
    for name in spec.dev_files.values():
        (dst / name).write_bytes((src / name).read_bytes())
    return out


def synthetic_sst2(folder: Path, n_train: int = 4000, n_dev: int = 872) -> str:
    """Writes a synthetic SST-2 folder (``sentence``/``label`` TSVs) whose label is which of two word
    lists a sentence draws more from, 10% of labels flipped; returns the GLUE folder."""
    rng = random.Random(0)
    good, bad = ["good", "fine", "great", "warm", "bright"], ["bad", "dull", "poor", "cold", "grim"]
    neutral = ["the", "film", "a", "story", "was", "and", "its", "cast", "plot", "of"]

    def rows(n: int) -> str:
        out = ["sentence\tlabel"]
        for _ in range(n):
            k, label = rng.randint(1, 3), rng.randint(0, 1)
            words = [rng.choice(neutral) for _ in range(rng.randint(4, 30))]
            words += [rng.choice(good if label else bad) for _ in range(k)] + [rng.choice(good + bad)]
            rng.shuffle(words)
            out.append(" ".join(words) + f"\t{label if rng.random() > 0.1 else 1 - label}")
        return "\n".join(out) + "\n"

    (folder / "SST-2").mkdir(parents=True, exist_ok=True)
    (folder / "SST-2" / "train.tsv").write_text(rows(n_train), encoding="utf-8")
    (folder / "SST-2" / "dev.tsv").write_text(rows(n_dev), encoding="utf-8")
    return str(folder)


def encoder_config(vocab: int, args) -> ModelConfig:
    """Returns a RoBERTa-shaped nfeval config (post-LN, embedding LayerNorm, learned positions)."""
    return ModelConfig(
        vocab_size=vocab,
        n_layer=args.layers,
        d_model=args.d_model,
        n_head=args.heads,
        d_ffn=4 * args.d_model,
        max_seq_len=args.max_len,
        objective="mlm",
        norm_position="post",
        embedding_norm=True,
        final_norm=False,
    )


def run_nfeval(ckpt_dir: str, glue_dir: str, task: str, args) -> tuple[float, dict]:
    """Returns (seconds, {lr: (best-epoch metric, last-epoch metric)}) of nfeval's sweep."""
    recipe = glue.Recipe(
        epochs=args.epochs, batch_size=args.batch_size, max_len=args.max_len, eval_batch_size=64
    )
    out = tempfile.mkdtemp(prefix="nfeval-glue-bench-")
    t0 = time.perf_counter()
    cfg = GlueConfig(
        tasks=(task,),
        lrs=tuple(args.lrs),
        out_dir=out,
        glue_dir=glue_dir,
        recipe=recipe,
        device=args.device,
        progress=False,
        jobs=args.jobs,
    )
    summary = glue.sweep(ckpt_dir, cfg)
    seconds = time.perf_counter() - t0
    main = glue_metrics.MAIN_METRIC[task]
    scores = {}
    for lr in args.lrs:
        result_path = Path(point_dir(out, points.SWEEP, task, lr, 0)) / points.RESULT
        history = json.loads(result_path.read_text())["history"]
        scores[lr] = (max(h["metrics"][main] for h in history), history[-1]["metrics"][main])
    assert summary["tasks"][task]["metric"] == main
    return seconds, scores


def prepare_task(task: str, args, work: str) -> tuple[str, glue_data.TaskData, str]:
    """Returns (GLUE folder of the subset, its data, checkpoint folder) for ``task``: a BPE vocabulary
    trained on the subset and a random-init encoder."""
    glue_dir = subset_glue_dir(args.glue_dir, task, args.train, os.path.join(work, task, "glue"))
    data = glue_data.load_local(task, glue_dir)
    tok = train_bpe(data.train.text_a + (data.train.text_b or []), vocab_size=args.vocab)
    torch.manual_seed(0)
    ckpt_dir = os.path.join(work, task, "ckpt")
    checkpoint.save(ckpt_dir, Transformer(encoder_config(tok.get_vocab_size(), args)), tok)
    seqs = finetune.encode(tok, data.train, args.max_len)
    print(
        f"{task}: {len(data.train)} train / {sum(map(len, data.dev.values()))} dev examples, mean length "
        f"{sum(map(len, seqs)) / len(seqs):.1f} tokens (max_len {args.max_len})",
        flush=True,
    )
    return glue_dir, data, ckpt_dir


def report(task: str, times: dict[str, list[float]], scores: dict[str, dict], lrs) -> None:
    """Prints the task's dev metric per lr on each side and each side's fastest sweep time."""
    main = glue_metrics.MAIN_METRIC[task]
    sides = list(times)
    print(f"\n{task} ({main}, best epoch / last epoch)\n| lr | " + " | ".join(sides) + " |")
    print("|---" * (len(sides) + 1) + "|")
    for lr in lrs:
        print(
            f"| {lr:g} | "
            + " | ".join(f"{scores[s][lr][0]:.4f} / {scores[s][lr][1]:.4f}" for s in sides)
            + " |"
        )
    print(
        "| best over grid | "
        + " | ".join(f"{max(v[0] for v in scores[s].values()):.4f}" for s in sides)
        + " |"
    )
    best = {s: min(t) for s, t in times.items()}
    rounds = ", ".join(f"{s} " + "/".join(f"{t:.1f}" for t in ts) for s, ts in times.items())
    print(f"sweep wall time (fastest of {len(times['nfeval'])} round(s); all: {rounds} s)")
    for (hf, s), ratio in trainer_ratios(best).items():
        print(f"  {hf} / {s}: {best[hf]:.1f} s / {best[s]:.1f} s = {ratio:.2f}x")


def trainer_ratios(seconds: dict[str, float]) -> dict[tuple[str, str], float]:
    """Returns {(Trainer side, nfeval side): Trainer's seconds / nfeval's} for every pair of sides."""
    trainers = [s for s in seconds if s.startswith(TRAINER)]
    ours = [s for s in seconds if not s.startswith(TRAINER)]
    return {(hf, s): seconds[hf] / seconds[s] for hf in trainers for s in ours}


def trainer_orders(text: str) -> list[str]:
    """Returns the comma-separated Trainer batch orders of ``--trainer-order``; raises on an unknown one."""
    orders = text.split(",")
    unknown = [o for o in orders if o not in ("group_by_length", "random")]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown order {unknown[0]!r}: expected group_by_length or random")
    return orders


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--glue-dir", default=str(DEFAULT_GLUE))
    p.add_argument("--tasks", default="sst2,rte", help="comma-separated tasks (classification)")
    p.add_argument("--train", type=int, default=4000, help="training examples per task (random subset)")
    p.add_argument(
        "--lrs",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[float(x) for x in SEVEN_LRS.split(",")],
    )
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument(
        "--trainer-order",
        type=trainer_orders,
        default=["group_by_length"],
        help="the Trainer's batch orders, one side each: group_by_length (its fastest), random (a plain "
        "shuffle, on which it learned within ~0.01 of nfeval in glue_gap_probe.py, HISTORY.md session 6)",
    )
    p.add_argument(
        "--trainer-compile",
        choices=TRAINER_COMPILE,
        default="off",
        help="the Trainer's model under torch.compile (TrainingArguments.torch_compile): off, on, or both "
        "(one side each, interleaved)",
    )
    p.add_argument(
        "--trainer-flush-denormals",
        action="store_true",
        help="flush denormals in this process too (the Trainer's side; nfeval's --jobs workers always do, "
        "as the nfeval executable does): torch.set_flush_denormal before torch starts its threads",
    )
    p.add_argument("--device", default="cpu", help="both sides' device (cuda: bf16 on both)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds per side")
    p.add_argument("--threads", type=int, default=1, help="torch threads for both sides")
    p.add_argument("--jobs", type=int, default=1, help="nfeval's --jobs: N processes, cores / N threads each")
    args = p.parse_args(argv)
    args.trainer_compile = TRAINER_COMPILE[args.trainer_compile]
    return args


def sides_of(task: str, args, work: str) -> dict:
    """Returns {side: a call timing that side's sweep of ``task``} on one shared subset and checkpoint."""
    glue_dir, data, ckpt_dir = prepare_task(task, args, work)
    ckpt = checkpoint.load(ckpt_dir)
    sides = {"nfeval": functools.partial(run_nfeval, ckpt_dir, glue_dir, task, args)}
    for order in args.trainer_order:
        for compiled in args.trainer_compile:
            name = TRAINER if order == "group_by_length" else f"{TRAINER} ({order} order)"
            name += ", torch.compile" if compiled else ""
            sides[name] = functools.partial(run_trainer, ckpt, data, order, args, compiled)
    return sides


def interleaved(sides: dict, rounds: int) -> tuple[dict[str, list[float]], dict[str, dict]]:
    """Returns ({side: seconds per round}, {side: dev scores}) of ``rounds`` rounds, the order of the
    sides reversed every other round."""
    times: dict[str, list[float]] = {s: [] for s in sides}
    scores: dict[str, dict] = {}
    for r in range(rounds):
        for side in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            seconds, scores[side] = sides[side]()
            times[side].append(seconds)
            print(
                f"  round {r + 1}: {side} {seconds:.1f} s (load average {os.getloadavg()[0]:.2f})", flush=True
            )
    return times, scores


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.trainer_flush_denormals and not denormals.flush_in_this_process():
        raise SystemExit("could not flush denormals in every thread of this process")
    print(
        f"lrs {args.lrs}, {args.epochs} epochs, batch {args.batch_size}, {args.layers} layers "
        f"d={args.d_model}, torch threads {torch.get_num_threads()}, load average {os.getloadavg()}, "
        f"this process flushes denormals: {denormals.flushing()}"
    )
    # torch imports its optimizer machinery on the first step: paid here, not by the side timed first
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)], fused=True).step()
    work = tempfile.mkdtemp(prefix="glue-bench-")
    for task in args.tasks.split(","):
        times, scores = interleaved(sides_of(task, args, work), args.rounds)
        report(task, times, scores, args.lrs)


if __name__ == "__main__":
    main()
