"""``nfeval demo``: the command line over ``nfeval.pipelines.demo``."""

from __future__ import annotations

import argparse
import dataclasses
import os

import torch

from .. import embedded
from ..base.config_flags import add_config_flags, config_from_args
from ..base.errors import ConfigError, MissingDataError
from ..base.outputs import check_output_dir
from ..launch.local import use_threads
from ..pipelines.demo import DemoConfig, run_demo


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval demo``'s options: DemoConfig's flags (``base.config_flags``)."""
    add_config_flags(p, DemoConfig)


def demo_config(args: argparse.Namespace) -> DemoConfig:
    """Returns the DemoConfig of ``nfeval demo``'s parsed flags; ``--glue-dir none`` (or empty) is no GLUE
    stage, and ``--limit 0`` (None) every item."""
    cfg = config_from_args(args, DemoConfig, zeroshot_limit=args.zeroshot_limit)  # None: given, not default
    return dataclasses.replace(cfg, glue_dir=None if cfg.glue_dir in ("", "none") else cfg.glue_dir)


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval demo`` after checking its folders and budget, on one torch thread on a CPU."""
    cfg = demo_config(args)
    check_output_dir(cfg.out, "--out")  # before any work
    if cfg.minutes <= 0:
        raise ConfigError(f"--minutes {cfg.minutes}: expected a positive number")
    for name, resolve in (("data_dir", embedded.zeroshot_dir), ("glue_dir", embedded.glue_dir)):
        path = resolve(getattr(cfg, name))
        if path and not os.path.isdir(path):
            raise MissingDataError(f"--{name.replace('_', '-')} {getattr(cfg, name)}: no such folder")
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        # Models this small run fastest on one thread, by far on a busy machine (a GLUE point of the
        # tiny preset: 41 s on two threads, 5 s on one, on the 2-core VM with other work on it).
        use_threads(1)
    run_demo(cfg)
    return 0
