"""The judging set: every judged run's final perplexity on the whole validation split, one loss per
sequence, so that a verdict reads the same text for every run and knows how much that text's sampling
moves it.

A run's mid-run evaluations read its first ``eval_samples`` validation sequences (64 × 128 tokens at
the CPU scales: 8,192 tokens), enough to draw a curve and to tune on, not to judge a difference of
±0.02 log-PPL. Every run a report judges (``pipelines.runs.ensure_run``) is therefore read once more
when it has trained: every causal-LM block of the validation stream (``seq_len`` targets each, the
trainer's own blocks in order, no shuffling; a masked LM's masks drawn from the run's seed as its own
validation draws them), each block's summed loss kept in the run record's ``judge`` block.

The per-measurement error. Every judged run of a comparison reads the same sequences, so the
validation text's sampling error is shared by all seeds and does not average out over them: the
verdict adds it to the seeds' spread (``report.verdict``'s e): the standard error, over sequences, of
each sequence's loss difference pooled over the seeds (``measurement_se``), how far the claim's mean
would move on another validation split of the same size from the same text.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from ..base.jsonio import load_json
from ..engine.checkpoints import checkpoint
from ..engine.text.data import Batches, open_token_shards
from ..engine.text.tokenization import special_ids
from ..engine.training.parallel import resolve_device
from ..engine.training.run_inputs import build_inputs
from ..engine.training.train_config import TrainConfig

JUDGE = "judge"  # the run record's block
BATCH = 32  # sequences per forward: memory, not the result, depends on it
RULE = (
    "final perplexity on the whole validation split (every sequence of the trainer's validation blocks); "
    "per-measurement error: the standard error over sequences of the seeds' mean per-sequence loss "
    "difference (the sequences are shared by every seed, so that error does not average out over seeds)"
)


def sequence_losses(
    model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """Returns (summed loss, target count) of each sequence of ``inputs``/``targets`` (N × T; targets
    -100 are not scored) under ``model`` (a ``Transformer``), ``BATCH`` sequences per forward, in float64
    sums."""
    losses, counts = [], []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(inputs), BATCH):
            x = inputs[start : start + BATCH].to(device)
            y = targets[start : start + BATCH].to(device)
            keep = y != -100
            flat = model.loss(x, y, reduction="none").double()
            if model.cfg.causal:  # every position comes back, in (sequence, position) order
                per = (flat.view(len(x), -1) * keep).sum(dim=1)
            else:  # masked LM: only the masked positions come back, in (sequence, position) order
                per = torch.zeros(len(x), dtype=torch.float64, device=flat.device)
                per.index_add_(0, keep.nonzero()[:, 0], flat)
            losses.append(per.cpu().numpy())
            counts.append(keep.sum(dim=1).cpu().numpy())
    return np.concatenate(losses), np.concatenate(counts).astype(np.int64)


def validation_blocks(
    cfg: TrainConfig,
    seq_len: int,
    objective: str,
    recorded: dict[str, Any] | None = None,
    tokenizer: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (inputs, targets) of every validation block of ``cfg``'s corpus and tokenizer, in stream
    order: from the token shards the run recorded (``recorded``: config.json's ``train.data.tokens``, with
    the run's ``tokenizer``) while the cache holds them with that fingerprint, which reads no corpus text;
    else built from ``cfg``'s inputs (read and tokenized into the cache when they are not there)."""
    folder, data = (recorded or {}).get("path"), None
    if folder and tokenizer is not None and os.path.isfile(os.path.join(folder, "meta.json")):
        data = open_token_shards(folder, special_ids(tokenizer))
        data = data if data.fingerprint == recorded.get("fingerprint") else None
    if data is None:
        _, tok_json, folder = build_inputs(cfg)
        tokenizer = Tokenizer.from_str(tok_json)
        data = open_token_shards(folder, special_ids(tokenizer))
    vocab = tokenizer.get_vocab_size()
    batches = Batches(data.valid, seq_len, objective, data.specials, vocab, cfg.seed, False)
    return batches.get(0, batches.blocks.n_blocks, mask_seed=cfg.seed)


def judge_run(directory: str, cfg: TrainConfig, device: str = "auto") -> dict[str, Any]:
    """Returns the ``judge`` block of the finished run in ``directory`` (trained from ``cfg``): its
    perplexity and mean loss on the whole validation split, the number of sequences and targets, and each
    sequence's summed loss and target count (rounded to 6 significant digits, so a record stays small and
    its numbers are what every verdict reads)."""
    where = resolve_device(None if device == "auto" else device, cpu_fallback=True)
    ckpt = checkpoint.materialize(checkpoint.read(directory), device=where)
    model = ckpt.model
    train = load_json(os.path.join(directory, "config.json"))["train"]
    recorded = (train.get("data") or {}).get("tokens")
    inputs, targets = validation_blocks(
        cfg, int(train["seq_len"]), model.cfg.objective, recorded, ckpt.tokenizer
    )
    losses, counts = sequence_losses(model, inputs, targets, where)
    rounded = [float(f"{v:.6g}") for v in losses]
    total, n = float(sum(rounded)), int(counts.sum())
    uniform = len(set(counts.tolist())) == 1
    return {
        "ppl": math.exp(total / n),
        "loss": total / n,
        "sequences": len(rounded),
        "tokens": n,
        "fingerprint": ckpt.fingerprint,
        "sequence_loss_sums": rounded,
        "sequence_tokens": int(counts[0]) if uniform else counts.tolist(),
        "rule": RULE,
    }


def judged(record: dict[str, Any]) -> dict[str, Any] | None:
    """Returns a run record's judging block, or None (a run read before judging sets existed)."""
    return record.get(JUDGE)


def _sums_and_counts(block: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    sums = np.asarray(block["sequence_loss_sums"], dtype=np.float64)
    return sums, np.broadcast_to(np.asarray(block["sequence_tokens"], dtype=np.float64), sums.shape)


def measurement_se(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> float | None:
    """Returns the per-measurement error of a claim on log PPL(first) − log PPL(second) over the seeds'
    record ``pairs`` (see the module docstring), or None when a record has no judging block or the pairs
    did not read the same sequences.

    Sequence j's difference is pooled over the seeds, D_j = Σ_s (a_sj − b_sj) ÷ Σ_s n_sj (a, b: its summed
    losses, n: its targets, the same for both runs of a seed), weighted by w_j = Σ_s n_sj (a masked LM's
    sequences differ in targets; a causal LM's all hold seq_len); the error is the standard error of that
    weighted mean (a ratio estimator), over the sequences with a target."""
    blocks = [(judged(a), judged(b)) for a, b in pairs]
    if not blocks or any(a is None or b is None for a, b in blocks):
        return None
    if len({(a["sequences"], b["sequences"]) for a, b in blocks}) != 1:
        return None
    diff, weight = 0.0, 0.0
    for a, b in blocks:
        (sum_a, count), (sum_b, _) = _sums_and_counts(a), _sums_and_counts(b)
        diff, weight = diff + (sum_a - sum_b), weight + count
    keep = weight > 0
    if keep.sum() < 2:
        return None
    d, w = diff[keep] / weight[keep], weight[keep] / weight[keep].sum()
    mean = float((w * d).sum())
    n = len(d)
    return math.sqrt(float((w**2 * (d - mean) ** 2).sum()) * n / (n - 1))
