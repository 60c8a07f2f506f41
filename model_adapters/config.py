"""``ScoringConfig``: how ``NFEvalLM`` scores (device, precision, batches, context, prefix), built by
``nfeval zeroshot`` (``ZeroShotConfig.scoring``), by Python callers, or from lm-eval's model arguments
(``--model_args``, ``--batch_size``, ``--device``) by ``from_model_args``; the fields that are flags of
``nfeval zeroshot`` declare them (``base.config_flags``). Imports neither torch nor lm-eval."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base.cli_args import (
    DEVICE_HELP,
    device_name,
    dtype_spellings,
    dtype_type,
    positive_int,
    positive_int_or_auto,
)
from ..base.config_flags import flag_field
from ..base.errors import ConfigError

TRUE, FALSE = ("1", "true", "yes"), ("0", "false", "no")
DTYPES = ("fp32", "bf16", "fp16")
TOO_LONG_CHOICES = ("refuse", "truncate")


@dataclass(frozen=True)
class ScoringConfig:
    """How a model scores requests.

    ``batch_size``: rows per batch (a row packs many requests, see scorer.py), or ``auto``: bounded by
    ``max_batch_tokens`` (padded tokens per forward; default ``scorer.DEFAULT_BATCH_TOKENS``) and
    ``max_batch_size`` rows only. ``add_bos_token``: prepend ``prefix_token_id`` to every scored text;
    None: True for nfeval checkpoints (fairseq prepends ``</s>``), the tokenizer's own behaviour for HF
    models (as HFLM). ``pack=False`` scores each distinct input as a row of its own (what a model that
    fails the tree probe gets). ``hf_forward``: for a HF GPT-2 directory, "engine" (nfeval's forward,
    when it reproduces the model) or "transformers". ``too_long``: what a continuation longer than the
    context window gets: "refuse" (a UserError naming the task and document) or "truncate" (lm-eval's
    window, its last ``max_length`` tokens; the documents are recorded).
    """

    device: str | None = flag_field(None, DEVICE_HELP, type=device_name)  # None or auto: CUDA when available
    # a name in either spelling (fp32/float32, bf16/bfloat16, fp16/float16) or a torch dtype
    dtype: Any = flag_field("fp32", dtype_spellings(DTYPES) + ".", type=dtype_type(DTYPES), metavar="DTYPE")
    batch_size: int | str = flag_field(
        16,
        "rows per forward (a row packs many requests), or auto: bounded by --max-batch-tokens only",
        type=positive_int_or_auto,
    )
    max_batch_size: int | None = None
    max_batch_tokens: int | None = flag_field(
        None, "padded tokens per forward (default 8192; bounds memory)", type=positive_int
    )
    max_length: int | None = flag_field(  # None: the model's
        None, "context window (default: the model's)", type=positive_int
    )
    hf_forward: str = flag_field(
        "engine",
        "a Hugging Face GPT-2 directory: nfeval's engine when it reproduces the model (default), "
        "or transformers' own forward and generate (to cross-check; zero-shot caches it apart)",
        choices=("engine", "transformers"),
    )
    too_long: str = flag_field(
        "refuse",
        "a document whose answer is longer than the context window: refuse (one line naming the task and "
        "document; default) or truncate (score it as lm-eval does, on the window's last tokens; counted in "
        "the results' nfeval.truncated)",
        choices=TOO_LONG_CHOICES,
    )
    progress: bool = flag_field(True, "no progress bars", name="no-progress", action="store_false")
    add_bos_token: bool | None = None
    prefix_token_id: int | None = None
    fold_head_scale: bool = True  # fold HeadScale's gains into the output projection (same function)
    pack: bool = True

    @classmethod
    def from_model_args(cls, args: Mapping[str, Any]) -> ScoringConfig:
        """Returns the config of lm-eval's model arguments (``--model_args k=v,...`` as lm-eval parses them,
        with its ``batch_size``, ``max_batch_size`` and ``device``), each read as its field's type.
        ConfigError names an unknown argument or a value of the wrong kind."""
        unknown = sorted(set(args) - set(_HINTS))
        if unknown:
            raise ConfigError(
                f"--model_args: unknown argument(s) {unknown}; expected pretrained, tokenizer or any of "
                f"{sorted(_HINTS)}"
            )
        return cls(**{name: _read(name, value) for name, value in args.items()})


_HINTS = typing.get_type_hints(ScoringConfig)


def _read(name: str, value: Any) -> Any:
    """Returns model argument ``name``'s ``value`` as its field's type: lm-eval passes its own options as
    strings (``--batch_size 8``), and a user may write ``pack=1`` or ``progress=no``."""
    kinds = set(typing.get_args(_HINTS[name])) or {_HINTS[name]}
    if value is None or (isinstance(value, bool) and bool in kinds):
        return value
    text = str(value).strip().lower()
    if bool in kinds:
        if text not in TRUE + FALSE:
            raise ConfigError(f"--model_args: {name}={value!r}: expected true or false")
        return text in TRUE
    if int in kinds and text.isdigit():
        return int(text)
    if int in kinds and str not in kinds:
        raise ConfigError(f"--model_args: {name}={value!r}: expected a non-negative integer")
    return value
