"""The fast scorer: log-likelihoods of token continuations, packed as prefix trees.

Each request's model input is ``context + continuation`` minus its last token. Inputs are sorted so
that those sharing a prefix sit together, then packed into rows as prefix trees: a shared prefix
token appears once, each token attends only to its ancestors (a tree attention mask) and its
position id is its depth, so one forward scores every choice of a document. Rows are sorted by
length and cut into batches of at most ``max_batch_tokens`` (padding included). The vocabulary
projection runs only at the scored tree nodes, tiled over the vocabulary
(``engine.inference.vocab_head``), and
a log-prob is ``logit[target] - logsumexp``.

Without packing (a model that cannot take a tree mask) each distinct input is a row of its own,
run with the model's causal mask: the same code with chains instead of trees.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from ..base.device_memory import free_cached, halving_search
from ..base.errors import DeviceMemoryError
from ..base.progress import progress_bar
from ..engine.inference.backend import ModelShape
from ..engine.inference.vocab_head import VocabProjection, target_log_probs

# features_at(idx (B, T), keep (B, T) bool, position_ids (B, T) | None, attn_mask (B, 1, T, T) bool | None)
#   -> (features (keep.sum(), ·) in row-major order of ``keep``, the VocabProjection to logits)
FeaturesFn = Callable[..., tuple[torch.Tensor, VocabProjection]]

DEFAULT_BATCH_TOKENS = 8192  # padded tokens per forward
DEFAULT_PACK_TOKENS = 256  # tokens per packed row, at most max_length (the model's own bound on a row)


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


@dataclass
class Row:
    """One forward row: tree nodes in depth-first order (a parent before its children)."""

    tokens: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    paths: dict[int, list[int]] = field(default_factory=dict)  # request index -> its nodes, root first

    def ancestor_mask(self, width: int) -> torch.Tensor:
        """Returns (width, width) bool: True where node i may attend node j (j is i or its ancestor).

        In depth-first order j is an ancestor of i iff j <= i < end(j), end(j) being where j's subtree
        ends. Padding nodes attend only themselves."""
        n = len(self.tokens)
        end = list(range(1, width + 1))
        open_nodes: list[int] = []
        for i, depth in enumerate(self.depths):
            while open_nodes and self.depths[open_nodes[-1]] >= depth:
                end[open_nodes.pop()] = i
            open_nodes.append(i)
        for j in open_nodes:
            end[j] = n
        ar = torch.arange(width)
        return (ar[None, :] <= ar[:, None]) & (ar[:, None] < torch.tensor(end)[None, :])


def pack_rows(inputs: list[list[int]], pack_tokens: int, packed: bool) -> list[Row]:
    """Returns rows holding every input (``Row.paths`` keyed by index into ``inputs``).

    Packed: inputs in sorted order share their common prefix with the previous input of the row, and
    a row grows up to ``pack_tokens`` nodes. Unpacked: only identical inputs share a row."""
    rows: list[Row] = []
    prev: list[int] = []
    prev_path: list[int] = []
    for i in sorted(range(len(inputs)), key=lambda k: inputs[k]):
        inp = inputs[i]
        shared = 0
        while shared < min(len(prev), len(inp)) and prev[shared] == inp[shared]:
            shared += 1
        if packed:
            new_row = not rows or len(rows[-1].tokens) + len(inp) - shared > pack_tokens
        else:
            new_row = inp != prev
        if new_row:
            rows.append(Row())
            shared = 0
        row = rows[-1]
        path = prev_path[:shared]
        for depth in range(shared, len(inp)):
            path.append(len(row.tokens))
            row.tokens.append(inp[depth])
            row.depths.append(depth)
        row.paths[i] = path
        prev, prev_path = inp, path
    return rows


def plan_batches(widths: list[int], max_batch_tokens: int, max_rows: int | None = None) -> list[list[int]]:
    """Returns row indices cut into batches, longest rows first: each batch's rows × its widest row
    stays within ``max_batch_tokens`` (a row wider than that is a batch of its own) and ``max_rows``."""
    batches: list[list[int]] = []
    for r in sorted(range(len(widths)), key=lambda k: -widths[k]):
        if batches:
            batch = batches[-1]
            fits = (len(batch) + 1) * widths[batch[0]] <= max_batch_tokens
            if fits and (max_rows is None or len(batch) < max_rows):
                batch.append(r)
                continue
        batches.append([r])
    return batches


@dataclass
class ScoringStats:
    """What a scoring call did: tokens run, model FLOPs on real tokens and wall time."""

    requests: int = 0
    input_tokens: int = 0  # the requests' model inputs, summed (what unpacked scoring would run)
    tokens: int = 0  # tree nodes run (shared prefixes once)
    padded_tokens: int = 0  # tokens including padding
    scored_positions: int = 0  # positions the vocabulary projection ran at
    attended_pairs: int = 0  # (query, key) pairs allowed by the masks, padding excluded
    flops: float = 0.0
    wall_s: float = 0.0

    def add(self, other: ScoringStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def report(self, peak_flops: float, peak_source: str) -> dict[str, float | int | str]:
        """Returns the counts plus achieved FLOP/s and its fraction of ``peak_flops`` (JSON-ready)."""
        achieved = self.flops / self.wall_s if self.wall_s > 0 else 0.0
        return {**asdict(self), "flop_per_s": achieved, "peak_flop_per_s": peak_flops,
                "peak_source": peak_source, "fraction_of_peak": achieved / peak_flops}  # fmt: skip


def describe(report: dict) -> str:
    """Returns a scoring report (``ScoringStats.report``) as lines for the printed table: the scoring
    phase, then the whole command when the report has its wall time (``with_command``)."""
    lines = (
        f"scoring: {report['wall_s']:.1f} s, {report['requests']} requests, {report['tokens']:,} tokens run "
        f"({report['input_tokens']:,} unpacked), {report['flops'] / 1e9:,.1f} GFLOP\n"
        f"scoring achieved {report['flop_per_s'] / 1e9:,.1f} GFLOP/s = "
        f"{100 * report['fraction_of_peak']:.1f}% of {report['peak_flop_per_s'] / 1e9:,.1f} GFLOP/s "
        f"({report['peak_source']})"
    )
    if "command_wall_s" not in report:
        return lines
    return lines + (
        f"\nwhole command: {report['command_wall_s']:.1f} s, "
        f"{report['command_flop_per_s'] / 1e9:,.1f} GFLOP/s = "
        f"{100 * report['command_fraction_of_peak']:.1f}% of peak (scoring is "
        f"{100 * report['wall_s'] / report['command_wall_s']:.0f}% of it)"
    )


def with_command(report: dict, command_wall_s: float) -> dict:
    """Returns ``report`` plus the whole command's wall time and the FLOP/s over it."""
    achieved = report["flops"] / command_wall_s if command_wall_s > 0 else 0.0
    return {**report, "command_wall_s": command_wall_s, "command_flop_per_s": achieved,
            "command_fraction_of_peak": achieved / report["peak_flop_per_s"]}  # fmt: skip


@torch.no_grad()
def score(
    features_at: FeaturesFn,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    max_length: int,
    device: torch.device | str,
    pad_id: int = 0,
    packed: bool = True,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    max_rows: int | None = None,
    pack_tokens: int = DEFAULT_PACK_TOKENS,
    shape: ModelShape | None = None,
    stats: ScoringStats | None = None,
    progress: bool = True,
) -> list[tuple[TokenLogLik, bool]]:
    """Returns (summed log-prob, greedy) for each (context tokens, continuation tokens) request.

    ``greedy`` is True when every continuation token is the argmax of its position's logits. Each
    batch's results come back in one device-to-host copy. ``stats`` (when given) is increased by this
    call's work."""
    start = time.perf_counter()
    prepared = [model_input(ctx, cont, max_length) for ctx, cont in requests]
    rows = pack_rows([inp for inp, _ in prepared], min(pack_tokens, max_length), packed)
    results: list[tuple[TokenLogLik, bool] | None] = [None] * len(requests)
    run = ScoringStats(requests=len(requests), input_tokens=sum(len(inp) for inp, _ in prepared))
    pbar = progress_bar(total=len(requests), desc="Scoring loglikelihood requests", enabled=progress)
    for batch in plan_batches([len(r.tokens) for r in rows], max_batch_tokens, max_rows):
        picked = [rows[r] for r in batch]
        try:
            scored = _score_batch(features_at, picked, requests, device, pad_id, packed, run)
        except torch.OutOfMemoryError:
            scored = None  # probed below, outside the handler: its traceback holds the batch's tensors
        if scored is None:
            pbar.close()
            raise _did_not_fit(features_at, picked, requests, device, pad_id, packed)
        for i, (total, greedy) in scored:
            results[i] = (TokenLogLik(total, len(requests[i][1])), greedy)
        pbar.update(sum(len(row.paths) for row in picked))
    pbar.close()
    run.wall_s = time.perf_counter() - start
    if shape is not None:
        run.flops = shape.flops(run.tokens, run.attended_pairs, run.scored_positions)
    if stats is not None:
        stats.add(run)
    return results  # type: ignore[return-value]


def _did_not_fit(features_at, rows, requests, device, pad_id, packed) -> DeviceMemoryError:
    """Returns the one-line error for a batch of ``rows`` that ran out of ``device``'s memory, naming the
    most of its rows that one forward scores (tried at halving sizes) as a ``--max-batch-tokens``."""
    width = len(rows[0].tokens)
    said = (
        f"a scoring batch of {len(rows)} × {width} tokens (rows × padded width) does not fit in the memory "
        f"of {device}"
    )
    fits = halving_search(
        lambda n: _score_batch(features_at, rows[:n], requests, device, pad_id, packed, ScoringStats()),
        len(rows),
        lambda: free_cached(device),
    )
    if fits == 0:
        return DeviceMemoryError(
            f"{said}, nor does one row: score with a shorter --max-length or more memory"
        )
    return DeviceMemoryError(
        f"{said}; the largest that fits is {fits} × {width} (forward tried at halving sizes): rerun with "
        f"--max-batch-tokens {fits * width}"
    )


def _score_batch(features_at, rows, requests, device, pad_id, packed, run):
    """Returns (request index, (summed log-prob, greedy)) for the batch's requests, in one sync."""
    width = len(rows[0].tokens)
    idx = torch.full((len(rows), width), pad_id, dtype=torch.long)
    keep = torch.zeros((len(rows), width), dtype=torch.bool)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long) if packed else None
    mask = torch.zeros((len(rows), 1, width, width), dtype=torch.bool) if packed else None
    pairs = []  # (flattened position, target token, k: the request's place in ``owners``)
    owners = []  # request indices
    for b, row in enumerate(rows):
        idx[b, : len(row.tokens)] = torch.tensor(row.tokens)
        if packed:
            position_ids[b, : len(row.tokens)] = torch.tensor(row.depths)
            mask[b, 0] = row.ancestor_mask(width)
            run.attended_pairs += int(mask[b, 0, : len(row.tokens)].sum())
        else:
            run.attended_pairs += len(row.tokens) * (len(row.tokens) + 1) // 2
        for i, path in row.paths.items():
            cont = requests[i][1]
            for node, target in zip(path[len(path) - len(cont) :], cont):
                keep[b, node] = True
                pairs.append((b * width + node, target, len(owners)))
            owners.append(i)
    run.tokens += sum(len(row.tokens) for row in rows)
    run.padded_tokens += idx.numel()
    run.scored_positions += int(keep.sum())
    features, projection = features_at(
        idx.to(device), keep.to(device),
        position_ids=None if position_ids is None else position_ids.to(device),
        attn_mask=None if mask is None else mask.to(device),
    )  # fmt: skip
    # each kept (flattened) position's row in ``features``: they are in row-major order of ``keep``
    where = torch.full((keep.numel(),), -1, dtype=torch.long)
    where[keep.flatten()] = torch.arange(int(keep.sum()))
    flat, target, owner = (torch.tensor(col) for col in zip(*pairs))
    at = where[flat].to(features.device)
    target, owner = target.to(features.device), owner.to(features.device)
    token_lp, wrong = target_log_probs(features, projection, at, target)
    sums = torch.zeros(len(owners), dtype=torch.float64, device=owner.device).index_add_(
        0, owner, token_lp.double()
    )
    misses = torch.zeros(len(owners), dtype=torch.int64, device=owner.device).index_add_(0, owner, wrong)
    sums, misses = sums.tolist(), misses.tolist()  # the batch's one sync
    return [(i, (sums[k], misses[k] == 0)) for k, i in enumerate(owners)]
