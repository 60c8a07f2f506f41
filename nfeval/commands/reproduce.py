"""``nfeval reproduce``: the command line over ``nfeval.pipelines.reproduce``."""

from __future__ import annotations

import argparse
import os

from .. import embedded
from ..base.cli_args import (
    add_device,
    add_no_progress,
    add_pipeline_jobs,
    add_render_only,
    add_run_folder,
    add_tune_seeds,
    add_zeroshot_data_dir,
    invoked_command,
    learning_rates,
    positive_int,
)
from ..base.errors import ConfigError
from ..base.outputs import check_output_dir
from ..launch.local import use_threads
from ..launch.options import add_launcher_arguments, launch_options
from ..pipelines.reproduce import ReproduceConfig, run_reproduce
from ..pipelines.reproduce.budget_axis import parse_token_budgets
from ..pipelines.reproduce.plan import EXPERIMENT_NAMES
from ..pipelines.scales import PUBLIC_SCALES, SCALES


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``nfeval reproduce``'s options: the scale and its budget, the experiments and data, how the
    folder is run or read back, GLUE's data, the tune, and where it runs."""
    d = ReproduceConfig()
    add_run_folder(p, d.out)
    _scale_arguments(p, d)
    p.add_argument("--only", help=f"comma-separated experiments to run: {','.join(EXPERIMENT_NAMES)}")
    p.add_argument(
        "--train-data", help="training text file or folder (default: the embedded corpus, CPython's docs)"
    )
    p.add_argument("--valid-data", help="validation text (default: the last 5%% of the training documents)")
    add_pipeline_jobs(p, d.jobs)
    p.add_argument(
        "--verify",
        action="store_true",
        help="re-train Figure 2's Pre-LN seed-1 run of the report in --out from what the folder keeps and "
        "say whether its committed final PPL reproduces here (exactly on the same compute path); trains one "
        "run",
    )
    add_render_only(p)
    add_zeroshot_data_dir(p)
    _glue_arguments(p)
    _tune_arguments(p, d)
    add_device(p, default=d.device)
    add_no_progress(p)
    add_launcher_arguments(p)


def _scale_arguments(p: argparse.ArgumentParser, d: ReproduceConfig) -> None:
    """Adds the scale and what overrides its runs: ``--minutes``, ``--seeds``, ``--steps``, ``--lrs`` and
    ``--token-budgets``."""
    p.add_argument(
        "--scale",
        default=d.scale,
        choices=PUBLIC_SCALES + ("smoke",),
        metavar="{tiny,small,125M}",
        help="tiny: 6 layers × d 64, minutes per run on a CPU core; small: 12 layers × d 128, where Pre-LN's "
        "early gradient mismatch is larger than tiny's (`--only fig2-clm,fig3-5` at 5 seeds: about 1.5 h "
        "on 2 cores with --jobs 2); 125M: GPUs (writes the torchrun commands when none is present)",
    )
    p.add_argument(
        "--minutes",
        type=float,
        help="a time budget per run in minutes, the paper's equal-time protocol (default: the scale's "
        "step budget; see plan.py on time budgets under a changing machine load)",
    )
    p.add_argument("--seeds", type=int, help="seeds per training run (default: the scale's); mean ± std")
    p.add_argument(
        "--steps",
        type=positive_int,
        help="the baselines' updates (default: the scale's); a tune at the scale's full run length follows",
    )
    p.add_argument(
        "--lrs", type=learning_rates, help="comma-separated LR grid of the tune (default: the scale's)"
    )
    p.add_argument(
        "--token-budgets",
        help="Figure 2 at each of these token budgets (e.g. 0.125M,0.5M,2M), LRs re-tuned at each, in "
        "--out/tokens=N/; the report fits NormFormer's gain against tokens",
    )


def _glue_arguments(p: argparse.ArgumentParser) -> None:
    """Adds Table 3's GLUE data and tasks."""
    p.add_argument(
        "--glue-dir",
        help="GLUE TSVs (layout of ../shared/data/glue), or 'embedded' (the STS-B slice shipped in the "
        "package); enables Table 3",
    )
    p.add_argument(
        "--glue-tasks", help="comma-separated GLUE tasks (default: every task whose files are in --glue-dir)"
    )


def _tune_arguments(p: argparse.ArgumentParser, d: ReproduceConfig) -> None:
    """Adds ``--no-tune`` (and the default ``--tune``) and the tune's seeds."""
    p.add_argument(
        "--no-tune",
        dest="tune",
        action="store_false",
        help="train every run at the scale's one LR instead of first tuning each architecture's LR with "
        "nfeval tune (the scale's grid and budget; tiny: 3 presets x 7 LRs x 1000 steps, about 18 minutes); "
        "every verdict then says untuned",
    )
    p.add_argument("--tune", dest="tune", action="store_true", help=argparse.SUPPRESS)  # the default, kept
    add_tune_seeds(p, d.tune_seeds)


def _names(text: str | None, flag: str) -> tuple[str, ...] | None:
    """Returns the comma-separated names of ``flag`` (None when not given); an empty list is refused."""
    if text is None:
        return None
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise ConfigError(f"{flag} {text!r}: empty selection; name at least one, or drop the flag")
    return names


def run(args: argparse.Namespace) -> int:
    if args.verify:
        from ..pipelines import verify
        from ..pipelines.reproduce.verify import verify_committed

        use_threads(1)  # the reproduce scales train each run on one thread
        result = verify_committed(args.out, args.train_data, args.valid_data)
        print(f"{result['key']} seed {result['seed']}: {result['text']}")
        return 0 if result["outcome"] in (verify.EXACT, verify.OTHER_PATH) else 1
    if args.render_only:
        from ..base.errors import MissingDataError
        from ..base.jsonio import load_json
        from ..pipelines.reproduce import budget_report, report

        path = os.path.join(args.out, "report.json")
        if not os.path.isfile(path):
            raise MissingDataError(f"--out {args.out}: no report.json to render (run nfeval reproduce first)")
        print((budget_report if "token_budgets" in load_json(path) else report).rerender(args.out))
        return 0
    launch = launch_options(args)
    check_output_dir(args.out, "--out")  # before any work
    cfg = ReproduceConfig(
        out=args.out,
        scale=args.scale,
        minutes=args.minutes,
        seeds=args.seeds,
        steps=args.steps,
        lrs=tuple(args.lrs) if args.lrs else None,
        token_budgets=parse_token_budgets(args.token_budgets) if args.token_budgets else None,
        only=_names(args.only, "--only"),
        train_data=args.train_data,
        valid_data=args.valid_data,
        jobs=args.jobs,
        data_dir=embedded.zeroshot_dir(args.data_dir),
        glue_dir=embedded.glue_dir(args.glue_dir),
        glue_tasks=_names(args.glue_tasks, "--glue-tasks"),
        tune=args.tune,
        tune_seeds=args.tune_seeds,
        device=args.device,
        progress=not args.no_progress,
        command=invoked_command(),
        launch=launch,
    )
    use_threads(SCALES[cfg.scale].threads)  # this process's; the library leaves its caller's
    result = run_reproduce(cfg)
    print(result.get("report") or result.get("commands") or result["pending"])
    return 0
