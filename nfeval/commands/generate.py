"""``nfeval generate``: continuations of prompts from a checkpoint, printed and written as JSONL.

The model is an nfeval run or checkpoint directory, a Hugging Face causal-LM directory (generated
with the HF model's own ``generate``) or a fairseq checkpoint file (``--tokenizer`` gives its
tokenizer: GPT-2's BPE folder, mapped through the dict.txt beside it or ``--fairseq-dict``). Prompts
get the same prefix as scored texts (``</s>`` for nfeval and fairseq models, the tokenizer's own
special tokens for HF models). The JSONL file starts with a header line (provenance,
model fingerprint, settings), then one line per prompt. Weights are fp32 unless ``--dtype`` says
otherwise. The path is read by ``engine.checkpoints.loading.identify``; an nfeval or fairseq checkpoint
generates
through ``engine.inference.backend.NFEvalBackend`` (the zero-shot scorer's backend) with torch and tokenizers
alone, and only an HF model directory imports transformers (through ``model_adapters``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch

from ..base.artifacts import atomic_write_text, provenance
from ..base.cli_args import LONG_NAMES, add_device, add_dtype, positive_int
from ..base.errors import ConfigError, DataError, MissingDataError
from ..base.outputs import check_output_file
from ..engine.checkpoints import loading
from ..engine.inference.backend import Backend, nfeval_backend
from ..engine.inference.generate import Sampling
from ..engine.model.dtypes import torch_dtype
from ..engine.text.fairseq_tokenizer import add_fairseq_arguments
from ..engine.training.parallel import resolve_device


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
) -> tuple[Backend, dict[str, Any]]:
    """Returns (backend, model block with path/kind/fingerprint) for any ``--ckpt`` nfeval accepts
    (``loading.identify``; ``tokenizer``/``fairseq_dict``/``fairseq_head_scale_bug`` as it takes them)."""
    identity = loading.identify(
        path, tokenizer=tokenizer, fairseq_dict=fairseq_dict, fairseq_head_scale_bug=fairseq_head_scale_bug
    )
    if identity.loaded is None:  # a HF directory: transformers (its own generate, lm-eval's tokenizer set-up)
        from ..model_adapters.backends import open_backend

        backend, kind = open_backend(identity, device, dtype, hf_forward="transformers"), "hf"
    else:
        backend = nfeval_backend(identity.loaded, device, dtype)
        kind = identity.loaded.meta.get("source", "nfeval")
    return backend, {"kind": kind, "path": identity.path, "fingerprint": identity.fingerprint}


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ckpt", required=True, help="nfeval run/checkpoint dir, HF model dir or fairseq .pt file"
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    src.add_argument("--prompts", metavar="FILE", help="one prompt per line, or .jsonl with a 'prompt' field")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy")
    p.add_argument("--top-k", type=int, default=0, help="sample from the K most likely tokens (0: off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1: off)")
    p.add_argument("--seed", type=int, default=0, help="prompt i samples with seed + i")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--output", metavar="FILE.jsonl", help="write the continuations as JSONL")
    add_fairseq_arguments(p)
    add_device(p)
    add_dtype(p, ("fp32", "bf16", "fp16"), default="fp32")


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval generate``: prints each continuation, writes ``--output`` if given."""
    check_output_file(args.output, "--output")  # before any work
    sampling = Sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    if args.max_new_tokens < 1 or args.batch_size < 1:
        raise ConfigError("--max-new-tokens and --batch-size: expected positive integers")
    if args.output and not args.output.endswith(".jsonl"):
        raise ConfigError(f"--output {args.output}: expected a .jsonl file name")
    prompts = args.prompt if args.prompt else read_prompts(args.prompts)
    device = resolve_device(args.device)
    backend, model = load_backend(
        args.ckpt,
        device,
        torch_dtype(args.dtype),
        args.tokenizer,
        args.fairseq_dict,
        args.fairseq_head_scale_bug,
    )
    if not sampling.greedy:
        sampling.warpers()  # imports transformers' warpers (seconds) before the clock starts
    start = time.perf_counter()
    records = generate_texts(
        backend,
        prompts,
        args.max_new_tokens,
        sampling,
        args.stop,
        args.batch_size,
        progress=len(prompts) > args.batch_size,
    )
    seconds = time.perf_counter() - start
    for i, r in enumerate(records):
        print(f"[{i}] {r['prompt']}\n  -> {r['completion']!r}  ({r['new_tokens']} new tokens, {r['finish']})")
    n_new = sum(r["new_tokens"] for r in records)
    rate = n_new / max(seconds, 1e-9)
    print(f"{len(records)} prompt(s), {n_new} new tokens in {seconds:.2f} s ({rate:.1f} tokens/s)")
    if args.output:
        settings = {
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_k": args.top_k,
            "top_p": args.top_p,
            "seed": args.seed,
            "stop": args.stop,
            "batch_size": args.batch_size,
            "device": str(device),
            "dtype": LONG_NAMES[args.dtype],
        }
        header = {"kind": "header", "provenance": provenance(model=model, settings=settings)}
        lines = [header] + [{"kind": "generation", "index": i, **r} for i, r in enumerate(records)]
        atomic_write_text(args.output, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
        print(f"wrote {args.output}")
    return 0
