"""The members of a batched GLUE ensemble (``ensemble``): each point's own model, optimizer and
scheduler; their parameters stacked into one tensor per name, each member stepping its own AdamW on its
slice of the stacks."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from . import finetune
from .points import Point


@dataclass
class Member:
    """One point of an ensemble: its own model, optimizer and scheduler (the state its state.pt saves),
    its history and statistics so far, and the RNG state it continues from."""

    point: Point
    model: torch.nn.Module
    opt: torch.optim.AdamW
    sched: torch.optim.lr_scheduler.LambdaLR
    history: list
    stats: dict
    rng: torch.Tensor
    cuda_rng: torch.Tensor | None

    @property
    def state_path(self) -> str:
        return os.path.join(self.point.directory, finetune.STATE)


def step_members(members: Sequence[Member], params: dict[str, torch.Tensor], views: list[list]) -> None:
    """Steps each member's own AdamW (fused, as ``run_point``'s) and schedule on its slice of the stacked
    gradients (``views[k]``: member k's parameters, in the order of ``params``, views of the stacks that
    its step therefore updates in place). A parameter without a gradient is left alone, as AdamW does."""
    grads = [stack.grad for stack in params.values()]
    for k, (m, mine) in enumerate(zip(members, views)):
        for p, grad in zip(mine, grads):
            p.grad = None if grad is None else grad[k]
        m.opt.step()
        m.sched.step()
        m.opt.zero_grad(set_to_none=True)


def clip_per_member(params: dict[str, torch.Tensor], max_norm: float) -> None:
    """Scales each member's gradients as ``clip_grad_norm_`` would scale that member's alone."""
    grads = [p.grad for p in params.values() if p.grad is not None]
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads])  # (parameters, members)
    coef = (max_norm / (norms.norm(dim=0) + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))


def stack_members(members: Sequence[Member]) -> dict[str, torch.Tensor]:
    """Returns the members' parameters stacked (leaves that require grad); each member's parameters
    become views of them."""
    stacked = {}
    for name, _ in members[0].model.named_parameters():
        mine = [m.model.get_parameter(name) for m in members]
        stacked[name] = torch.stack([p.detach() for p in mine]).requires_grad_()
        for k, p in enumerate(mine):
            p.data = stacked[name].detach()[k]
    return stacked
