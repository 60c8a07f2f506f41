"""``nfeval generate``: continuations of prompts from a checkpoint, printed and written as JSONL.

The model is an nfeval run or checkpoint directory, a Hugging Face causal-LM directory (a GPT-2 the
engine reproduces, weights, tokenizer and generation settings, generates in the engine
(``engine.fast.hf_gpt2_backend``); any other, or any with ``--hf-forward transformers``, with the HF
model's own ``generate``) or a fairseq checkpoint file (``--tokenizer`` gives its tokenizer: GPT-2's BPE
folder, mapped through the dict.txt beside it or ``--fairseq-dict``). Prompts get the same prefix as
scored texts (``</s>`` for nfeval and fairseq models, the tokenizer's own special tokens for HF models).
The JSONL file starts with a header line (provenance, model fingerprint, settings, the CPU linear kernel:
``Backend.linear_kernel``), then one line per prompt. Weights are fp32 unless ``--dtype`` says otherwise.
The path is read by ``engine.checkpoints.loading.identify``; an nfeval or fairseq checkpoint generates
through ``engine.inference.backend.NFEvalBackend`` (the zero-shot scorer's backend) with torch and
tokenizers alone, and only an HF model directory the engine does not reproduce imports transformers
(through ``model_adapters``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from ..base.artifacts import atomic_write_text, provenance
from ..base.cli_args import (
    DEVICE_HELP,
    LONG_NAMES,
    device_name,
    device_or_none,
    dtype_spellings,
    dtype_type,
    positive_int,
)
from ..base.config_flags import add_config_flags, config_from_args, flag_field
from ..base.errors import ConfigError, DataError, MissingDataError
from ..base.outputs import check_output_file
from ..engine.checkpoints import loading
from ..engine.fast.speed import accelerate
from ..engine.inference.backend import Backend, nfeval_backend
from ..engine.inference.generate import Sampling
from ..engine.model.dtypes import torch_dtype
from ..engine.text.fairseq_tokenizer import FairseqReading
from ..engine.training.parallel import resolve_device
from ..model_adapters.backends import open_backend
from ..model_adapters.config import ScoringConfig


def read_prompts(path: str) -> list[str]:
    """Returns the prompts of a file: one per non-empty line, or a ``"prompt"`` per line of a .jsonl file."""
    if not os.path.isfile(path):
        raise MissingDataError(f"{path}: prompts file not found (expected one prompt per line)")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError as e:
        byte = f"byte {e.start} is {e.object[e.start]:#x}"
        raise DataError(f"{path}: not UTF-8 text ({byte}); save it as UTF-8") from None
    if not path.endswith(".jsonl"):
        prompts = [line for line in lines if line.strip()]
    else:
        prompts = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {n}: invalid JSON ({e.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
                raise DataError(f'{path}: line {n}: expected an object with a string field "prompt"')
            prompts.append(record["prompt"])
    if not prompts:
        raise DataError(f"{path}: no prompts (expected one prompt per line)")
    return prompts


def load_backend(
    path: str,
    device: torch.device,
    dtype: torch.dtype,
    tokenizer: str | None = None,
    fairseq_dict: str | None = None,
    fairseq_head_scale_bug: bool = False,
    hf_forward: str = "engine",
) -> tuple[Backend, dict[str, Any]]:
    """Returns (backend, model block with path/kind/fingerprint/forward_by) for any ``--ckpt`` nfeval
    accepts (``loading.identify``; ``tokenizer``/``fairseq_dict``/``fairseq_head_scale_bug`` as it takes
    them; ``hf_forward`` for a HF directory, as ``ScoringConfig.hf_forward``)."""
    identity = loading.identify(
        path, tokenizer=tokenizer, fairseq_dict=fairseq_dict, fairseq_head_scale_bug=fairseq_head_scale_bug
    )
    if identity.loaded is None:  # a HF directory: the engine where it reproduces it, else transformers
        backend, kind = open_backend(identity, device, dtype, hf_forward=hf_forward), "hf"
    else:
        backend = accelerate(nfeval_backend(identity.loaded, device, dtype))
        kind = identity.loaded.meta.get("source", "nfeval")
    block = {"kind": kind, "path": identity.path, "fingerprint": identity.fingerprint}
    return backend, block | {"forward_by": backend.forward_by}


def cut_at_stop(text: str, stop: list[str]) -> str:
    """Returns ``text`` up to the first occurrence of any non-empty stop string."""
    for s in stop:
        if s:
            text = text.split(s)[0]
    return text


def generate_texts(
    backend,
    prompts: list[str],
    max_new_tokens: int,
    sampling: Sampling,
    stop: list[str],
    batch_size: int,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Returns one record per prompt: prompt, completion (cut before a stop string), new tokens, finish
    reason (``stop``, ``eos`` or ``length``)."""
    ids = [backend.encode(p, backend.add_bos_default) for p in prompts]
    new = backend.generate(ids, max_new_tokens, sampling, stop, batch_size, progress)
    records = []
    for prompt, tokens in zip(prompts, new):
        text = backend.decode(tokens)
        completion = cut_at_stop(text, stop)
        finish = "stop" if completion != text else "length" if len(tokens) == max_new_tokens else "eos"
        records.append(
            {"prompt": prompt, "completion": completion, "new_tokens": len(tokens), "finish": finish}
        )
    return records


DTYPES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class GenerateOptions:
    """What ``nfeval generate`` does besides sampling (``Sampling``) and reading a fairseq file
    (``FairseqReading``): the prompts (``prompt``, or a ``prompts`` file), how many new tokens, the stop
    strings, the batch size, where the JSONL goes, and the device and dtype. Each field is a flag
    (``base.config_flags``)."""

    ckpt: str = flag_field(help="nfeval run/checkpoint dir, HF model dir or fairseq .pt file", required=True)
    prompt: list[str] = flag_field(help="a prompt (repeatable)", factory=list, action="append")
    prompts: str | None = flag_field(
        None, "one prompt per line, or .jsonl with a 'prompt' field", metavar="FILE"
    )
    max_new_tokens: int = flag_field(64, "new tokens per prompt (default 64)", type=positive_int)
    stop: list[str] = flag_field(help="stop string (repeatable)", factory=list, action="append")
    batch_size: int = flag_field(16, "prompts per batch (default 16)", type=positive_int)
    output: str | None = flag_field(None, "write the continuations as JSONL", metavar="FILE.jsonl")
    device: str = flag_field("auto", DEVICE_HELP, type=device_name)
    dtype: str = flag_field(
        "fp32", f"{dtype_spellings(DTYPES)} (default fp32)", type=dtype_type(DTYPES), metavar="DTYPE"
    )


# the flags in the order of the help; --prompt and --prompts are one required, exclusive choice
FLAGS = (
    (GenerateOptions, "max_new_tokens"),
    (Sampling, None),
    (GenerateOptions, "stop batch_size output"),
    (FairseqReading, None),
    (GenerateOptions, "device dtype"),
    (ScoringConfig, "hf_forward"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval generate``'s flags: GenerateOptions', Sampling's and FairseqReading's."""
    add_config_flags(p, GenerateOptions, names=["ckpt"])
    add_config_flags(
        p.add_mutually_exclusive_group(required=True), GenerateOptions, names=["prompt", "prompts"]
    )
    for cls, names in FLAGS:
        add_config_flags(p, cls, names=names.split() if names else None)


def options(args: argparse.Namespace) -> tuple[GenerateOptions, Sampling, FairseqReading, str]:
    """Returns ``nfeval generate``'s parsed flags as its three configs and ``--hf-forward``."""
    configs = tuple(config_from_args(args, cls) for cls in (GenerateOptions, Sampling, FairseqReading))
    return (*configs, args.hf_forward)  # ScoringConfig's one flag here: its other fields are not generate's


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval generate``: prints each continuation, writes ``--output`` if given."""
    opts, sampling, reading, hf_forward = options(args)
    check_output_file(opts.output, "--output")  # before any work
    if opts.output and not opts.output.endswith(".jsonl"):
        raise ConfigError(f"--output {opts.output}: expected a .jsonl file name")
    prompts = opts.prompt if opts.prompt else read_prompts(opts.prompts)
    device = resolve_device(device_or_none(opts.device))
    backend, model = load_backend(
        opts.ckpt, device, torch_dtype(opts.dtype), reading.tokenizer, reading.fairseq_dict,
        reading.fairseq_head_scale_bug, hf_forward,
    )  # fmt: skip
    if not sampling.greedy:
        sampling.warpers()  # imports transformers' warpers (seconds) before the clock starts
    start = time.perf_counter()
    records = generate_texts(
        backend, prompts, opts.max_new_tokens, sampling, opts.stop, opts.batch_size,
        progress=len(prompts) > opts.batch_size,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    for i, r in enumerate(records):
        print(f"[{i}] {r['prompt']}\n  -> {r['completion']!r}  ({r['new_tokens']} new tokens, {r['finish']})")
    n_new = sum(r["new_tokens"] for r in records)
    rate = n_new / max(seconds, 1e-9)
    print(f"{len(records)} prompt(s), {n_new} new tokens in {seconds:.2f} s ({rate:.1f} tokens/s)")
    if opts.output:
        settings = {
            **{
                k: v
                for k, v in dataclasses.asdict(opts).items()
                if k not in ("ckpt", "prompt", "prompts", "output")
            },
            **dataclasses.asdict(sampling),
            "hf_forward": hf_forward,
            "device": str(device),
            "dtype": LONG_NAMES[opts.dtype],
        }
        # the kernels of this decoding batch: their rounding can part two machines' texts at a near-tie
        rows = min(opts.batch_size, len(prompts))
        compute = {"cpu_linear_kernel": backend.linear_kernel(decoding_rows=rows)}
        header = {"kind": "header", "provenance": provenance(model=model, settings=settings, compute=compute)}
        lines = [header] + [{"kind": "generation", "index": i, **r} for i, r in enumerate(records)]
        atomic_write_text(opts.output, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
        print(f"wrote {opts.output}")
    return 0
