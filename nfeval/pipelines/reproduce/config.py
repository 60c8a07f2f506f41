"""``ReproduceConfig``: everything ``nfeval reproduce`` needs, each field declared once with its flag
(``base.config_flags`` derives the flags; ``--launcher`` and the Slurm flags are ``launch.options'``)."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass

from ... import embedded
from ...base.cli_args import (
    DEVICE_HELP,
    PIPELINE_JOBS_HELP,
    REREAD_HELP,
    RUNS_PER_GPU_HELP,
    ZEROSHOT_DATA_DIR_HELP,
    check_jobs,
    device_name,
    learning_rates,
    names,
    positive_int,
    run_folder_help,
    runs_per_gpu,
    tune_seeds_help,
)
from ...base.config_flags import flag_field
from ...base.errors import ConfigError, MissingDataError
from ...glue.data import spec
from ...launch.options import LaunchOptions
from .. import lr_band
from ..scales import PUBLIC_SCALES, SCALES
from ..stages import check_corpus
from .budget_axis import parse_token_budgets
from .plan import EXPERIMENT_NAMES

OUT = "reproduce_out"


def token_budgets(text: str) -> tuple[int, ...]:
    """Returns ``--token-budgets``'s token counts (an argparse ``type``: ``parse_token_budgets``'s
    refusal as argparse.ArgumentTypeError)."""
    try:
        return parse_token_budgets(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@dataclass
class ReproduceConfig:
    """A reproduction: the scale and what overrides its runs, the experiments and data, GLUE's data, the
    tune, and where it runs."""

    out: str = flag_field(OUT, run_folder_help(OUT))
    scale: str = flag_field(
        "tiny",
        "tiny: 6 layers × d 64, minutes per run on a CPU core; small: 12 layers × d 128, where Pre-LN's "
        "early gradient mismatch is larger than tiny's (`--only fig2-clm,fig3-5` at 5 seeds: about 1.5 h "
        "on 2 cores with --jobs 2); 125M: GPUs (writes the torchrun commands when none is present); "
        "24x64-gpu and 12x128-gpu: those shapes at 64 × 256 tokens an update in bf16, for --token-budgets on "
        "one GPU, several runs sharing it (--jobs)",
        choices=PUBLIC_SCALES + ("smoke",),
        metavar="{" + ",".join(PUBLIC_SCALES) + "}",
    )
    minutes: float | None = flag_field(  # per-run training budget; default: the scale's
        None,
        "a time budget per run in minutes, the paper's equal-time protocol (default: the scale's "
        "step budget; see plan.py on time budgets under a changing machine load)",
    )
    seeds: int | None = flag_field(None, "seeds per training run (default: the scale's); mean ± std")
    steps: int | None = flag_field(  # a full-length tune follows it
        None,
        "the baselines' updates (default: the scale's); a tune at the scale's full run length follows",
        type=positive_int,
    )
    lrs: tuple[float, ...] | None = flag_field(
        None, "comma-separated LR grid of the tune (default: the scale's)", type=learning_rates
    )
    token_budgets: tuple[int, ...] | None = flag_field(  # Figure 2 at each (``budget_axis``)
        None,
        "Figure 2 at each of these token budgets (e.g. 0.125M,0.5M,2M), LRs re-tuned at each, in "
        "--out/tokens=N/; the report fits NormFormer's gain against tokens",
        type=token_budgets,
    )
    only: tuple[str, ...] | None = flag_field(
        None, f"comma-separated experiments to run: {','.join(EXPERIMENT_NAMES)}", type=names("--only")
    )
    train_data: str | None = flag_field(  # None: the embedded default
        None, "training text file or folder (default: the embedded corpus, CPython's docs)"
    )
    valid_data: str | None = flag_field(
        None, "validation text (default: the last 5%% of the training documents)"
    )
    jobs: int = flag_field(1, PIPELINE_JOBS_HELP)  # at a time here, each on its share of the cores
    runs_per_gpu: int | None = flag_field(  # 0: auto
        None, RUNS_PER_GPU_HELP, type=runs_per_gpu, metavar="N|auto"
    )
    data_dir: str | None = flag_field(None, ZEROSHOT_DATA_DIR_HELP, type=embedded.zeroshot_dir)
    glue_dir: str | None = flag_field(
        None,
        "GLUE TSVs (layout of ../shared/data/glue), or 'embedded' (the STS-B slice shipped in the "
        "package); enables Table 3",
        type=embedded.glue_dir,
    )
    glue_tasks: tuple[str, ...] | None = flag_field(  # None: every task whose files are in glue_dir
        None,
        "comma-separated GLUE tasks (default: every task whose files are in --glue-dir)",
        type=names("--glue-tasks"),
    )
    tune: bool = flag_field(  # as the paper's baselines were
        True,
        "train every run at the scale's one LR instead of first tuning each architecture's LR with "
        "nfeval tune (the scale's grid and budget; tiny: 3 presets x 7 LRs x 1000 steps, about 18 minutes); "
        "every verdict then says untuned",
        name="no-tune",
        action="store_false",
    )
    tune_seeds: int = flag_field(  # numbered from 101: never judged
        lr_band.DEFAULT_TUNE_SEEDS, tune_seeds_help(lr_band.DEFAULT_TUNE_SEEDS), type=positive_int
    )
    device: str = flag_field("auto", DEVICE_HELP, type=device_name)
    progress: bool = flag_field(True, "no progress bars", name="no-progress", action="store_false")
    reread: bool = flag_field(False, REREAD_HELP, action="store_true")
    tune_only: bool = flag_field(  # tunes land first; the judged runs on a later invocation
        False,
        "run the LR tunes (each best LR's band neighbours included) and stop; a later invocation without "
        "it measures the step-time ratios and trains the judged runs (with --token-budgets: every budget's "
        "tune)",
        action="store_true",
    )
    command: str = "nfeval reproduce"
    launch: LaunchOptions | None = None  # --launcher slurm: training runs and tune points as Slurm jobs

    def _check_counts(self) -> None:
        """Raises ConfigError for a seed or job count out of range, or --tune-only with what it excludes."""
        if self.seeds is not None and self.seeds < 1:
            raise ConfigError(f"--seeds {self.seeds}: expected at least 1")
        if self.tune_only and (not self.tune or self.reread):
            raise ConfigError("--tune-only tunes and trains nothing else: drop --no-tune / --reread")
        check_jobs(self.jobs, self.runs_per_gpu)

    def validate(self) -> None:
        """Raises a UserError naming the first bad option; checks everything before any work."""
        if self.scale not in SCALES:
            raise ConfigError(f"--scale {self.scale!r}: expected one of {', '.join(PUBLIC_SCALES)}")
        if self.minutes is not None and not 0 < self.minutes < math.inf:  # nan and inf too
            raise ConfigError(
                f"--minutes {self.minutes}: expected a finite positive number of minutes per run"
            )
        if self.steps is not None and (self.steps < 1 or self.minutes is not None):
            raise ConfigError(f"--steps {self.steps}: expected a positive number of steps, without --minutes")
        if self.lrs is not None and (not self.lrs or any(not 0 < lr < math.inf for lr in self.lrs)):
            raise ConfigError(
                f"--lrs {','.join(map(str, self.lrs))}: expected finite positive learning rates"
            )
        self._check_counts()
        lr_band.check_seeds(self.seeds or SCALES[self.scale].seeds, self.tune_seeds)
        check_corpus(self.train_data, self.valid_data)
        unknown = sorted(set(self.only or ()) - set(EXPERIMENT_NAMES))
        if unknown:
            raise ConfigError(
                f"--only {','.join(unknown)}: unknown experiment(s); "
                f"expected some of {', '.join(EXPERIMENT_NAMES)}"
            )
        for name in ("data_dir", "glue_dir"):
            path = getattr(self, name)
            if path and not os.path.isdir(path):
                raise MissingDataError(f"--{name.replace('_', '-')} {path}: no such folder")
        if self.glue_dir:
            for task in self.glue_tasks or ():
                spec(task)
