"""``nfeval reproduce``: the NormFormer paper's tables and figures from one command, at the scale the
hardware allows, into ``--out``: ``report.md`` + ``report.json`` + PNGs, one section per experiment.

Before any comparison run: the LR of every architecture is tuned (``tuning``; ``--no-tune``: one LR,
every verdict marked untuned) and every run's paired step-time ratio to its baseline fixes its equal-time
step budget (``equal_time``). Built from the library functions behind ``nfeval tune``, ``train``,
``compare``, ``zeroshot`` and ``glue``
(``plan`` lists the experiments and runs as data; ``runner`` trains; ``training_experiments`` and
``eval_experiments`` measure; ``verdict`` holds the one decision rule; ``report`` renders). Resumable:
every run and every section has a record written last, so a rerun with the same ``--out`` skips what
finished and a killed invocation resumes inside the run it was training. The folder may be moved or
copied (to another path or machine) and resumed there: nothing in it is keyed by where it lies (its
tune points and runs compare the tokenizer it holds by content; its links are relative).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ...base.artifacts import atomic_write_json, hardware, hardware_key
from ...base.errors import ConfigError, MissingDataError
from ...base.jsonio import load_json
from ...base.sweep_lock import folder_locked
from ...launch.options import LaunchOptions
from .plan import EXPERIMENT_NAMES, EXPERIMENTS, PUBLIC_SCALES, SCALES
from .runner import Context, log, train_on_cluster


@dataclass
class ReproduceConfig:
    out: str = "reproduce_out"
    scale: str = "tiny"
    minutes: float | None = None  # per-run training budget; default: the scale's
    seeds: int | None = None  # default: the scale's
    only: tuple[str, ...] | None = None
    data_dir: str | None = None
    glue_dir: str | None = None
    glue_tasks: tuple[str, ...] | None = None  # None: every task whose files are in glue_dir
    tune: bool = True  # tune each architecture's LR first (nfeval tune), as the paper's baselines were
    device: str = "auto"
    progress: bool = True
    command: str = "nfeval reproduce"
    launch: LaunchOptions | None = None  # --launcher slurm: training runs and tune points as Slurm jobs

    def validate(self) -> None:
        """Raises a UserError naming the first bad option; checks everything before any work."""
        if self.scale not in SCALES:
            raise ConfigError(f"--scale {self.scale!r}: expected one of {', '.join(PUBLIC_SCALES)}")
        if self.minutes is not None and not self.minutes > 0:
            raise ConfigError(f"--minutes {self.minutes}: expected a positive number of minutes per run")
        if self.seeds is not None and self.seeds < 1:
            raise ConfigError(f"--seeds {self.seeds}: expected at least 1")
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
            from ...glue.data import spec

            for task in self.glue_tasks or ():
                spec(task)


def settings(cfg: ReproduceConfig, budget: dict[str, float]) -> dict[str, Any]:
    """Returns what every run of one output folder must share (checked on a rerun)."""
    steps = "max_steps" in budget
    return {"scale": cfg.scale, "budget": budget, "tune": cfg.tune, "equal_time": "paired" if steps else None}


def check_settings(out: str, current: dict[str, Any]) -> None:
    """Stores the folder's settings on first use; raises ConfigError when a rerun differs."""
    path = os.path.join(out, "reproduce.json")
    if os.path.isfile(path):
        stored = load_json(path)
        if stored != current:
            raise ConfigError(
                f"{path}: this folder was made with {stored}, not {current}; rerun with the same --scale and "
                "--minutes, or use a new --out"
            )
    else:
        atomic_write_json(path, current)


@folder_locked(lambda cfg: cfg.out)  # one writer per output folder
def run_reproduce(cfg: ReproduceConfig) -> dict[str, Any]:
    """Runs (or resumes) the selected experiments into ``cfg.out`` and writes the report; returns
    {"report": report.md, "sections": [...]}, {"commands": script} (a GPU scale, no GPUs here), or
    {"pending": what to do} (``cfg.launch``'s Slurm jobs are not all finished)."""
    import torch

    from ..stages import shared_tokenizer
    from . import commands, report, sections

    cfg.validate()
    scale = SCALES[cfg.scale]
    budget = {"max_seconds": cfg.minutes * 60} if cfg.minutes else dict(scale.budget)
    os.makedirs(cfg.out, exist_ok=True)
    check_settings(cfg.out, settings(cfg, budget))
    start = time.time()
    only = set(cfg.only) if cfg.only else None
    ctx = Context(
        out=cfg.out,
        scale=scale,
        budget=budget,
        seeds=cfg.seeds or scale.seeds,
        tokenizer="",
        data_dir=cfg.data_dir,
        glue_dir=cfg.glue_dir,
        glue_tasks=_glue_tasks(cfg),
        device=cfg.device,
        progress=cfg.progress,
        launch=cfg.launch,
    )
    if scale.threads:
        torch.set_num_threads(scale.threads)
    if scale.needs_gpu and not torch.cuda.is_available() and not (cfg.launch and cfg.launch.on_cluster):
        script = commands.write_commands(ctx, only)
        log(f"--scale {scale.name} needs GPUs and none is present: the training commands are in {script}")
        return {"commands": script}
    ctx.tokenizer = shared_tokenizer(cfg.out, scale.vocab_size)
    keys = list(dict.fromkeys(k for e in EXPERIMENTS if only is None or e.name in only for k in e.runs))
    pending = _before_sections(cfg, ctx, keys)
    if pending:
        return {"pending": pending}
    done: list[dict[str, Any]] = []
    for exp in EXPERIMENTS:  # the report is rewritten after every section, so a long run shows progress
        done.append(sections.section(ctx, exp, only))
        pending = [sections.stub(e, sections.PENDING) for e in EXPERIMENTS[len(done) :]]
        path = report.write(cfg.out, _header(cfg, ctx, start), done + pending)
    log(f"report: {path}")
    return {"report": path, "sections": done}


def _before_sections(cfg: ReproduceConfig, ctx: Context, keys: list[str]) -> str | None:
    """Tunes, fixes the equal-time step budgets and, with ``--launcher slurm``, trains every run as
    Slurm jobs (each phase's jobs on the jobs' hardware, in turn); returns what to do when jobs are not
    finished yet (``--no-wait``, a failed job), else None."""
    on_cluster = bool(cfg.launch and cfg.launch.on_cluster)
    if cfg.tune:
        from .tuning import run_tune

        ctx.tune_files = run_tune(ctx, keys)
        if on_cluster and any(load_json(f)["missing"] for f in ctx.tune_files.values()):
            return "the LR tune's jobs are not all finished: rerun the same command to collect them"
    if "max_steps" in ctx.budget:
        from .equal_time import measure_ratios, measure_ratios_as_job

        if on_cluster and not measure_ratios_as_job(ctx, keys):
            return "the step-time ratio job is not finished: rerun the same command to collect it"
        ctx.step_ratios = measure_ratios(ctx, keys)
    log(
        f"output folder {os.path.abspath(cfg.out)}; scale {ctx.scale.name}; {ctx.budget_text()}; "
        f"{ctx.seeds} seed(s)"
    )
    return train_on_cluster(ctx, keys) if on_cluster else None


def _glue_tasks(cfg: ReproduceConfig) -> tuple[str, ...]:
    """Returns the GLUE tasks to run: the given ones, else every task whose files are in --glue-dir."""
    from .glue_halves import present_tasks

    return cfg.glue_tasks or (present_tasks(cfg.glue_dir) if cfg.glue_dir else ())


def _header(cfg: ReproduceConfig, ctx: Context, start: float) -> dict[str, Any]:
    from ... import __version__
    from ...base.artifacts import git_hash
    from .equal_time import equal_time_rows
    from .tuning import tuning_rows

    tune_rows, tune_warnings = tuning_rows(ctx)
    return {
        "version": __version__,
        "git": git_hash(),
        "command": cfg.command,
        "scale": ctx.scale.name,
        "seeds": ctx.seeds,
        "budget": ctx.budget_text(),
        "lr": lr_text(ctx),
        "hardware": hardware_key(hardware()),
        "wall_min": (time.time() - start) / 60,
        # a shared machine slows every run; time budgets then buy fewer steps (see each run's steps)
        "load_average": round(os.getloadavg()[0], 1),
        "tuned": bool(ctx.tune_files),
        "tuning": tune_rows,
        "equal_time": equal_time_rows(ctx),
        "step_ratios": ctx.step_ratios,
        "warnings": tune_warnings,
    }


def lr_text(ctx: Context) -> str:
    """Returns where the runs' learning rates came from, in words."""
    if not ctx.tune_files:
        return f"{ctx.scale.lr:g} for every run (untuned: --no-tune; every verdict is marked untuned)"
    best = [
        f"{objective} {preset} {s['best_lr']:g}"
        for objective, path in ctx.tune_files.items()
        for preset, s in load_json(path)["presets"].items()
        if s["best_lr"] is not None
    ]
    return "tuned per preset by nfeval tune (grid below): " + ", ".join(best)
