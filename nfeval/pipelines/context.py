"""The run context of ``reproduce`` and ``bakeoff``: what every stage of one output folder shares (the
folder, the scale, the budget, the seeds, the data, the measured step-time ratios, where runs train and
the corpus's unigram perplexity), each pipeline's progress line, the check of a rerun's settings against
the folder's, and the TrainConfig a scale's recipe gives one run. Each pipeline subclasses ``RunContext``
with what only it has (reproduce: GLUE and its tunes by objective; bakeoff: its candidates, LR grid and
clipping) and names its runs its own way.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..base.artifacts import atomic_write_json
from ..base.errors import ConfigError
from ..base.jsonio import load_json
from ..engine.model.config import preset
from ..engine.training.input_fingerprints import corpus_fingerprint
from ..engine.training.memory import training_bytes
from ..engine.training.train_config import TrainConfig
from ..launch import local
from ..launch.local import job_devices
from ..launch.options import LaunchOptions
from ..tune.results import lr_key
from . import lr_band
from .scales import SCALE_TRAIN_FIELDS, Scale


def log(pipeline: str, message: str) -> None:
    """Prints one progress line of ``pipeline``: "[bakeoff 12:00:00] message"."""
    print(f"[{pipeline} {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class RunContext:
    """Everything the stages of one output folder share: where, how big, how long, which data."""

    pipeline: ClassVar[str] = "runs"  # the pipeline's name in its progress lines and Slurm job names
    out: str
    scale: Scale
    budget: dict[str, float]  # the baseline's TrainConfig budget (max_steps, max_seconds, ...)
    seeds: int
    tokenizer: str
    train_data: str | None = None  # the corpus (None: the embedded default)
    valid_data: str | None = None
    data_dir: str | None = None
    device: str = "auto"
    progress: bool = True
    step_ratios: dict[str, dict[str, Any]] = field(default_factory=dict)  # run -> its step-time ratio record
    launch: LaunchOptions | None = None  # --launcher slurm: the runs (and the tunes) as Slurm jobs
    jobs: int = 1  # runs and tune points trained at a time here
    tune_seeds: int = lr_band.DEFAULT_TUNE_SEEDS  # seeds per tune point, disjoint from ``seed_values``
    unigram_ppl: float | None = None  # the corpus's (trained_gate): records are marked trained or not
    reread: bool = False  # --reread: nothing trained or judged; every section read again from the records
    sensitivity: list[dict[str, Any]] = field(default_factory=list)  # init_sensitivity's, per distinct model

    @classmethod
    def from_config(cls, cfg: Any, **fields: Any) -> Any:
        """Returns the context of pipeline config ``cfg``: each field of ``cls`` that ``cfg`` has under the
        same name (the folder, the data, the device, ...) taken from it, and ``fields`` (what the
        pipeline works out: the scale, the budget, ...) as given."""
        names = [f.name for f in dataclasses.fields(cls) if f.init and hasattr(cfg, f.name)]
        return cls(**{**{name: getattr(cfg, name) for name in names}, **fields})

    def with_jobs_here(self, runs_per_gpu: int | None) -> RunContext:
        """Sets ``jobs`` to ``gpu_jobs(self.scale, runs_per_gpu)`` when ``runs_per_gpu`` is given
        (``--runs-per-gpu``); returns this context."""
        if runs_per_gpu is not None:
            self.jobs = gpu_jobs(self.scale, runs_per_gpu)
        return self

    @property
    def seed_values(self) -> list[int]:
        """Returns the judged seeds, 1 … ``seeds`` (the tune's are ``lr_band.tune_seed_values``)."""
        return list(range(1, self.seeds + 1))


def gpu_jobs(scale: Scale, runs_per_gpu: int) -> int:
    """Returns how many runs of ``scale`` train at a time on this machine's GPUs (``launch.local.gpu_jobs``):
    ``runs_per_gpu`` on each, 0 for as many as free memory holds at the scale's estimated memory a run
    (``engine.training.memory``, Pre-LN's model at the scale's batch, sequence length and precision)."""
    model = preset(f"prenorm-{scale.size}", **{**scale.model, "vocab_size": scale.vocab_size})
    return local.gpu_jobs(runs_per_gpu, training_bytes(model, scale.batch_size, scale.seq_len, scale.dtype))


def sharing(ctx: RunContext) -> int:
    """Returns how many other runs train beside each run on its GPU here (the most ``ctx.jobs`` workers
    that ``launch.local.job_devices`` binds to one GPU, less itself): the paired step-time ratio is
    measured under as many neighbours (``engine.training.step_ratio.busy_neighbours``). 0 on the CPU,
    where each run keeps its own cores, and for Slurm jobs, one run a job."""
    devices = job_devices(ctx.device, ctx.jobs)
    if not devices[0].startswith("cuda") or (ctx.launch is not None and ctx.launch.on_cluster):
        return 0
    return max(Counter(devices).values()) - 1


CORPUS_KEYS = ("corpus", "corpus_fingerprint")  # where the corpus lies, and what it holds


def with_corpus_fingerprint(settings: dict[str, Any]) -> dict[str, Any]:
    """Returns an output folder's ``settings`` with the fingerprint of the corpus their ``corpus`` names
    (``engine.training.input_fingerprints.corpus_fingerprint``: of what the files hold); as they are for
    the embedded corpus."""
    train, valid = settings.get("corpus") or (None, None)
    if not train:
        return settings
    return {**settings, "corpus_fingerprint": corpus_fingerprint(train, valid)}


def same_settings(stored: dict[str, Any], current: dict[str, Any]) -> bool:
    """Returns whether a rerun's ``current`` settings are the folder's ``stored`` ones: equal but for where
    the corpus lies, which is compared by what it holds where the folder recorded its fingerprint, and
    otherwise (a folder made before) by the files its paths reach from here."""
    rest = [{k: v for k, v in d.items() if k not in CORPUS_KEYS} for d in (stored, current)]
    if rest[0] != rest[1]:
        return False
    if "corpus_fingerprint" in stored:
        return stored["corpus_fingerprint"] == current.get("corpus_fingerprint")
    return _same_files(stored.get("corpus"), current.get("corpus"))


def _same_files(stored: list | None, given: list | None) -> bool:
    """Returns whether each stored path is the given one, or reaches the same file from here."""
    if stored == given:
        return True
    if not stored or not given or len(stored) != len(given):
        return False
    return all(
        a == b or (bool(a and b) and os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b))
        for a, b in zip(stored, given)
    )


def check_settings(path: str, current: dict[str, Any], advice: str) -> None:
    """Raises ConfigError (ending in ``advice``, what to do) when an output folder's stored settings file
    ``path`` differs from a rerun's ``current`` (``same_settings``: the corpus by what it holds); stores
    nothing (``keep_settings`` does, once the corpus they name was read)."""
    if os.path.isfile(path):
        stored = load_json(path)
        if not same_settings(stored, current):
            raise ConfigError(f"{path}: this folder was made with {stored}, not {current}; {advice}")


def keep_settings(path: str, current: dict[str, Any]) -> None:
    """Stores an output folder's settings in ``path`` on first use, once its corpus was read (the shared
    tokenizer built): a start refused for its data (an empty or unreadable corpus) records nothing, so the
    rerun with other data is not refused as another folder's."""
    if not os.path.isfile(path):
        atomic_write_json(path, current)


def scale_train_config(
    ctx: RunContext,
    *,
    preset: str,
    model: dict[str, Any],
    objective: str,
    warmup: float,
    seed: int,
    budget: dict[str, float],
    **fields: Any,
) -> TrainConfig:
    """Returns the TrainConfig of one run at ``seed``: the scale's recipe (``SCALE_TRAIN_FIELDS``), the
    context's tokenizer, data, device and progress, and the run's own preset, model overrides,
    objective, warm-up, budget and further TrainConfig ``fields``."""
    return TrainConfig(
        preset=preset,
        model=model,
        objective=objective,
        tokenizer=ctx.tokenizer,
        train_data=ctx.train_data,
        valid_data=ctx.valid_data,
        **{name: getattr(ctx.scale, name) for name in SCALE_TRAIN_FIELDS},
        warmup=warmup,
        device=ctx.device,
        seed=seed,
        progress=ctx.progress,
        **fields,
        **budget,
    )


def at_band_lr(cfg: TrainConfig, lr: float | None) -> TrainConfig:
    """Returns ``cfg`` (trained at its tuned LR) at ``lr``, another LR of its tune's band, its ``lr_from``
    naming the tuned one; ``cfg`` as it is when ``lr`` is None or its LR was not tuned."""
    if lr is None or cfg.lr_from is None:
        return cfg
    return dataclasses.replace(cfg, lr=lr, lr_from={**cfg.lr_from, "lr": lr, "band_of": cfg.lr_from["lr"]})


def run_dir(out: str, name: str, seed: int, lr: float | None = None) -> str:
    """Returns the folder of run ``name`` at ``seed`` under ``out``: at its tuned LR, or at ``lr`` of its
    band."""
    band = () if lr is None else (f"lr={lr_key(lr)}",)
    return os.path.join(out, "runs", name, *band, f"seed{seed}")
