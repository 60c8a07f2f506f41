"""Requests whose continuation is longer than the model's context window.

Scoring such a continuation whole is impossible and scoring part of it gives another score than the
document's, so by default (``too_long="refuse"``) the first one is refused in one line naming the task and
document and the way through. ``too_long="truncate"`` scores it as lm-eval's HFLM does: the input is the
last ``max_length`` tokens before the continuation's last, so only the continuation's last ``max_length``
tokens are scored (and ``acc_per_token`` divides by those); each such document is recorded per task, so
the results say how many were scored so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..base.errors import DataError

FIX = (
    "pass --too-long truncate (nfeval zeroshot; --model_args too_long=truncate for nfeval lm-eval) to score "
    "such documents as lm-eval does, counted in the results, or a model with a longer context"
)


def where(instances: Sequence[Any] | None, index: int) -> tuple[str | None, int | None]:
    """Returns (task name, document id) of request ``index`` of an lm-eval request list (its Instances;
    (None, None) when the list is not known or shorter)."""
    if instances is None or index >= len(instances):
        return None, None
    request = instances[index]
    return getattr(request, "task_name", None), getattr(request, "doc_id", None)


def fit(
    requests: Sequence[tuple[Any, Sequence[int], Sequence[int]]],
    instances: Sequence[Any] | None,
    max_length: int,
    policy: str,
    truncated: dict[str, list[int]],
) -> list[tuple[Sequence[int], Sequence[int]]]:
    """Returns the (context tokens, continuation tokens) pairs of lm-eval's tokenized ``requests``, each
    continuation within ``max_length``: a longer one is a DataError naming its task and document
    (``instances``: the Instances the requests came from, in order) under ``policy`` "refuse"; under
    "truncate" its first tokens move to the context and its document id is added to
    ``truncated[task]``."""
    pairs = []
    for i, (_, context, continuation) in enumerate(requests):
        if len(continuation) > max_length:
            task, doc_id = where(instances, i)
            if policy != "truncate":
                named = f"{task} document {doc_id}: " if task is not None else ""
                raise DataError(
                    f"{named}an answer of {len(continuation)} tokens does not fit the model's context "
                    f"window ({max_length} tokens), so its score would be another text's; {FIX}"
                )
            cut = len(continuation) - max_length
            context, continuation = [*context, *continuation[:cut]], list(continuation[cut:])
            ids = truncated.setdefault(str(task), [])
            if doc_id not in ids:
                ids.append(doc_id)
        pairs.append((context, continuation))
    return pairs
