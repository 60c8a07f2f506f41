"""``BakeoffConfig``: everything a bakeoff needs, each field declared once with its ``nfeval bakeoff`` flag
(``base.config_flags`` derives the flags; ``--launcher`` and the Slurm flags are ``launch.options``')."""

from __future__ import annotations

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
    positive_int,
    run_folder_help,
    runs_per_gpu,
    tune_seeds_help,
)
from ...base.config_flags import flag_field
from ...base.errors import ConfigError, MissingDataError
from ...engine.model.config import ARCHITECTURES, SIZES
from ...launch.options import LaunchOptions
from ...tune.sweep import parse_budget
from .. import lr_band
from ..stages import check_corpus

# the scale (``pipelines.scales``) whose recipe (batch, sequence length, evaluation, stability test, ...)
# each size trains with; "smoke" is for tests only
RECIPES = {"tiny": "tiny", "small": "small", "125M": "125M", "smoke": "smoke"}
ARCHS = ("prenorm", "normformer", "sandwich", "olmo2norm", "olmo2qk=olmo2norm:qk_norm=true")
BASELINE = "prenorm"
OUT = "bakeoff_out"
SEEDS = 3
CLOSE_SEEDS = 5


@dataclass
class BakeoffConfig:
    """A bakeoff: what is ranked, the data, each run's budget, seeds and recipe, the tune, where it runs."""

    archs: tuple[str, ...] = flag_field(
        ARCHS,
        f"architectures to rank: presets ({', '.join(ARCHITECTURES)}) or NAME=ARCH:FIELD=VALUE,... for a "
        f"variant (e.g. olmo2qk=olmo2norm:qk_norm=true); default: {' '.join(ARCHS)}",
        type=str,
        nargs="+",
        metavar="ARCH",
    )
    baseline: str = flag_field(
        BASELINE, f"the architecture the others are tested against (default {BASELINE})"
    )
    size: str = flag_field(
        "tiny",
        "preset size and its recipe (reproduce's scale of that name)",
        choices=tuple(RECIPES),
        metavar="{tiny,small,125M}",
    )
    out: str = flag_field(OUT, run_folder_help(OUT))
    train_data: str | None = flag_field(None, "training text file or folder (default: the embedded corpus)")
    valid_data: str | None = flag_field(None, "validation text (default: a fixed 5%% split of --train-data)")
    steps: int | None = flag_field(
        None, "the baseline's training steps; the others get the same time (default: the recipe's)"
    )
    minutes: float | None = flag_field(None, "a time budget per run instead (each run calibrates its steps)")
    seeds: int = flag_field(SEEDS, f"training seeds per architecture (default {SEEDS})")
    close_seeds: int = flag_field(  # seeds for the candidates within one MDE of the best after ``seeds``
        CLOSE_SEEDS,
        "seeds for the architectures within one MDE of the best after --seeds, and for the baseline "
        f"with them; decided once, recorded in seed_plan.json (default {CLOSE_SEEDS}; at most --seeds: "
        "none get more)",
    )
    clip_grad: float = flag_field(
        0.0,
        "clip every tune point's and run's gradient norm to NORM: a second recipe (one --out is one "
        "recipe; default 0: no clipping, the paper's)",
        metavar="NORM",
    )
    lrs: tuple[float, ...] | None = flag_field(
        None, "comma-separated LR grid of the tune (default: the recipe's)", type=learning_rates
    )
    tune_budget: str | None = flag_field(
        None, "budget of each tune point, as nfeval tune --budget, e.g. steps=100"
    )  # default: the recipe's
    tune_seeds: int = flag_field(  # numbered from 101: never judged
        lr_band.DEFAULT_TUNE_SEEDS, tune_seeds_help(lr_band.DEFAULT_TUNE_SEEDS), type=positive_int
    )
    jobs: int = flag_field(1, PIPELINE_JOBS_HELP)  # runs and tune points trained at a time here
    runs_per_gpu: int | None = flag_field(  # 0: auto
        None, RUNS_PER_GPU_HELP, type=runs_per_gpu, metavar="N|auto"
    )
    data_dir: str | None = flag_field(None, ZEROSHOT_DATA_DIR_HELP, type=embedded.zeroshot_dir)
    device: str = flag_field("auto", DEVICE_HELP, type=device_name)
    progress: bool = flag_field(True, "no progress bars", name="no-progress", action="store_false")
    reread: bool = flag_field(False, REREAD_HELP, action="store_true")
    command: str = "nfeval bakeoff"
    launch: LaunchOptions | None = None  # --launcher slurm: tunes, ratios and runs as Slurm jobs

    def validate(self) -> None:
        """Raises a UserError naming the first bad option, before any work."""
        if self.size not in RECIPES:
            raise ConfigError(
                f"--size {self.size!r}: expected one of {', '.join(s for s in RECIPES if s in SIZES)}"
            )
        if self.seeds < 1:
            raise ConfigError(f"--seeds {self.seeds}: expected at least 1")
        if self.close_seeds < 1:
            raise ConfigError(f"--close-seeds {self.close_seeds}: expected at least 1")
        lr_band.check_seeds(max(self.seeds, self.close_seeds), self.tune_seeds)
        check_jobs(self.jobs, self.runs_per_gpu)
        if not 0 <= self.clip_grad < math.inf:  # nan and inf too: a tune point would refuse it later
            raise ConfigError(
                f"--clip-grad {self.clip_grad}: expected a finite gradient norm >= 0 (0: no clipping)"
            )
        if self.steps is not None and self.minutes is not None:
            raise ConfigError("--steps and --minutes both given: pass one budget")
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"--steps {self.steps}: expected a positive number of steps")
        if self.minutes is not None and not 0 < self.minutes < math.inf:  # nan and inf too
            raise ConfigError(
                f"--minutes {self.minutes}: expected a finite positive number of minutes per run"
            )
        if self.lrs is not None and (not self.lrs or any(not 0 < lr < math.inf for lr in self.lrs)):
            raise ConfigError(
                f"--lrs {','.join(map(str, self.lrs))}: expected finite positive learning rates"
            )
        if self.tune_budget is not None:
            parse_budget(self.tune_budget)
        check_corpus(self.train_data, self.valid_data)
        if self.data_dir and not os.path.isdir(self.data_dir):
            raise MissingDataError(f"--data-dir {self.data_dir}: no such folder")
