"""The torchrun command lines of a scale that needs GPUs (``--scale 125M`` on a machine without one):
one ``nfeval train`` per run and seed, into the run dirs a later ``nfeval reproduce`` reads."""

from __future__ import annotations

import dataclasses
import os
import shlex

from ...base.artifacts import atomic_write_text
from ...engine.training.train_config import TrainConfig
from ...engine.training.train_flags import flag_name, to_flags
from .plan import EXPERIMENTS, RUNS
from .run_specs import Context, run_dir, train_config


def train_command(cfg: TrainConfig, out_dir: str, gpus: int = 8) -> str:
    """Returns the ``torchrun … nfeval train`` line that trains ``cfg`` into ``out_dir`` on the GPU node
    (``train_flags.to_flags``): the script's variables name the data and tokenizer ``cfg`` does not, and
    device and progress are the node's defaults."""
    # set by the script's reader: the paper's corpus is private, GPT-2's BPE is what fairseq's recipe uses
    variables = {} if cfg.train_data or cfg.hf_dataset else {"train_data": "CORPUS", "valid_data": "VALID"}
    if not cfg.tokenizer:
        variables["tokenizer"] = "GPT2_TOKENIZER"
    on_node = dataclasses.replace(cfg, device="auto", progress=True, **dict.fromkeys(variables))
    flags = [f"--out={shlex.quote(out_dir)}"]
    flags += [f'{flag_name(name)}="${var}"' for name, var in variables.items()]
    flags += [shlex.quote(flag) for flag in to_flags(on_node)]
    return f"torchrun --nproc_per_node {gpus} -m nfeval train " + " \\\n    ".join(flags)


def write_commands(ctx: Context, only: set[str] | None) -> str:
    """Writes ``<out>/commands_<scale>.sh`` (every run of the selected experiments); returns its path."""
    keys = dict.fromkeys(k for e in EXPERIMENTS if only is None or e.name in only for k in e.runs)
    lines = [
        "#!/usr/bin/env bash",
        f"# nfeval reproduce --scale {ctx.scale.name}: the training runs, for a node with 8 GPUs.",
        "# Set CORPUS, VALID (text files) and GPT2_TOKENIZER (e.g. ../shared/data/tokenizer/gpt2), run this,",
        f"# then rerun `nfeval reproduce --scale {ctx.scale.name} --out {ctx.out}` to evaluate and report.",
        "set -euo pipefail",
        "",
    ]
    for key in keys:
        for seed in ctx.seed_values:
            lines += [
                f"# {RUNS[key].label}, seed {seed}",
                train_command(train_config(ctx, key, seed), run_dir(ctx, key, seed)),
                "",
            ]
    path = os.path.join(ctx.out, f"commands_{ctx.scale.name}.sh")
    atomic_write_text(path, "\n".join(lines))
    return path
