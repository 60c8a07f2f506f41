"""The increasing-learning-rate stability test: the paper's Figure 5.

Each preset is built with ``torch.manual_seed(seed)`` (the architectures share every weight they have
in common) and trained on the same batches with AdamW (fairseq's recipe: β (0.9, 0.98), ε 1e-8,
weight decay 0.01, no clipping), the learning rate of update t (0-based, N updates) being
``lr_start · (lr_end / lr_start) ** (t / (N - 1))``. An update *diverges* when its loss or gradient
norm is not finite, or the running median of the last losses rises above the first updates' mean loss
by more than a multiple of their standard deviation, the batch noise measured where the LR is too small
to change the model (``divergence``: the criterion and each run's measured noise go into the result;
the paper states no criterion). The count reported is the number of updates survived before the first
divergence (N: survived all).

Every forward also records, per layer, the largest attention logit |q·k|/√d over the positions the
(causal) mask lets attend, re-projecting q and k from the attention module's input with its own
weights in a forward hook (in fp32, outside any autocast), and flags values above fp16's largest
finite number (65504).

``autocast`` runs the forward passes in torch autocast at bf16 or fp16 (the paper trained in fp16,
where q·k overflows first in layer 0): fp16 where the device supports it (CUDA), bf16 on a CPU, whose
range is fp32's, so there the fp16 question is answered by the recorded logits against 65504.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from ..base.cli_args import device_name, positive_int
from ..base.config_flags import flag_field
from ..base.errors import ConfigError
from ..base.fingerprint import fingerprint_model
from ..base.progress import progress_bar
from ..engine.fast import cpu_linear
from ..engine.model.config import RECIPES, ModelConfig
from ..engine.model.dtypes import TORCH_DTYPES
from ..engine.model.model import Transformer
from .divergence import DivergenceDetector, criterion

FP16_MAX = 65504.0

LM_RECIPE = RECIPES["fairseq_lm"]["train"]  # the AdamW settings of causal-LM training (nfeval train)


@dataclass
class StabilitySettings:
    """How each run of the stability test trains and when it diverges; each field that is a flag of
    ``nfeval analyze stability`` declares it (``base.config_flags``)."""

    updates: int = flag_field(200, None)
    lr_start: float = flag_field(1e-5, None)
    lr_end: float = flag_field(1.0, None)
    batch_size: int = flag_field(8, None, type=positive_int)
    seq_len: int = flag_field(128, None)
    # divergence (``divergence``): the batch noise measured over the first noise_updates updates; a running
    # median of smoothing losses above their mean + noise_multiple × their std diverges
    noise_updates: int = flag_field(10, "first updates that measure the batch noise (default 10)")
    noise_multiple: float = flag_field(
        5.0, "a running median loss this many noise std above the first updates' mean diverges (default 5)"
    )
    smoothing: int = flag_field(5, "losses in the running median (default 5)")
    weight_decay: float = LM_RECIPE["weight_decay"]
    autocast: str = flag_field(  # fp32 (off) | bf16 | fp16
        "fp32",
        "forward in torch autocast at this precision (fp32: off); the paper trained in fp16",
        choices=("fp32", "bf16", "fp16"),
    )
    device: str = flag_field("cpu", "cpu, cuda or cuda:N (default cpu)", type=device_name)

    def criterion(self) -> dict[str, Any]:
        """Returns the divergence criterion's record (``divergence.criterion``)."""
        return criterion(self.noise_updates, self.noise_multiple, self.smoothing)

    def validate(self) -> None:
        """Raises ConfigError naming the first setting out of range."""
        if self.updates < 2:
            raise ConfigError(f"--updates {self.updates}: expected at least 2")
        if not 0 < self.lr_start <= self.lr_end:
            raise ConfigError(
                f"--lr-start {self.lr_start}, --lr-end {self.lr_end}: expected 0 < start <= end"
            )
        if self.batch_size < 1 or self.seq_len < 2:
            raise ConfigError("--batch-size >= 1 and --seq-len >= 2 expected")
        if self.noise_updates < 2 or self.smoothing < 1 or not self.noise_multiple > 0:
            raise ConfigError("--noise-updates >= 2, --smoothing >= 1 and --noise-multiple > 0 expected")
        if self.autocast not in TORCH_DTYPES:
            raise ConfigError(f"--autocast {self.autocast}: expected one of {', '.join(TORCH_DTYPES)}")


def lowest_precision(device: str) -> str:
    """Returns the lowest autocast precision torch runs on ``device``: fp16 on CUDA, else bf16."""
    return "fp16" if device.startswith("cuda") else "bf16"


def lr_schedule(settings: StabilitySettings) -> list[float]:
    """Returns the learning rate of every update: geometric from lr_start to lr_end."""
    n, ratio = settings.updates, settings.lr_end / settings.lr_start
    return [settings.lr_start * ratio ** (t / (n - 1)) for t in range(n)]


class AttentionLogitProbe:
    """Forward hooks that keep, per layer, the largest |q·k|·scale of the last forward pass (the scale
    attention applies: 1/√d, or nGPT's √d)."""

    def __init__(self, model: Transformer):
        self.maxima: list[float] = [0.0] * len(model.blocks)
        self.handles = [
            block.attn.register_forward_hook(self._hook(i)) for i, block in enumerate(model.blocks)
        ]

    def _hook(self, layer: int):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            x, attn_mask = args[0], args[1] if len(args) > 1 else None
            cfg = module.cfg
            with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
                T = x.shape[1]
                q, k, _ = module.project_heads(x.float())  # normed as attention sees them
                scale = module.softmax_scale or 1 / math.sqrt(cfg.head_dim)  # nGPT's √d, else 1/√d
                logits = (q @ k.transpose(-1, -2)).abs() * scale
                if cfg.causal and attn_mask is None:
                    logits = logits * torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                elif attn_mask is not None:
                    logits = logits * attn_mask
                self.maxima[layer] = float(logits.max())

        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def recipe_adamw(model: nn.Module, settings: StabilitySettings) -> torch.optim.AdamW:
    """Returns AdamW over ``model`` with the LM recipe's betas and eps, at ``lr_start``."""
    return torch.optim.AdamW(
        model.parameters(),
        lr=settings.lr_start,
        betas=(LM_RECIPE["beta1"], LM_RECIPE["beta2"]),
        eps=LM_RECIPE["eps"],
        weight_decay=settings.weight_decay,
    )


def run_one(
    cfg: ModelConfig, seed: int, batches: Any, settings: StabilitySettings, progress: bool = True
) -> dict[str, Any]:
    """Returns one architecture's test: survived, diverged_at (1-based update or None), reason, and per
    update lr, loss, grad_norm and attn_logit_max (per layer), plus the fp16 overflows."""
    torch.manual_seed(seed)
    model = cpu_linear.convert(Transformer(cfg).train())
    fingerprint = fingerprint_model(model)
    model.to(settings.device)
    low = None if settings.autocast == "fp32" else TORCH_DTYPES[settings.autocast]  # fp32: no autocast
    opt = recipe_adamw(model, settings)
    probe = AttentionLogitProbe(model)
    rows: dict[str, list] = {"lr": [], "loss": [], "grad_norm": [], "attn_logit_max": []}
    diverged_at, reason = None, None
    detector = DivergenceDetector(settings.noise_updates, settings.noise_multiple, settings.smoothing)
    try:
        for t, lr in enumerate(
            progress_bar(
                lr_schedule(settings), enabled=progress, desc=f"{cfg.architecture} seed {seed}", leave=False
            )
        ):
            x, y = batches.get(t * settings.batch_size, settings.batch_size, mask_seed=t)
            x, y = x.to(settings.device), y.to(settings.device)
            for group in opt.param_groups:
                group["lr"] = lr
            with torch.autocast(torch.device(settings.device).type, dtype=low, enabled=low is not None):
                loss = model.loss(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = float(
                torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
            )
            value = loss.item()
            row = {"lr": lr, "loss": finite_or_none(value), "grad_norm": finite_or_none(norm)}
            for key, v in {**row, "attn_logit_max": [finite_or_none(m) for m in probe.maxima]}.items():
                rows[key].append(v)
            reason = detector.check(value, norm)
            if reason:
                diverged_at = t + 1
                break
            opt.step()
            model.normalize_weights()  # nGPT's weights back on the hypersphere; a no-op for the others
    finally:
        probe.remove()
    return {
        "seed": seed,
        "init_fingerprint": fingerprint,
        "survived": settings.updates if diverged_at is None else diverged_at - 1,
        "diverged_at": diverged_at,
        "reason": reason,
        "noise": detector.noise(),  # the batch noise the criterion measured (None: too few updates)
        "lr_at_divergence": rows["lr"][-1] if diverged_at else None,
        "fp16_overflow": fp16_overflows(rows["attn_logit_max"]),
        **rows,
    }


def fp16_overflows(attn_logit_max: list[list[float | None]]) -> list[dict[str, Any]]:
    """Returns {update (1-based), layer, value} for each attention logit maximum past fp16's range (or
    not finite: None) of a run's per-update, per-layer maxima."""
    return [
        {"update": u + 1, "layer": layer, "value": v}
        for u, per_layer in enumerate(attn_logit_max)
        for layer, v in enumerate(per_layer)
        if v is None or v > FP16_MAX
    ]


def finite_or_none(x: float) -> float | None:
    """Returns ``x``, or None when it is inf/NaN (JSON has no such numbers)."""
    return x if math.isfinite(x) else None


def summarize(name: str, runs: list[dict[str, Any]], updates: int) -> dict[str, Any]:
    """Returns a preset's row: survived mean ± std over seeds, LR at divergence, attention logits."""
    survived = [r["survived"] for r in runs]
    lrs = [r["lr_at_divergence"] for r in runs if r["lr_at_divergence"] is not None]
    rows = [[math.inf if v is None else v for v in layers] for r in runs for layers in r["attn_logit_max"]]
    per_layer = [finite_or_none(max(col)) for col in zip(*rows)]
    noise = [r["noise"]["std"] for r in runs if r.get("noise")]
    return {
        "preset": name,
        "seeds": len(runs),
        "survived_mean": statistics.fmean(survived),
        "survived_std": statistics.stdev(survived) if len(survived) > 1 else 0.0,
        "survived_all": sum(s == updates for s in survived),
        "lr_at_divergence_mean": statistics.fmean(lrs) if lrs else None,
        "attn_logit_max": finite_or_none(max(max(r) for r in rows)),
        "attn_logit_max_by_layer": per_layer,
        "fp16_overflow_seeds": sum(bool(r["fp16_overflow"]) for r in runs),
        "noise_std_mean": statistics.fmean(noise) if noise else None,
    }


def stability_test(
    configs: dict[str, ModelConfig],
    seeds: list[int],
    batches: Any,
    settings: StabilitySettings,
    progress: bool = True,
) -> dict[str, Any]:
    """Returns {settings, summary (one row per preset), runs (per preset and seed)}; a bar per run
    unless ``progress`` is False."""
    runs = {
        name: [run_one(cfg, seed, batches, settings, progress) for seed in seeds]
        for name, cfg in configs.items()
    }
    return {
        "analysis": "stability",
        "settings": asdict(settings),
        "criterion": settings.criterion(),
        "seeds": seeds,
        "summary": [summarize(name, rs, settings.updates) for name, rs in runs.items()],
        "runs": {name: rs for name, rs in runs.items()},
    }
