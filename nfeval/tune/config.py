"""``TuneConfig``: a learning-rate tune's grid, budget and folder, each field declared once with its ``nfeval
tune`` flag (``base.config_flags`` derives the flags both ways; the flags every point shares are ``nfeval
train``'s, and ``--launcher`` and the Slurm flags are ``launch.options``')."""

from __future__ import annotations

from dataclasses import dataclass

from ..base.cli_args import learning_rates
from ..base.config_flags import flag_field
from ..launch.options import LaunchOptions


@dataclass(frozen=True, kw_only=True)
class TuneConfig:
    """A tune: the presets, learning rates and seeds of its grid, each point's budget, its folder and how
    its points run."""

    preset: tuple[str, ...] = flag_field(
        help="model preset to tune, e.g. prenorm-tiny (repeatable)", action="append", required=True
    )
    lrs: tuple[float, ...] = flag_field(
        help="comma-separated peak learning rates, e.g. 1e-3,3e-3", type=learning_rates, required=True
    )
    budget: str = flag_field(
        help="the short budget of every point: steps=N, tokens=N, flops=X or seconds=X", required=True
    )
    seeds: int = flag_field(1, "seeds per LR: --seed … --seed+N-1 (default 1)")
    jobs: int = flag_field(1, "points run in parallel processes (spread over GPUs)")
    out: str = flag_field(help="tune directory (points/, tune.json, tune.png)", required=True)
    report_only: bool = flag_field(False, "run nothing: summarise the finished points", action="store_true")
    launch: LaunchOptions | None = None  # --launcher slurm: the points as a Slurm job array
