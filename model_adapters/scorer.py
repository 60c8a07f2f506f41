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
) -> list[tuple[TokenLogLik, bool]]:
    """Returns (summed log-prob, greedy) for each (context tokens, continuation tokens) request.

    ``greedy`` is True when every continuation token is the argmax of its position's logits.
    """
    prepared = [model_input(ctx, cont, max_length) for ctx, cont in requests]
    rows: dict[tuple[int, ...], list[int]] = {}  # input tokens -> request indices
    for i, (inp, _) in enumerate(prepared):
        rows.setdefault(tuple(inp), []).append(i)
    order = sorted(rows, key=lambda inp: (-len(inp), inp))
    results: list[tuple[TokenLogLik, bool] | None] = [None] * len(requests)
    pbar = tqdm(total=len(requests), desc="Scoring loglikelihood requests", disable=not progress)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        width = len(batch[0])
        idx = torch.full((len(batch), width), pad_id, dtype=torch.long)
        keep = torch.zeros((len(batch), width), dtype=torch.bool)
        for r, inp in enumerate(batch):
            idx[r, : len(inp)] = torch.tensor(inp, dtype=torch.long)
            longest = max(prepared[i][1] for i in rows[inp])
            keep[r, len(inp) - longest : len(inp)] = True
        logits = logits_at(idx.to(device), keep.to(device))
        logprobs = F.log_softmax(logits.float(), dim=-1)
        greedy_ids = logprobs.argmax(dim=-1)
        offset = 0
        for r, inp in enumerate(batch):
            n_kept = int(keep[r].sum())
            row_lp, row_greedy = logprobs[offset : offset + n_kept], greedy_ids[offset : offset + n_kept]
            offset += n_kept
            for i in rows[inp]:
                cont = torch.tensor(list(requests[i][1]), dtype=torch.long, device=row_lp.device)
                n = len(cont)
                lp = row_lp[n_kept - n :].gather(1, cont[:, None]).squeeze(1)
                greedy = bool((row_greedy[n_kept - n :] == cont).all())
                results[i] = (TokenLogLik(float(lp.sum()), n), greedy)
            pbar.update(len(rows[inp]))
    pbar.close()
    return results  # type: ignore[return-value]
