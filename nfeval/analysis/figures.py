"""PNG figures of the analyses (matplotlib's object API, written atomically by ``report.plots.save_png``)."""

from __future__ import annotations

import math
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..base.plots import PngTarget, save_png


def plot_grads(result: dict[str, Any], path: PngTarget) -> PngTarget:
    """Draws Figure 3 (mean |grad| of ``kind`` by layer, one line per model) and Figure 7 (the same over
    the baseline's mean across layers); returns ``path``."""
    kind = result["kind"]
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    for m in result["models"]:
        layers = range(len(m["values"][kind]))
        left.plot(layers, m["values"][kind], marker="o", ms=3, label=m["name"])
        right.plot(layers, m["relative"], marker="o", ms=3, label=m["name"])
    right.axhline(1.0, ls="--", lw=0.8, color="grey")
    left.set_ylabel(f"mean |∂L/∂W| ({kind})")
    right.set_ylabel(f"÷ {result['baseline']}'s mean over layers")
    left.set_title("Gradient by layer (Figure 3)")
    right.set_title("Relative to the baseline (Figure 7)")
    for ax in (left, right):
        ax.set_xlabel("layer")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.legend(fontsize=8)
    return save_png(fig, path)


def plot_gains(result: dict[str, Any], path: PngTarget) -> PngTarget:
    """Draws mean FFN-LN γ, post-attention-LN γ and λ_resid by layer (one line per model) and a
    head-gain heatmap per model (layers × heads); returns ``path``."""
    models = result["models"]
    with_heads = [m for m in models if m["gains"]["head_gain"]]
    lines = [
        (k, t)
        for k, t in (
            ("ffn_ln_mean", "FFN LN γ"),
            ("attn_ln_mean", "post-attention LN γ"),
            ("resid_gain_mean", "λ_resid"),
        )
        if any(m["gains"][k] for m in models)
    ]
    n = len(lines) + len(with_heads)
    fig = Figure(figsize=(3.8 * n, 3.8), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, (key, title) in zip(axes, lines):
        for m in models:
            if m["gains"][key]:
                ax.plot(range(len(m["gains"][key])), m["gains"][key], marker="o", ms=3, label=m["name"])
        ax.set_title(f"mean {title} by layer")
        ax.set_xlabel("layer")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax, m in zip(axes[len(lines) :], with_heads):
        image = ax.imshow(m["gains"]["head_gain"], aspect="auto", cmap="viridis")
        ax.set_title(f"{m['name']}: HeadScale γ")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(image, ax=ax)
    return save_png(fig, path)


def _nan(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def plot_stability(result: dict[str, Any], path: PngTarget) -> PngTarget:
    """Draws loss vs learning rate (every preset and seed) and the largest attention logit per update;
    returns ``path``."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    for i, (name, runs) in enumerate(result["runs"].items()):
        color = f"C{i}"
        for j, r in enumerate(runs):
            label = name if j == 0 else None
            left.plot(r["lr"], _nan(r["loss"]), color=color, lw=1, label=label)
            right.plot(
                range(1, len(r["lr"]) + 1),
                [max(_nan(v)) for v in r["attn_logit_max"]],
                color=color,
                lw=1,
                label=label,
            )
            if r["diverged_at"] and r["loss"][-1] is not None:
                left.plot(r["lr"][-1], r["loss"][-1], "x", color=color)
    left.set_xscale("log")
    left.set_xlabel("learning rate")
    left.set_ylabel("training loss")
    left.set_title("Loss as the LR rises (x: divergence)")
    right.axhline(65504, ls="--", lw=0.8, color="red", label="fp16 max")
    right.set_yscale("log")
    right.set_xlabel("update")
    right.set_ylabel("max |q·k|/√d over layers")
    right.set_title("Largest attention logit")
    for ax in (left, right):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    return save_png(fig, path)


def plot_fig3_curves(rows_by_run: dict[str, list[dict[str, Any]]], kind: str, path: str) -> str:
    """Draws Figure 3: mean |grad| of ``kind`` per layer against the update, one panel per run (rows as
    ``engine.training.grad_stats.read_grad_stats`` returns them); returns ``path``."""
    fig = Figure(figsize=(3.8 * len(rows_by_run), 3.6), layout="constrained")
    axes = fig.subplots(1, len(rows_by_run), squeeze=False, sharey=True)[0]
    for ax, (name, rows) in zip(axes, rows_by_run.items()):
        updates = [r["update"] for r in rows]
        for layer, series in enumerate(zip(*(r["values"][kind] for r in rows))):
            ax.plot(updates, series, lw=1, label=f"layer {layer}")
        ax.set_title(name)
        ax.set_xlabel("update")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel(f"mean |∂L/∂W| ({kind})")
    axes[0].legend(fontsize=7)
    return save_png(fig, path)


def plot_fig7(
    baseline: dict[str, list[float]], candidate: dict[str, list[float]], kinds: tuple[str, ...], path: str
) -> str:
    """Draws Figure 7: per parameter kind, each layer's gradient over the baseline's mean across layers
    for the baseline and the candidate (1.0: the baseline's average); returns ``path``."""
    fig = Figure(figsize=(3.2 * len(kinds), 3.4), layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False, sharey=True)[0]
    for ax, kind in zip(axes, kinds):
        for name, series in (("Pre-LN", baseline[kind]), ("NormFormer", candidate[kind])):
            ax.plot(range(len(series)), series, marker="o", ms=3, label=name)
        ax.axhline(1.0, ls="--", lw=0.8, color="grey")
        ax.set_title(kind)
        ax.set_xlabel("layer")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("÷ Pre-LN's mean over layers")
    axes[0].legend(fontsize=7)
    return save_png(fig, path)


# the figure of each analysis of ``nfeval analyze`` (``analysis.runs.ANALYSES`` names them)
PLOTS = {"grads": plot_grads, "gains": plot_gains, "stability": plot_stability}
