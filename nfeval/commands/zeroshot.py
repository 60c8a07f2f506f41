"""``nfeval zeroshot``: the command line over ``nfeval.zeroshot.evaluate``."""

from __future__ import annotations

import argparse
import dataclasses
import time

from ..base.cli_args import device_or_none
from ..base.config_flags import add_config_flags, config_from_args
from ..base.errors import ConfigError
from ..base.outputs import check_output_dir, check_output_file
from ..engine.text.fairseq_tokenizer import FairseqReading
from ..model_adapters.config import ScoringConfig
from ..zeroshot.config import DEFAULT_OUTPUT, ZeroShotConfig
from ..zeroshot.evaluate import evaluate, make_table

# the flags in the order of the help: ZeroShotConfig's and its ScoringConfig's (base.config_flags), then
# the fairseq checkpoint's (engine.text.fairseq_tokenizer.FairseqReading, shared with generate)
FLAGS = (
    (ZeroShotConfig, "tasks data_dir limit"),
    (ScoringConfig, "batch_size max_batch_tokens"),
    (ZeroShotConfig, "output output_path log_samples"),
    (ScoringConfig, "device dtype max_length too_long"),
    (ZeroShotConfig, "use_cache"),
    (ScoringConfig, "progress"),
    (ZeroShotConfig, "trust_checkpoint"),
    (ScoringConfig, "hf_forward"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``nfeval zeroshot``'s options: ``--ckpt``, ZeroShotConfig's and ScoringConfig's flags and the
    fairseq checkpoint's."""
    parser.add_argument(
        "--ckpt",
        required=True,
        help="nfeval run/checkpoint dir, a Hugging Face causal-LM dir, or a fairseq checkpoint file "
        "(with dict.txt beside it and --tokenizer GPT-2's BPE folder, or a tokenizer.json beside it)",
    )
    for cls, names in FLAGS:
        add_config_flags(parser, cls, names=names.split())
    add_config_flags(parser, FairseqReading)


def zeroshot_config(args: argparse.Namespace) -> ZeroShotConfig:
    """Returns the ZeroShotConfig of ``nfeval zeroshot``'s parsed flags: ``--tasks`` split at commas too
    (an empty list when it names none), ``--output`` defaulting to results/zeroshot.json unless
    ``--output_path`` is given, and ``--device auto`` as None."""
    scoring = config_from_args(args, ScoringConfig)
    scoring = dataclasses.replace(scoring, device=device_or_none(scoring.device))
    cfg = config_from_args(
        args, ZeroShotConfig, scoring=scoring, **dataclasses.asdict(config_from_args(args, FairseqReading))
    )
    if cfg.tasks is not None:
        cfg = dataclasses.replace(cfg, tasks=[t for item in cfg.tasks for t in item.split(",") if t.strip()])
    if not cfg.output and not cfg.output_path:
        cfg = dataclasses.replace(cfg, output=DEFAULT_OUTPUT)
    return cfg


def _process_age() -> float:
    """Returns the seconds since this process started (interpreter start-up and imports included)."""
    try:
        import psutil
    except ImportError:  # psutil comes with accelerate; without it the command is timed from here
        return 0.0
    return max(0.0, time.time() - psutil.Process().create_time())


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval zeroshot``; prints the table and where the results went."""
    cfg = zeroshot_config(args)
    check_output_file(cfg.output, "--output")  # before any work
    if cfg.output_path:
        check = check_output_file if cfg.output_path.endswith(".json") else check_output_dir
        check(cfg.output_path, "--output_path")
    if cfg.tasks is not None and not cfg.tasks:
        raise ConfigError(f"--tasks {' '.join(args.tasks)!r}: empty selection; name at least one task")
    out = evaluate(args.ckpt, cfg, started=time.perf_counter() - _process_age())
    if out is not None:
        print(make_table(out))
        if cfg.output:
            print(f"results: {cfg.output}")
    return 0
