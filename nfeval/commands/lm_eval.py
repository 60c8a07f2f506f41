"""``nfeval lm-eval ARGS…``: lm-eval's own command line with nfeval's model and tasks registered.

The ``nfeval`` model (``--model nfeval --model_args pretrained=RUN_DIR``) and the ``*_local`` /
``*_hub`` tasks are available; ``--include_path`` still adds the user's own task folder. Local tasks
read ``--data-dir DIR`` (an nfeval option, taken out before lm-eval parses the rest and added to the
task metadata) or lm-eval's ``--metadata '{"data_dir": DIR}'``, which wins::

    nfeval lm-eval --model nfeval --model_args pretrained=RUN_DIR --tasks piqa_local --data-dir
    ../shared/data/zeroshot

Plain ``lm_eval --model nfeval`` cannot work: lm-eval 0.4 has no plugin entry points, so a model is
registered only by importing its module, which this command does. Without ``--device`` it scores on
``cuda:0`` where CUDA is available and on the CPU elsewhere (lm-eval's own default, ``cuda:0``, would warn
on a CPU-only machine). An existing ``F.json`` as ``--output_path`` is refused: lm-eval takes a ``.json``
path as a file-name prefix (``F_<date>.json``, the samples beside it), never as the file to write.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from lm_eval._cli import HarnessCLI
from lm_eval.utils import setup_logging

from .. import embedded, tasks
from ..base import env
from ..base.errors import ConfigError, UserError
from ..cli import one_line
from ..model_adapters import lm  # noqa: F401  (registers the "nfeval" model)
from ..zeroshot import lm_eval_layout
from ..zeroshot.lm_eval_git import quiet_git_hash

LM_EVAL_UNKNOWN_TASKS = "Tasks not found"  # how lm-eval's process_tasks starts the error


def split_data_dir(argv: list[str]) -> tuple[list[str], str | None]:
    """Returns (argv without ``--data-dir DIR``, DIR or None)."""
    rest, data_dir, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--data-dir" and i + 1 < len(argv):
            data_dir, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--data-dir="):
            data_dir = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return rest, data_dir


def main(argv: list[str] | None = None) -> int:
    """Runs lm-eval's CLI on ``argv``; returns the exit status."""
    argv, data_dir = split_data_dir(list(sys.argv[1:] if argv is None else argv))
    old_argv = sys.argv
    sys.argv = ["nfeval lm-eval", *argv]  # lm-eval's parser reads sys.argv itself
    try:
        setup_logging()
        cli = HarnessCLI()
        args = cli.parse_args()
        if hasattr(args, "include_path"):
            args.include_path = [tasks.TASKS_DIR] + ([args.include_path] if args.include_path else [])
        if hasattr(args, "metadata"):  # the evaluating subcommand's: what the local tasks' loaders read
            args.metadata = with_data_dir(args.metadata, data_dir)
            lm_eval_layout.check_output_path(getattr(args, "output_path", None))
            if getattr(args, "device", None) is None and not getattr(args, "config", None):
                args.device = default_device()  # lm-eval's own default is cuda:0, even without CUDA
        with quiet_git_hash():
            try:
                cli.execute(args)
            except ValueError as e:
                if not str(e).startswith(LM_EVAL_UNKNOWN_TASKS):
                    raise
                known = ", ".join(tasks.CANONICAL_TASKS)
                raise ConfigError(f"--tasks: {e} (nfeval's: {known}; all: nfeval lm-eval ls tasks)") from None
    except UserError as e:  # bad data, model or task name: one line, as every nfeval command
        if env.enabled(env.TRACEBACK):
            raise
        print(f"nfeval lm-eval: error: {one_line(e)}", file=sys.stderr)
        return 2
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    finally:
        sys.argv = old_argv
    return 0


def default_device() -> str:
    """Returns the device ``nfeval lm-eval`` scores on when ``--device`` is not given: lm-eval's default,
    ``cuda:0``, where CUDA is available, else the CPU (lm-eval's default there only warns and falls back)."""
    return "cuda:0" if torch.cuda.is_available() else "cpu"


def with_data_dir(metadata: dict[str, Any] | None, data_dir: str | None) -> dict[str, Any] | None:
    """Returns lm-eval's task ``metadata`` with ``data_dir`` (absolute; ``embedded``: the slices shipped in
    the package) when given and the metadata names none."""
    if data_dir is None:
        return metadata
    return {"data_dir": os.path.abspath(embedded.zeroshot_dir(data_dir)), **(metadata or {})}
