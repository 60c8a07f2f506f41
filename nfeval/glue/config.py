"""``GlueConfig``: everything a GLUE sweep needs besides its checkpoint, each field declared once with its
``nfeval glue`` flag (``base.config_flags`` derives the flags both ways; the recipe's flags are
``Recipe``'s own, and ``--launcher`` and the Slurm flags are ``launch.options``')."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import embedded
from ..base.cli_args import DEVICE_HELP, count_or_all, device_name, learning_rates, limit_help, positive_int
from ..base.config_flags import flag_field
from ..base.sweep_points import lr_key
from ..engine.checkpoints.torch_files import TRUST_HELP
from ..launch.options import LaunchOptions
from . import data as glue_data
from .recipe import Recipe

DEFAULT_LRS = (1e-5, 2e-5, 3e-5, 5e-5, 1e-4, 2e-4, 3e-4)


def task_names(text: str) -> tuple[str, ...]:
    """Returns ``--tasks``'s value (an argparse ``type``): the comma-separated names, lower-cased."""
    return tuple(t.strip().lower() for t in text.split(",") if t.strip())


@dataclass(frozen=True)
class GlueConfig:
    """A GLUE sweep: its tasks, learning rates, seeds and recipe, where it reads and writes, how it runs."""

    glue_dir: str | None = flag_field(
        None,
        "folder with the GLUE distribution TSVs (CoLA/, SST-2/, ...), or 'embedded': the STS-B slice "
        f"shipped in the package (400 train, 200 dev rows); default: the hub copy {glue_data.HUB_DATASET}",
    )
    tasks: tuple[str, ...] | None = flag_field(
        None,
        f"comma-separated tasks (default all: {','.join(glue_data.TASKS)}; with --glue-dir embedded: "
        f"{','.join(embedded.GLUE_TASKS)})",
        type=task_names,
    )
    sweep: bool = flag_field(
        False,
        "sweep the learning-rate grid (default grid: "
        + ", ".join(lr_key(x) for x in DEFAULT_LRS)
        + "); without it: fairseq's recipe LR per task",
        action="store_true",
    )
    lrs: tuple[float, ...] | None = flag_field(
        None, "comma-separated learning rates (overrides the grid)", type=learning_rates
    )
    seeds: int = flag_field(1, "seeds per learning rate: 0 .. N-1 (default 1)", type=positive_int)
    recipe: Recipe = dataclasses.field(default_factory=Recipe)
    device: str | None = flag_field(None, DEVICE_HELP, type=device_name)
    jobs: int = flag_field(1, "points run in parallel processes (spread over GPUs)", type=positive_int)
    limit: int | None = flag_field(
        None,
        limit_help("rows of each task's train and dev splits, for quick tries (recorded)"),
        type=count_or_all,
        metavar="N",
    )
    out_dir: str = flag_field("results", "results folder (default: results)", name="out", metavar="OUT")
    progress: bool = flag_field(True, "no progress bars", name="no-progress", action="store_false")
    trust_checkpoint: bool = flag_field(False, TRUST_HELP, action="store_true")
    launch: LaunchOptions | None = None  # --launcher and the Slurm flags: launch.options

    def __post_init__(self) -> None:
        fixed = {"device": None if self.device == "auto" else self.device}
        if self.tasks is not None:
            fixed["tasks"] = tuple(self.tasks)
        if self.lrs is not None:
            fixed["lrs"] = tuple(self.lrs)
        for name, value in fixed.items():
            object.__setattr__(self, name, value)

    def grids(self, tasks: list[str]) -> dict[str, list[float]]:
        """Returns each task's learning rates: ``lrs``, else with ``sweep`` the default grid, else
        fairseq's recipe learning rate of the task."""
        if self.lrs or self.sweep:
            return {t: list(self.lrs or DEFAULT_LRS) for t in tasks}
        return {t: [glue_data.SPECS[t].fairseq_lr] for t in tasks}
