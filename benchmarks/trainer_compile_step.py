"""One fine-tuning step of the GLUE benchmark's HF model, eager against ``torch.compile``, steady state.

glue_sweep.py's ``--trainer-compile both`` times whole Trainer runs, compilation included. This asks
the other question: once compiled, is a step faster? It gives compilation its best case: one fixed
batch shape (no recompiles for new lengths), a warm-up that pays every compile, then steps timed in
interleaved rounds (eager, compiled, alternating order), median. The model is glue_sweep's: a
``RobertaForSequenceClassification`` of the sweep's shape, dropout on, AdamW (fused), forward, backward
and step, as the Trainer runs them.

    OMP_NUM_THREADS=2 python benchmarks/trainer_compile_step.py --threads 2 --rows 32 --tokens 82
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch


def roberta(args):
    """Returns a random-init ``RobertaForSequenceClassification`` of glue_sweep's shape, SDPA attention."""
    from transformers import RobertaConfig, RobertaForSequenceClassification

    cfg = RobertaConfig(
        vocab_size=args.vocab,
        hidden_size=args.d_model,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.d_model,
        max_position_embeddings=args.tokens + 4,
        num_labels=2,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return RobertaForSequenceClassification(cfg)


def step_seconds(model, opt, batch, steps: int) -> float:
    """Returns the mean seconds of ``steps`` training steps (forward, backward, AdamW) on ``batch``."""
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / steps


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--tokens", type=int, default=82, help="tokens per row (RTE's mean 81.8, SST-2's 15.9)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=10, help="timed steps per side per round")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    eager = roberta(args).train()
    compiled_model = copy.deepcopy(eager)
    t0 = time.perf_counter()
    compiled = torch.compile(compiled_model)
    opts = {
        "eager": torch.optim.AdamW(eager.parameters(), lr=1e-5, fused=True),
        "compiled": torch.optim.AdamW(compiled_model.parameters(), lr=1e-5, fused=True),
    }
    models = {"eager": eager, "compiled": compiled}
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(4, args.vocab, (args.rows, args.tokens), generator=g),
        "attention_mask": torch.ones(args.rows, args.tokens, dtype=torch.long),
        "labels": torch.randint(0, 2, (args.rows,), generator=g),
    }
    step_seconds(compiled, opts["compiled"], batch, 3)  # compiles forward and backward
    compile_s = time.perf_counter() - t0
    step_seconds(eager, opts["eager"], batch, 3)
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for r in range(args.rounds):
        for side in ("eager", "compiled") if r % 2 == 0 else ("compiled", "eager"):
            times[side].append(step_seconds(models[side], opts[side], batch, args.steps))
    med = {s: statistics.median(t) for s, t in times.items()}
    print(
        f"RobertaForSequenceClassification L={args.layers} d={args.d_model}, batch {args.rows} x "
        f"{args.tokens} tokens, {torch.get_num_threads()} thread(s), {args.rounds} interleaved rounds of "
        f"{args.steps} steps, median; load average {os.getloadavg()}"
    )
    print(f"  compile + 3 warm-up steps: {compile_s:.1f} s")
    for side, seconds in med.items():
        rounds = "/".join(f"{1e3 * t:.0f}" for t in times[side])
        print(f"  {side}: {1e3 * seconds:.1f} ms a step (rounds {rounds})")
    print(f"  eager / compiled: {med['eager'] / med['compiled']:.2f}x")


if __name__ == "__main__":
    main()
