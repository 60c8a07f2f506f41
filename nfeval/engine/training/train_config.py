"""The training config: every field a run needs besides its output folder, declared once with its resume
rule and its ``nfeval train`` flag (``train_flags`` derives the flags), with its checks, and the one
parser and writer of ``--set FIELD=VALUE``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...base.cli_args import dtype_spellings, dtype_type
from ...base.config_flags import flag_field
from ...base.errors import ConfigError
from ..model.config import (
    MODEL_CHOICES,
    OBJECTIVE_RECIPES,
    RECIPES,
    ModelConfig,
    check_fields,
    parse_preset,
    preset,
)
from ..text.tokenization import MIN_BPE_VOCAB
from .own_recipes import own_recipe_for, own_recipe_mismatch
from .tensorboard import check_available

DTYPES = ("fp32", "bf16")
TRAIN_CHOICES = {"objective": ("clm", "mlm"), "dtype": DTYPES}

# What a resume may do with a field (``nfeval train --resume``): FIXED fields define what a checkpoint is
# (data, model, batch, RNG) and never change; OVERRIDABLE ones (budget, optimizer, schedule, intervals)
# change only with --override-resume, the schedule recomputed from them; FREE ones (how the process runs)
# are always taken from the request.
FIXED, OVERRIDABLE, FREE = "fixed", "overridable", "free"
RESUME_RULES = (FIXED, OVERRIDABLE, FREE)


def setting(resume: str, default: Any = None, help: str = "", *, factory: Any = None, **flag: Any) -> Any:
    """Returns a dataclass field of TrainConfig with its ``resume`` rule and its ``nfeval train`` flag: the
    ``help`` text, and in ``flag`` what the field's type does not say (``type``, e.g. float for an int
    taken as 1e9; ``const`` for a flag whose value may be left out; ``name``; ``metavar``; ``action``).
    Each field is declared once, here; ``train_flags`` derives the flag both ways."""
    return flag_field(default, help, factory=factory, more={"resume": resume}, **flag)


GRAD_STATS_PAPER_WINDOW = (
    "950:1000"  # updates 950–1000, the window of the paper's Figure 7 (Figure 3: early training)
)


@dataclass
class TrainConfig:
    """Everything a training run needs besides its output folder."""

    preset: str = setting(
        FIXED, "normformer-tiny", "model preset, e.g. normformer-125M, prenorm-tiny (default normformer-tiny)"
    )
    model: dict[str, Any] = setting(
        FIXED,
        factory=dict,
        help="model config override, e.g. dropout=0.1 (repeatable)",
        name="set",
        action="append",
        metavar="FIELD=VALUE",
    )
    objective: str | None = setting(
        FIXED, None, "clm or mlm (default: the preset's)", choices=TRAIN_CHOICES["objective"]
    )
    # data: text files/folders, a Hugging Face dataset, or (neither) the embedded default corpus
    train_data: str | None = setting(
        FIXED,
        None,
        "text file or folder (documents separated by blank lines; .xz and .gz files read decompressed)",
    )
    valid_data: str | None = setting(
        FIXED, None, "validation text file or folder (default: last 5%% of the training documents)"
    )
    hf_dataset: str | None = setting(
        FIXED, None, "Hugging Face dataset name (needs the hub or a local cache)"
    )
    hf_config: str | None = setting(FIXED, None, "the Hugging Face dataset's configuration name")
    text_column: str = setting(FIXED, "text", "the Hugging Face dataset's text column (default text)")
    tokenizer: str | None = setting(
        FIXED, None, "tokenizer.json or a folder with GPT-2's encoder.json + vocab.bpe (default: train a BPE)"
    )
    vocab_size: int | None = setting(
        FIXED, None, "BPE vocabulary size when training a tokenizer (default: the preset's vocab size)"
    )
    # batch: the global batch is batch_size × grad_accum × processes sequences of seq_len tokens
    batch_size: int = setting(FIXED, 8, "sequences per process and micro-step (default 8)")
    seq_len: int | None = setting(
        FIXED, None, "tokens per sequence (default: the recipe's block size, at most the model's max_seq_len)"
    )
    grad_accum: int = setting(FIXED, 1, "micro-steps per update (default 1)")
    # budget (at least one)
    max_steps: int | None = setting(OVERRIDABLE, None, "budget: updates")
    max_tokens: int | None = setting(OVERRIDABLE, None, "budget: tokens, e.g. 1e9", type=float)
    max_flops: float | None = setting(OVERRIDABLE, None, "budget: model FLOPs")
    max_seconds: float | None = setting(OVERRIDABLE, None, "budget: seconds of training")
    calibration_steps: int = setting(
        FIXED, 10, "steps timed to turn a token, FLOP or time budget into steps (default 10)"
    )
    # optimisation
    lr: float = setting(OVERRIDABLE, 6e-4, "peak learning rate (default 6e-4)")
    warmup: float | None = setting(
        OVERRIDABLE,
        None,
        "warm-up: steps if >= 1, else a fraction of the run's steps (default: the recipe's, 0.01; nGPT's 0)",
    )
    end_lr: float = setting(OVERRIDABLE, 0.0, "learning rate at the end of the decay (default 0)")
    lr_power: float = setting(OVERRIDABLE, 1.0, "power of the decay (default 1: linear)")
    # None: the objective's recipe (config.RECIPES; training_recipe resolves them)
    beta1: float | None = setting(OVERRIDABLE, None, "Adam beta1 (default: the objective's recipe)")
    beta2: float | None = setting(OVERRIDABLE, None, "Adam beta2 (default: the objective's recipe)")
    eps: float | None = setting(OVERRIDABLE, None, "Adam epsilon (default: the objective's recipe)")
    weight_decay: float | None = setting(OVERRIDABLE, None, "weight decay (default: the objective's recipe)")
    clip_grad: float = setting(OVERRIDABLE, 0.0, "gradient norm clipping (default 0: none)")
    # the scheme whose own recipe (own_recipes.OWN_RECIPES: its paper's init, warm-up, clipping, optimizer)
    # the run's fields follow, as own_recipe (below) sets them; validate checks that they do
    own_recipe: str | None = setting(
        OVERRIDABLE,
        None,
        "the scheme whose own recipe the run's fields follow (e.g. hybridnorm); checked against its record",
        metavar="SCHEME",
    )
    # precision and speed
    dtype: str = setting(
        FIXED, "fp32", f"{dtype_spellings(DTYPES)} (default fp32)", type=dtype_type(DTYPES), metavar="DTYPE"
    )
    compile: bool = setting(FREE, False, "torch.compile the model")
    device: str = setting(FREE, "auto", "auto, cpu, cuda or cuda:N (default: auto, cuda when available)")
    fsdp: bool = setting(FREE, False, "shard with FSDP2 under torchrun")
    # logging and checkpoints (intervals in steps; 0: only at the end)
    log_interval: int = setting(OVERRIDABLE, 10, "steps between log lines (default 10; 0: the end only)")
    eval_interval: int = setting(OVERRIDABLE, 100, "steps between validations (default 100; 0: the end only)")
    eval_samples: int = setting(FIXED, 256, "validation sequences (default 256)")
    ckpt_interval: int = setting(
        OVERRIDABLE, 1000, "steps between checkpoints (default 1000; 0: the end only)"
    )
    peak_flops: float | None = setting(
        FREE,
        None,
        "peak FLOP/s of a device for the MFU column (default: a known GPU's datasheet, else measured)",
    )
    seed: int = setting(FIXED, 1, "seed of the initialisation, data order and dropout (default 1)")
    progress: bool = setting(FREE, True, "a progress bar (default on)")
    # where a tuned lr came from (nfeval.tune.results.tuned_lr's record). A record, not a setting: the lr
    # it gave is checked on resume; a rewritten tune.json (a newer nfeval's provenance) changes its hash.
    # Its flag (--lr-from reads a tune.json) carries the record itself, for command lines written from a
    # config (train_flags.to_flags)
    lr_from: dict[str, Any] | None = setting(
        FREE,
        None,
        "the record of where --lr came from, as config.json's lr_from (a JSON object)",
        name="lr-record",
        metavar="JSON",
    )
    grad_stats: str | None = setting(
        FREE,
        None,
        "log per-layer gradient statistics at updates START..END (1-based, inclusive; default: the "
        f"paper's {GRAD_STATS_PAPER_WINDOW})",
        const=GRAD_STATS_PAPER_WINDOW,
        metavar="START:END",
    )
    tensorboard: str | None = setting(
        FREE,
        None,
        "also log the metrics as TensorBoard events in DIR (default: RUN/tensorboard); needs pip install "
        "'nfeval[tensorboard]'",
        const="",
        metavar="DIR",
    )

    def validate(self, sources: Mapping[str, str] | None = None, require_budget: bool = True) -> None:
        """Raises ConfigError naming the source (file, flag), field, value and expectation of a bad field.

        ``sources`` maps a field to where its value came from (``--config FILE``, ``flag --lr``);
        fields it does not name are reported as ``config``. Checks everything that needs no data.
        ``require_budget=False``: a resume may take its budget from the saved run.
        """
        sources = sources or {}
        self.__dict__.update(check_fields(type(self), self.__dict__, sources, choices=TRAIN_CHOICES))

        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(
                f"{sources.get(name, 'config')}: {name}={getattr(self, name)!r}: expected {expected}"
            )

        parse_preset(self.preset)
        check_fields(ModelConfig, self.model, sources.get("model", "model overrides"), choices=MODEL_CHOICES)
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise bad("device", "auto, cpu, cuda or cuda:N")
        if self.train_data and self.hf_dataset:
            raise ConfigError("give either train_data or hf_dataset, not both")
        if self.valid_data and not self.train_data:
            raise ConfigError("valid_data needs train_data")
        self._check_counts(bad)
        self._check_budget(sources, require_budget)
        if self.seq_len is not None and self.seq_len < 2:
            raise bad("seq_len", "at least 2")
        if self.vocab_size is not None and self.vocab_size < MIN_BPE_VOCAB:
            raise bad(
                "vocab_size", f"at least {MIN_BPE_VOCAB} (256 bytes + {MIN_BPE_VOCAB - 256} special tokens)"
            )
        self._check_optimizer(bad)
        if self.own_recipe is not None:
            mismatch = own_recipe_mismatch(self.own_recipe, vars(self), preset_model(self).to_dict())
            if mismatch:
                where = sources.get("own_recipe", "config")
                raise ConfigError(f"{where}: own_recipe={self.own_recipe!r} but {mismatch}")
        if self.grad_stats is not None:
            parse_grad_stats(self.grad_stats)
        if self.tensorboard is not None:
            check_available(sources.get("tensorboard", "tensorboard"))

    def _check_counts(self, bad: Callable[[str, str], ConfigError]) -> None:
        """Raises ``bad(field, expectation)`` for a batch, sample or interval count out of range."""
        for name in ("batch_size", "grad_accum", "calibration_steps", "eval_samples"):
            if getattr(self, name) < 1:
                raise bad(name, "a positive integer")
        for name in ("log_interval", "eval_interval", "ckpt_interval"):
            if getattr(self, name) < 0:
                raise bad(name, "an integer >= 0")

    def _check_budget(self, sources: Mapping[str, str], require_budget: bool) -> None:
        """Raises ConfigError for no budget (when one is required) or a budget that is not > 0."""
        budgets = ("max_steps", "max_tokens", "max_flops", "max_seconds")
        if require_budget and all(getattr(self, k) is None for k in budgets):
            raise ConfigError("no budget: give at least one of max_steps, max_tokens, max_flops, max_seconds")
        for name in budgets:
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                where = sources.get(name, "config")
                raise ConfigError(f"{where}: impossible budget: {name}={getattr(self, name)!r}, expected > 0")

    def _check_optimizer(self, bad: Callable[[str, str], ConfigError]) -> None:
        """Raises ``bad(field, expectation)`` for an out-of-range optimizer or schedule number."""

        def given(name: str) -> bool:
            return getattr(self, name) is not None

        for name in ("beta1", "beta2"):
            if given(name) and not 0 <= getattr(self, name) < 1:
                raise bad(name, "a number in [0, 1)")
        for name in ("lr", "eps", "lr_power"):
            if given(name) and not getattr(self, name) > 0:
                raise bad(name, "a positive number")
        for name in ("warmup", "weight_decay", "clip_grad"):
            if given(name) and not getattr(self, name) >= 0:
                raise bad(name, "a number >= 0")
        if not 0 <= self.end_lr <= self.lr:
            raise bad("end_lr", f"a number in [0, lr={self.lr}]")

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str) -> TrainConfig:
        """Returns a TrainConfig from a dict; unknown keys and wrongly typed values fail naming ``source``."""
        if not isinstance(d.get("model", {}), dict):
            raise ConfigError(f"{source}: model={d['model']!r}: expected an object of ModelConfig fields")
        values = check_fields(cls, d, source, choices=TRAIN_CHOICES)
        check_fields(ModelConfig, values.get("model", {}), f"{source} field 'model'", choices=MODEL_CHOICES)
        return cls(**values)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
RECIPE_TRAIN_FIELDS = ("beta1", "beta2", "eps", "weight_decay", "warmup")


def parse_grad_stats(spec: str) -> tuple[int, int]:
    """Returns (start, end), 1-based inclusive update numbers, of ``START:END``; ConfigError if malformed."""
    start, sep, end = str(spec).partition(":")
    try:
        window = (int(start), int(end))
    except ValueError:
        window = None
    if not sep or window is None or not 1 <= window[0] <= window[1]:
        raise ConfigError(
            f"grad_stats={spec!r}: expected START:END with 1 <= START <= END (e.g. {GRAD_STATS_PAPER_WINDOW})"
        )
    return window


def clip_window(window: tuple[int, int], total_updates: int) -> tuple[int, int]:
    """Returns ``window`` clipped to updates 1..total_updates; a window wholly after the run becomes the
    run's last updates of the same length (so a short run still records its own late-training window)."""
    start, end = window
    if start > total_updates:
        start = max(1, total_updates - (end - start))
    return start, min(end, total_updates)


def training_recipe(cfg: TrainConfig, max_seq_len: int) -> dict[str, Any]:
    """Returns the run's resolved recipe: {"name", "beta1", "beta2", "eps", "weight_decay", "warmup",
    "seq_len"}, with "scheme" where the model's scheme set fields (``scheme_recipe``).

    The recipe is the objective's (``config.OBJECTIVE_RECIPES``; the model overrides' objective, else
    ``cfg.objective``, else clm), then the fields the model's scheme declares (``scheme_recipe``); each
    field ``cfg`` sets wins over both. ``seq_len``: ``cfg.seq_len``, else the recipe's block size capped
    at the model's ``max_seq_len``, else ``max_seq_len``.
    """
    objective = cfg.model.get("objective", cfg.objective or "clm")
    name = OBJECTIVE_RECIPES[objective]
    recipe = RECIPES[name]["train"]
    scheme = scheme_recipe(cfg)
    out: dict[str, Any] = {"name": name}
    for field_name in RECIPE_TRAIN_FIELDS:
        value = getattr(cfg, field_name)
        out[field_name] = scheme.get(field_name, recipe[field_name]) if value is None else value
    block = recipe["block_size"]
    out["seq_len"] = cfg.seq_len or (min(block, max_seq_len) if block else max_seq_len)
    if scheme:
        out["scheme"] = scheme
    return out


def scheme_recipe(cfg: TrainConfig) -> dict[str, float]:
    """Returns the recipe fields that the model of ``cfg`` (its preset and overrides) declares and ``cfg``
    leaves unset (``ModelConfig.recipe_overrides``: nGPT's weight_decay 0, warmup 0), {} for most."""
    return {k: v for k, v in preset_model(cfg).recipe_overrides.items() if getattr(cfg, k) is None}


def preset_model(cfg: TrainConfig) -> ModelConfig:
    """Returns the ModelConfig of ``cfg``'s preset, objective and model overrides (before a tokenizer sets
    the vocabulary)."""
    return preset(cfg.preset, **({"objective": cfg.objective} if cfg.objective else {}), **cfg.model)


def own_recipe(cfg: TrainConfig) -> TrainConfig:
    """Returns ``cfg`` under the own recipe of its preset's scheme (``hybridnorm-small``: HybridNorm's,
    ``own_recipes.OWN_RECIPES``): the record's TrainConfig fields and model fields set (replacing the
    run's), and ``own_recipe`` naming the scheme, so the run's recipe record says which recipe it trained
    under."""
    recipe = own_recipe_for(parse_preset(cfg.preset)[0])
    return dataclasses.replace(
        cfg, **recipe.train, model={**cfg.model, **recipe.model}, own_recipe=recipe.scheme
    )


def leave_to_scheme(cfg: TrainConfig) -> TrainConfig:
    """Returns ``cfg`` with the recipe fields its model's scheme declares unset (nGPT: weight_decay,
    warmup), so that the scheme's values apply and its run records them under "scheme": for a caller that
    sets those fields for every candidate of a comparison and lets each scheme carry its own."""
    return dataclasses.replace(cfg, **dict.fromkeys(preset_model(cfg).recipe_overrides, None))


def resolved_warmup(cfg: TrainConfig) -> float:
    """Returns the run's warm-up: ``cfg.warmup``, else its recipe's (``training_recipe``)."""
    return cfg.warmup if cfg.warmup is not None else training_recipe(cfg, 1)["warmup"]


def fields_with(resume: str) -> tuple[str, ...]:
    """Returns the names of the TrainConfig fields whose resume rule is ``resume``."""
    return tuple(name for name, f in FIELDS.items() if f.metadata["resume"] == resume)


def parse_set(items: list[str], where: str | None = None) -> dict[str, Any]:
    """Returns model overrides from FIELD=VALUE strings (VALUE parsed as JSON when it is JSON).

    Each FIELD must be a ModelConfig field and VALUE of its type; errors name ``where`` (default:
    ``--set ITEM``) and the field.
    """
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"{where}: {item!r}: expected FIELD=VALUE"
                if where
                else f"--set {item!r}: expected FIELD=VALUE"
            )
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
        check_fields(ModelConfig, {key: out[key]}, where or f"--set {item}", choices=MODEL_CHOICES)
    return out


def set_item(name: str, value: Any) -> str:
    """Returns the ``FIELD=VALUE`` text that ``parse_set`` reads back as ``{name: value}``: VALUE in JSON
    (``false``, ``null``, ``0.1``), a string bare unless it would read as JSON (``"1"``, ``"true"``)."""
    text = json.dumps(value)
    if isinstance(value, str):
        try:
            json.loads(value)
        except json.JSONDecodeError:
            text = value
    return f"{name}={text}"
