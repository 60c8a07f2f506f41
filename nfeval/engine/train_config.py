"""The training config: every field a run needs besides its output folder, with its checks, and how
``nfeval train``'s flags, ``--config FILE`` and ``--set FIELD=VALUE`` build it."""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from .config import ModelConfig, load_json, parse_preset

DTYPES = ("fp32", "bf16")


@dataclass
class TrainConfig:
    """Everything a training run needs besides its output folder."""

    preset: str = "normformer-tiny"
    model: dict[str, Any] = field(default_factory=dict)  # ModelConfig field overrides
    objective: str | None = None  # clm | mlm; default: the preset's
    # data: text files/folders, a Hugging Face dataset, or (neither) the embedded default corpus
    train_data: str | None = None
    valid_data: str | None = None
    hf_dataset: str | None = None
    hf_config: str | None = None
    text_column: str = "text"
    tokenizer: str | None = None  # tokenizer.json or GPT-2 folder; default: train a BPE
    vocab_size: int | None = None  # BPE size when training one; default: the preset's vocab size
    # batch: the global batch is batch_size × grad_accum × processes sequences of seq_len tokens
    batch_size: int = 8
    seq_len: int | None = None  # default: the model's max_seq_len
    grad_accum: int = 1
    # budget (at least one)
    max_steps: int | None = None
    max_tokens: int | None = None
    max_flops: float | None = None
    max_seconds: float | None = None
    calibration_steps: int = 10
    # optimisation
    lr: float = 6e-4
    warmup: float = 0.01  # steps if >= 1, else a fraction of the run's steps
    end_lr: float = 0.0
    lr_power: float = 1.0
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-8
    weight_decay: float = 0.01
    clip_grad: float = 0.0  # 0: no clipping
    # precision and speed
    dtype: str = "fp32"
    compile: bool = False
    device: str = "auto"
    fsdp: bool = False
    # logging and checkpoints (intervals in steps; 0: only at the end)
    log_interval: int = 10
    eval_interval: int = 100
    eval_samples: int = 256
    ckpt_interval: int = 1000
    peak_flops: float | None = None
    seed: int = 1
    progress: bool = True
    # per-layer gradient statistics for updates START:END (1-based, inclusive; e.g. the paper's 950:1000)
    grad_stats: str | None = None
    lr_from: dict[str, Any] | None = None  # where a tuned lr came from: nfeval.tune_results.tuned_lr's record

    def validate(self) -> None:
        """Raises ValueError naming the first bad field; checks everything that needs no data."""
        parse_preset(self.preset)
        unknown = sorted(set(self.model) - {f.name for f in dataclasses.fields(ModelConfig)})
        if unknown:
            raise ValueError(f"model overrides: unknown model config field(s) {unknown}")
        if self.objective not in (None, "clm", "mlm"):
            raise ValueError(f"objective={self.objective!r}: expected 'clm' or 'mlm'")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: expected one of {DTYPES}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device={self.device!r}: expected auto, cpu or cuda")
        if self.train_data and self.hf_dataset:
            raise ValueError("give either train_data or hf_dataset, not both")
        if self.valid_data and not self.train_data:
            raise ValueError("valid_data needs train_data")
        for name in ("batch_size", "grad_accum", "calibration_steps", "eval_samples"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected a positive integer")
        for name in ("log_interval", "eval_interval", "ckpt_interval"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected an integer >= 0")
        budgets = {k: getattr(self, k) for k in ("max_steps", "max_tokens", "max_flops", "max_seconds")}
        if all(v is None for v in budgets.values()):
            raise ValueError("no budget: give at least one of max_steps, max_tokens, max_flops, max_seconds")
        for name, value in budgets.items():
            if value is not None and not value > 0:
                raise ValueError(f"impossible budget: {name}={value!r}, expected a positive number")
        if self.seq_len is not None and self.seq_len < 2:
            raise ValueError(f"seq_len={self.seq_len!r}: expected at least 2")
        if self.grad_stats is not None:
            from ..analysis.recorder import parse_grad_stats

            parse_grad_stats(self.grad_stats)
        if not (self.lr > 0 and self.warmup >= 0 and 0 <= self.end_lr <= self.lr):
            raise ValueError(
                f"lr={self.lr}, warmup={self.warmup}, end_lr={self.end_lr}: expected lr > 0, warmup >= 0, 0 <= end_lr <= lr"
            )

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str) -> TrainConfig:
        """Returns a TrainConfig from a dict; unknown keys fail naming ``source``."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(
                f"{source}: unknown training config field(s) {unknown}; expected a subset of {sorted(known)}"
            )
        return cls(**d)


_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def parse_set(items: list[str]) -> dict[str, Any]:
    """Returns model overrides from FIELD=VALUE strings (VALUE parsed as JSON when it is JSON)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Returns the TrainConfig of defaults, then --config file, then command-line flags."""
    values: dict[str, Any] = {}
    if args.config:
        values.update(TrainConfig.from_dict(load_json(args.config), source=args.config).__dict__)
    for name in _FIELDS:
        v = getattr(args, name, None)
        if v is not None and name != "model":
            values[name] = v
    values["model"] = {**values.get("model", {}), **parse_set(args.set)}
    return TrainConfig(**values)
