"""The fast scorer: log-likelihoods of token continuations with batched forward passes.

Requests are deduplicated by input tokens (choices that share ``context + continuation[:-1]``, as
single-token answers do, share one forward row), sorted longest first, right-padded into batches,
and the vocabulary projection is computed only at the positions whose next token is scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from tqdm import tqdm

# logits_at(idx (B, T), keep (B, T) bool) -> logits (keep.sum(), V) in row-major order of ``keep``
LogitsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class TokenLogLik(float):
    """A continuation's summed log-prob that also carries its token count (for per-token metrics)."""

    n_tokens: int

    def __new__(cls, value: float, n_tokens: int):
        obj = super().__new__(cls, value)
        obj.n_tokens = n_tokens
        return obj

    def __reduce__(self):
        return (TokenLogLik, (float(self), self.n_tokens))


def model_input(
    context: Sequence[int], continuation: Sequence[int], max_length: int
) -> tuple[list[int], int]:
    """Returns (input tokens, scored length): ``context + continuation`` minus its last token, cut from
    the left to ``max_length`` (as lm-eval's HFLM does)."""
    if not context or not continuation:
        raise ValueError("context and continuation must each have at least one token")
    if len(continuation) > max_length:
        raise ValueError(
            f"a continuation of {len(continuation)} tokens does not fit the model's context window "
            f"(max_length {max_length}); scoring it truncated would give a wrong score"
        )
    return list((list(context) + list(continuation))[-(max_length + 1) :][:-1]), len(continuation)


# At most this many scored positions per forward: their logits (and log-softmax) are positions × vocab
# floats, so long rolling windows at a large batch size would otherwise need tens of GB.
MAX_SCORED_POSITIONS = 8192


def plan_batches(
    order: list[tuple[int, ...]], scored: dict[tuple[int, ...], int], batch_size: int, max_positions: int
) -> list[list[tuple[int, ...]]]:
    """Returns ``order`` cut into batches of at most ``batch_size`` rows and ``max_positions`` scored
    positions (a row longer than that is a batch of its own)."""
    batches: list[list[tuple[int, ...]]] = []
    current, positions = [], 0
    for inp in order:
        if current and (len(current) == batch_size or positions + scored[inp] > max_positions):
            batches.append(current)
            current, positions = [], 0
        current.append(inp)
        positions += scored[inp]
    if current:
        batches.append(current)
    return batches


@torch.no_grad()
def score(
    logits_at: LogitsFn,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    max_length: int,
    batch_size: int,
    device: torch.device | str,
    pad_id: int = 0,
    progress: bool = True,
    max_positions: int = MAX_SCORED_POSITIONS,
) -> list[tuple[TokenLogLik, bool]]:
    """Returns (summed log-prob, greedy) for each (context tokens, continuation tokens) request.

    ``greedy`` is True when every continuation token is the argmax of its position's logits. Each
    batch costs one device-to-host copy."""
    prepared = [model_input(ctx, cont, max_length) for ctx, cont in requests]
    rows: dict[tuple[int, ...], list[int]] = {}  # input tokens -> request indices
    for i, (inp, _) in enumerate(prepared):
        rows.setdefault(tuple(inp), []).append(i)
    scored = {inp: max(prepared[i][1] for i in members) for inp, members in rows.items()}
    order = sorted(rows, key=lambda inp: (-len(inp), inp))
    results: list[tuple[TokenLogLik, bool] | None] = [None] * len(requests)
    pbar = tqdm(total=len(requests), desc="Scoring loglikelihood requests", disable=not progress)
    for batch in plan_batches(order, scored, batch_size, max_positions):
        width = len(batch[0])
        idx = torch.full((len(batch), width), pad_id, dtype=torch.long)
        keep = torch.zeros((len(batch), width), dtype=torch.bool)
        for r, inp in enumerate(batch):
            idx[r, : len(inp)] = torch.tensor(inp, dtype=torch.long)
            keep[r, len(inp) - scored[inp] : len(inp)] = True
        logprobs = F.log_softmax(logits_at(idx.to(device), keep.to(device)).float(), dim=-1)
        # Every request's continuation tokens, at its positions among the kept rows, gathered at once.
        members = [
            (i, offset + scored[inp])
            for offset, inp in zip(_offsets(batch, scored), batch)
            for i in rows[inp]
        ]
        positions, targets, owner = [], [], []
        for k, (i, end) in enumerate(members):
            cont = list(requests[i][1])
            positions.extend(range(end - len(cont), end))
            targets.extend(cont)
            owner.extend([k] * len(cont))
        pos = torch.tensor(positions, device=logprobs.device)
        tgt = torch.tensor(targets, device=logprobs.device)
        own = torch.tensor(owner, device=logprobs.device)
        token_lp = logprobs[pos, tgt]
        wrong = (logprobs[pos].argmax(dim=-1) != tgt).to(torch.int64)
        sums = torch.zeros(len(members), dtype=torch.float64, device=own.device).index_add_(
            0, own, token_lp.double()
        )
        misses = torch.zeros(len(members), dtype=torch.int64, device=own.device).index_add_(0, own, wrong)
        sums, misses = sums.tolist(), misses.tolist()  # the batch's one sync
        for k, (i, _) in enumerate(members):
            results[i] = (TokenLogLik(sums[k], len(requests[i][1])), misses[k] == 0)
        pbar.update(len(members))
    pbar.close()
    return results  # type: ignore[return-value]


def _offsets(batch: list[tuple[int, ...]], scored: dict[tuple[int, ...], int]) -> list[int]:
    """Returns where each row's kept positions start in the batch's flattened logits."""
    offsets, total = [], 0
    for inp in batch:
        offsets.append(total)
        total += scored[inp]
    return offsets
