"""Gradient norms by layer: the paper's Figure 3 (mean |∂L/∂W| of the second FFN weight, by layer)
and Figure 7 (each layer's value over the baseline's mean across layers).

The statistic is, per layer and parameter kind, the mean over the tensor's elements of |∂L/∂W| where
L is the **mean** token cross-entropy of the batch (fairseq's gradient after
``multiply_grads(1/sample_size)``), before any clipping. Kinds: ``fc1``, ``fc2``, ``q``, ``k``, ``v``
(fairseq's q/k/v_proj: the three row blocks of nfeval's fused ``qkv``), ``out_proj`` (weights only),
and the NormFormer gains when present: ``attn_out_norm`` (fairseq attn_ln γ), ``ffn_hidden_norm``
(ffn_layernorm γ), ``head_gain`` (c_attn), ``resid_gain`` (w_resid). Layer order is block order. A
fairseq checkpoint is imported into the same Transformer, so the values mean the same for it.

At a checkpoint (``--ckpt``) the value is computed on each of N batches and averaged over them, as a
training window averages one value per update, with dropout on as in training and its masks drawn
from ``--seed``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..base.errors import DataError
from ..base.progress import progress_bar
from ..engine.training.grad_stats import per_layer_mean_abs, tracked_parameters
from .inputs import Target


def grad_norms(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> dict[str, list[float]]:
    """Returns {kind: per-layer mean |∂L/∂W|} for L = mean cross-entropy of ``model`` on (idx, targets).

    Uses ``torch.autograd.grad``: the parameters' ``.grad`` are left as they were.
    """
    params = tracked_parameters(model)
    loss = model.loss(idx, targets)
    grads = dict(zip(map(id, params), torch.autograd.grad(loss, params)))
    return per_layer_mean_abs(model, lambda p: grads[id(p)])


def grads_at(
    target: Target, batches: Any, n_batches: int, batch_size: int, seed: int
) -> dict[str, list[float]]:
    """Returns ``grad_norms`` averaged over the first ``n_batches`` batches of ``batches`` (train mode,
    so dropout acts as in training, its masks drawn from ``seed``: the same model gives the same values,
    however it was stored; the process's own random state is left as it was)."""
    model = target.model.train()
    total: dict[str, list[float]] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i in progress_bar(range(n_batches), desc=f"grads {target.name}", unit="batch", leave=False):
            x, y = batches.get(i * batch_size, batch_size, mask_seed=i)
            for kind, layers in grad_norms(model, x, y).items():
                total[kind] = [a + b for a, b in zip(total.get(kind, [0.0] * len(layers)), layers)]
    model.eval()
    return {kind: [v / n_batches for v in layers] for kind, layers in total.items()}


def relative_to_baseline(values: list[float], baseline: list[float]) -> list[float]:
    """Returns Figure 7's ratios: each of ``values`` over the mean of ``baseline`` (2.0: twice its mean)."""
    mean = sum(baseline) / len(baseline)
    return [v / mean for v in values]


def relative_by_kind(
    values: dict[str, list[float]], baseline: dict[str, list[float]]
) -> dict[str, list[float]]:
    """Returns Figure 7 for every parameter kind both have: {kind: each layer's value over the
    baseline's mean of that kind across layers}."""
    return {k: relative_to_baseline(v, baseline[k]) for k, v in values.items() if k in baseline}


def grads_result(entries: list[dict[str, Any]], kind: str, baseline: str | None) -> dict[str, Any]:
    """Returns the analysis result: each entry with its ``kind`` values and Figure 7 ratios to the
    baseline entry (``baseline`` name; default the first Pre-LN entry, else the first)."""
    for i, e in enumerate(entries):  # two runs both called "normformer" stay apart
        if any(e["name"] == other["name"] for other in entries[:i]):
            e["name"] = f"{e['name']}#{i + 1}"
    names = [e["name"] for e in entries]
    if baseline is None:
        pre = [e["name"] for e in entries if e["info"].get("architecture") == "prenorm"]
        baseline = pre[0] if pre else names[0]
    if baseline not in names:
        raise DataError(f"--baseline {baseline}: not one of the analysed models {names}")
    missing = [e["name"] for e in entries if kind not in e["values"]]
    if missing:
        raise DataError(f"--kind {kind}: not recorded for {missing}")
    base = next(e for e in entries if e["name"] == baseline)["values"]
    for e in entries:
        e["relative"] = relative_to_baseline(e["values"][kind], base[kind])
        e["relative_by_kind"] = relative_by_kind(e["values"], base)
    return {"analysis": "grads", "kind": kind, "baseline": baseline, "models": entries}
