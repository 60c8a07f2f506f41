"""``nfeval reproduce``: the command line over ``nfeval.pipelines.reproduce``."""

from __future__ import annotations

import argparse
import os

from ..base.cli_args import add_render_only, invoked_command
from ..base.config_flags import add_config_flags, config_from_args
from ..base.errors import MissingDataError
from ..base.jsonio import load_json
from ..base.outputs import check_output_dir
from ..launch.local import use_threads
from ..launch.options import add_launcher_arguments, launch_options
from ..pipelines import verify
from ..pipelines.reproduce import budget_report, report, run_reproduce
from ..pipelines.reproduce.config import ReproduceConfig
from ..pipelines.reproduce.verify import verify_committed
from ..pipelines.scales import SCALES

# ReproduceConfig's flags in the order of the help: the folder, the scale and what overrides its runs,
# the experiments and data; (after --verify and --render-only) the zero-shot and GLUE data, the tune and
# the device
RUNS = "out scale minutes seeds steps lrs token_budgets only train_data valid_data jobs runs_per_gpu"
DATA = "data_dir glue_dir glue_tasks tune"
DEVICE = "tune_seeds device progress reread tune_only"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval reproduce``'s options: ReproduceConfig's flags (``base.config_flags``), ``--verify``,
    ``--render-only`` and the launcher's."""
    add_config_flags(p, ReproduceConfig, names=RUNS.split())
    p.add_argument(
        "--verify",
        action="store_true",
        help="re-train Figure 2's Pre-LN seed-1 run of the report in --out from what the folder keeps and "
        "say whether its committed final PPL reproduces here (exactly on the same compute path); trains one "
        "run",
    )
    add_render_only(p)
    add_config_flags(p, ReproduceConfig, names=DATA.split())
    p.add_argument("--tune", dest="tune", action="store_true", help=argparse.SUPPRESS)  # the default, kept
    add_config_flags(p, ReproduceConfig, names=DEVICE.split())
    add_launcher_arguments(p)


def reproduce_config(args: argparse.Namespace) -> ReproduceConfig:
    """Returns the ReproduceConfig of ``nfeval reproduce``'s parsed flags, with this command line and the
    launcher's options."""
    return config_from_args(args, ReproduceConfig, command=invoked_command(), launch=launch_options(args))


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval reproduce`` (``--verify``: re-trains one committed run; ``--render-only``: rewrites
    the report); prints the report's path, the GPU commands' script, or what to do while Slurm jobs run."""
    if args.verify:
        use_threads(1)  # the reproduce scales train each run on one thread
        result = verify_committed(args.out, args.train_data, args.valid_data)
        print(f"{result['key']} seed {result['seed']}: {result['text']}")
        return 0 if result["outcome"] in (verify.EXACT, verify.OTHER_PATH) else 1
    if args.render_only:
        path = os.path.join(args.out, "report.json")
        if not os.path.isfile(path):
            raise MissingDataError(f"--out {args.out}: no report.json to render (run nfeval reproduce first)")
        print((budget_report if "token_budgets" in load_json(path) else report).rerender(args.out))
        return 0
    cfg = reproduce_config(args)
    check_output_dir(cfg.out, "--out")  # before any work
    use_threads(SCALES[cfg.scale].threads)  # this process's; the library leaves its caller's
    result = run_reproduce(cfg)
    print(result.get("report") or result.get("commands") or result.get("tuned") or result["pending"])
    return 0
