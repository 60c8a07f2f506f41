"""The one runner of every pipeline's training runs.

A pipeline (reproduce, with the budget axis and Table 4 in it; bakeoff; the demo) declares its runs as
``RunSpec`` records: the run's TrainConfig, its folder, its seed, its role (a judged seed at the tuned
LR, or one at a neighbour of it in the LR band) and the fields its record is named by. ``train``
executes the unfinished ones: here, ``jobs`` at a time (on a GPU they share the device: ``workers``
gives how many its free memory holds), or as Slurm jobs (``--launcher slurm``). Each run goes through
``pipelines.runs.ensure_run``: locked, resumed from its newest checkpoint, finished when its record is
written, so a pipeline lands in pieces and a rerun trains only what is missing. ``ensure`` reads one
run's record back, training it first unless the pipeline only rereads.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..base.errors import ConfigError
from ..engine.training.train_config import TrainConfig
from ..launch import cluster, local
from ..launch.jobs import LaunchPoint
from ..launch.options import LaunchOptions
from ..tune.results import lr_key
from . import context, runs, trained_gate

JUDGED = "judged"  # a seed a verdict reads, at the tuned LR
BAND = "band"  # a judged seed at a neighbour of the tuned LR (pipelines.lr_band): the verdict checked there
ROLES = (JUDGED, BAND)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run a pipeline declares: ``config`` trained into ``directory``; ``record``, the fields
    the run's record is named by (the pipeline's run key or name, seed, budget, step-time ratio); ``lr``,
    the band LR of a ``BAND`` run (None at the tuned LR)."""

    name: str
    seed: int
    config: TrainConfig
    directory: str
    record: dict[str, Any] = dataclasses.field(default_factory=dict)
    role: str = JUDGED
    lr: float | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"run {self.name!r}: role={self.role!r}: expected one of {', '.join(ROLES)}")
        if (self.role == BAND) != (self.lr is not None):
            raise ConfigError(f"run {self.name!r}: a {BAND} run has its band LR, a {JUDGED} run none")

    @property
    def label(self) -> str:
        """Returns the run's name in progress lines and Slurm records: name[/lr=…]/seed<k>."""
        band = "" if self.lr is None else f"lr={lr_key(self.lr)}/"
        return f"{self.name}/{band}seed{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        """Returns the spec as JSON-able data (``from_dict`` reads it back)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "run spec") -> RunSpec:
        """Returns the spec ``to_dict`` wrote; a bad TrainConfig field fails naming ``source``."""
        config = TrainConfig.from_dict(d["config"], f"{source} field 'config'")
        return cls(**{**d, "config": config})


def ensure(
    spec: RunSpec, log: Callable[[str], None], reread: bool = False, unigram: float | None = None
) -> dict[str, Any]:
    """Returns the record of ``spec``'s run (``runs.ensure_run``'s), training and judging it first unless
    it is finished; with ``reread`` nothing is trained (``runs.NotTrained`` when the folder holds no
    record). Once the corpus's ``unigram`` PPL is known the record carries ``trained``
    (``trained_gate.mark``): the gate every verdict reads."""
    done = runs.read_or_train(spec.config, spec.directory, spec.record, log, not reread)
    return trained_gate.mark(done, unigram)


def ensure_in(ctx: context.RunContext, spec: RunSpec) -> dict[str, Any]:
    """Returns ``ensure``'s record of ``spec`` under pipeline context ``ctx`` (its log, --reread, gate)."""
    return ensure(spec, functools.partial(context.log, ctx.pipeline), ctx.reread, ctx.unigram_ppl)


def ordered(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """Returns ``specs`` seed by seed, the judged runs before the band's: with two at a time the runs a
    test pairs train side by side under the same machine load (equal time is then checked on realised
    ratios that load did not skew)."""
    return sorted(specs, key=lambda s: (s.role != JUDGED, s.seed))


def train(
    specs: Sequence[RunSpec],
    run: Callable[[RunSpec], Any],
    out: str,
    *,
    jobs: int = 1,
    threads: int | None = None,
    device: str = "auto",
    launch: LaunchOptions | None = None,
    desc: str = "runs",
    progress: bool = True,
) -> str | None:
    """Trains the unfinished runs of ``specs``, each by ``run(spec)`` (``ensure`` or a pipeline's
    wrapper of it; picklable): ``jobs`` at a time here, each worker on ``threads`` CPU threads and on
    ``device`` (the visible GPUs in turn: several runs share one), or as Slurm jobs with ``launch``.
    Returns None once every run is finished, else what to do (a job not finished with ``--no-wait``, or
    failed: a rerun submits what is missing)."""
    todo = [s for s in ordered(specs) if runs.finished(s.directory) is None]
    if not todo:
        return None
    points = [LaunchPoint(s.label, run, (s,), s.directory) for s in todo]
    if launch is not None and launch.on_cluster:
        cluster.run_points(points, out, launch, desc, progress)
    else:
        local.run_points(points, jobs=jobs, threads=threads, device=device)
    missing = [s.label for s in todo if runs.finished(s.directory) is None]
    if not missing:
        return None
    return f"{len(missing)} training run(s) not finished yet: rerun the same command to collect them"


def train_in(
    ctx: context.RunContext, specs: Sequence[RunSpec], run: Callable[[RunSpec], Any] | None = None
) -> str | None:
    """Returns ``train``'s answer for ``specs`` where pipeline context ``ctx`` says (its folder, jobs,
    threads, device and launcher), each run by ``run`` (default ``ensure_in(ctx, ·)``); None at once
    under ``--reread`` (nothing is trained)."""
    if ctx.reread:
        return None
    run = run or functools.partial(ensure_in, ctx)
    return train(
        specs,
        run,
        ctx.out,
        jobs=ctx.jobs,
        threads=ctx.scale.threads,
        device=ctx.device,
        launch=ctx.launch,
        desc=ctx.pipeline,
        progress=ctx.progress,
    )
