"""``gpu_check.py``'s ``runs_sharing_device``: the GPU budget axis's small shapes (the scales ``24x64-gpu``
and ``12x128-gpu`` of ``nfeval.pipelines.scales``) train N runs at once on one device, N what
``--runs-per-gpu auto`` computes from ``nfeval.engine.training.memory``'s estimate
(``gpu_budget_axis.runs_at_once``, at most the CPU cores). This check measures what that buys: the
combined tokens/s of N runs at once against one run alone.

Each run is a process of its own holding an nfeval ``Trainer`` of the scale's recipe (Pre-LN, the
scale's batch, sequence length, bf16, fused AdamW; eager, as the axis trains) and calling its
``train_step`` as ``run()`` does. The processes start, build their trainers and warm up, then meet at a
barrier for each phase of each round: "alone" (run 0 trains for a fixed time while the others wait) and
"together" (all train for that time); the order of the two phases alternates from round to round. A
phase's tokens/s is a run's steps × its tokens a step over its own seconds, the device's queue drained;
the combined figure sums the runs'. In the dry run: 2 tiny runs on the CPU, one thread each.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import queue
import random
import statistics
import time
from pathlib import Path

import torch
from gpu_check_engine import Setup

SCALES = ("24x64-gpu", "12x128-gpu")
WARMUP_STEPS = 3
BARRIER_S = 600  # a run that never reaches the barrier (it crashed) breaks it for the others after this


def pseudo_word_corpus(path: Path, n_docs: int = 2000, n_words: int = 6000) -> str:
    """Writes a corpus of pseudo-words (a Zipf-like draw from ``n_words`` random letter strings), rich
    enough for a 2,048-token BPE vocabulary (the scales' ``vocab_size``); returns its path."""
    rng = random.Random(0)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(n_words)]
    weights = [1 / (k + 1) for k in range(n_words)]
    docs = [" ".join(rng.choices(words, weights, k=rng.randint(80, 200))) + "." for _ in range(n_docs)]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)


def scale_config(s: Setup, name: str, corpus: str):
    """Returns the TrainConfig of one run of scale ``name`` as the axis trains it (Pre-LN, the scale's
    recipe fields) on ``corpus``, with a budget no phase reaches; 2 layers of 2 × 32 tokens in the dry
    run."""
    from nfeval.engine.training.train_config import TrainConfig
    from nfeval.pipelines.scales import SCALE_TRAIN_FIELDS
    from nfeval.pipelines.scales import SCALES as ALL_SCALES

    scale = ALL_SCALES[name]
    fields = {f: getattr(scale, f) for f in SCALE_TRAIN_FIELDS} | {"grad_stats": None}
    model = dict(scale.model)
    if s.dry_run:
        fields |= {"batch_size": 2, "seq_len": 32, "dtype": "fp32", "eval_samples": 4}
        model |= {"n_layer": 2}
    return TrainConfig(
        preset=f"prenorm-{scale.size}", model=model, train_data=corpus, vocab_size=scale.vocab_size,
        warmup=scale.warmup, max_steps=10**9, device=str(s.device), progress=False, **fields,
    )  # fmt: skip


def train_for(trainer, step: int, seconds: float) -> tuple[int, float]:
    """Calls ``trainer.train_step`` from ``step`` on until ``seconds`` have passed; returns (steps, the
    seconds they took with the device's queue drained)."""
    from nfeval.engine.training.budget import synchronize

    synchronize(trainer.par.device)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        trainer.train_step(step + n, trainer.cfg.lr)
        n += 1
    synchronize(trainer.par.device)
    return n, time.perf_counter() - t0


def phases(rounds: int) -> list[tuple[int, str]]:
    """Returns the (round, phase) plan: "alone" then "together", the order reversed every other round."""
    plan = [("alone", "together"), ("together", "alone")]
    return [(r, phase) for r in range(rounds) for phase in plan[r % 2]]


def run_worker(rank: int, cfg, out_dir: str, rounds: int, seconds: float, barrier, results) -> None:
    """One run's process: builds its Trainer, warms up, then trains in every phase it takes part in,
    putting (round, phase, rank, tokens/s) on ``results``; ("error", rank, message) when it fails."""
    torch.set_num_threads(1)
    try:
        from nfeval.engine.training.trainer import Trainer

        trainer = Trainer(cfg, out_dir)
        for step in range(WARMUP_STEPS):
            trainer.train_step(step, cfg.lr)
        step = WARMUP_STEPS
        tokens = cfg.batch_size * cfg.seq_len
        for r, phase in phases(rounds):
            barrier.wait()
            if phase == "together" or rank == 0:
                n, took = train_for(trainer, step, seconds)
                step += n
                results.put((r, phase, rank, n * tokens / took))
            barrier.wait()
    except Exception as e:  # reported by the parent; the barrier is broken so that no run waits forever
        results.put(("error", rank, f"{type(e).__name__}: {e}"))
        barrier.abort()


def run_side_by_side(cfg, work: Path, n: int, rounds: int, seconds: float) -> dict[tuple[int, str], list]:
    """Starts ``n`` run processes of ``cfg`` and runs the phases; returns {(round, phase): [tokens/s of
    each run that trained]}. Raises RuntimeError naming the first run that failed."""
    ctx = mp.get_context("spawn")  # CUDA cannot be used in forked children
    barrier, out = ctx.Barrier(n, timeout=BARRIER_S), ctx.Queue()
    procs = [
        ctx.Process(target=run_worker, args=(k, cfg, str(work / f"run{k}"), rounds, seconds, barrier, out))
        for k in range(n)
    ]
    for p in procs:
        p.start()
    expected = rounds * (n + 1)
    got: dict[tuple[int, str], list] = {}
    try:
        for _ in range(expected):
            item = out.get(timeout=BARRIER_S + 60)
            if item[0] == "error":
                raise RuntimeError(f"run {item[1]} of {n}: {item[2]}")
            got.setdefault((item[0], item[1]), []).append(item[3])
    except queue.Empty:
        sent = sum(map(len, got.values()))
        raise RuntimeError(f"the runs sent {sent} of {expected} phase results") from None
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
    return got


def one_scale(s: Setup, name: str, corpus: str) -> dict:
    """Measures one scale: N from the memory estimate (2 in the dry run), its runs side by side against
    one alone; returns N, the tokens/s of one alone and of N together (medians of the rounds) and the
    ratio (median of the rounds' ratios)."""
    from gpu_budget_axis import runs_at_once

    from nfeval.engine.training.trainer import Trainer

    cfg = scale_config(s, name, corpus)
    prime = dataclasses.replace(cfg, device="cpu", dtype="fp32")
    Trainer(prime, str(s.work / f"prime-{name}"))  # tokenizes the corpus once, into the cache the runs read
    n = 2 if s.dry_run else runs_at_once(name, limit=mp.cpu_count())
    seconds = 0.5 if s.dry_run else 4.0
    got = run_side_by_side(cfg, s.work / f"sharing-{name}", n, s.rounds, seconds)
    alone = [got[(r, "alone")][0] for r in range(s.rounds)]
    together = [sum(got[(r, "together")]) for r in range(s.rounds)]
    return {
        "runs": n,
        "tokens_per_step": cfg.batch_size * cfg.seq_len,
        "alone_tokens_per_s": statistics.median(alone),
        "together_tokens_per_s": statistics.median(together),
        "combined_over_alone": statistics.median(t / a for t, a in zip(together, alone)),
    }


def runs_sharing_device(s: Setup) -> dict:
    """Measures ``SCALES`` one after the other; returns each one's figures prefixed by its name, and the
    rounds and seconds of each phase."""
    corpus = pseudo_word_corpus(s.work / "sharing-corpus.txt", n_docs=200 if s.dry_run else 2000)
    out: dict = {"rounds": s.rounds, "phase_s": 0.5 if s.dry_run else 4.0}
    for name in SCALES:
        out |= {f"{name} {k}": v for k, v in one_scale(s, name, corpus).items()}
    return out
