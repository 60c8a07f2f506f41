"""The members of a batched GLUE ensemble (``ensemble``): each point's own model, optimizer and
scheduler; their parameters stacked into one tensor per name, and AdamW applied to the stacks."""

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


class StackedAdamW:
    """AdamW over parameters stacked along a member dimension, each member at its own learning rate.

    Every operation is that of ``torch.optim.AdamW``'s single-tensor path, with the two scalars that
    depend on the learning rate (the decay factor and the step size) as one value per member. As
    AdamW, a parameter without a gradient is left alone and gets its moments at its first gradient.
    """

    def __init__(self, members: Sequence[Member], params: dict[str, torch.Tensor]):
        self.members, self.params = members, params
        first = members[0]
        self.names = {id(p): n for n, p in first.model.named_parameters()}
        group = first.opt.param_groups[0]
        self.betas, self.eps, self.weight_decay = group["betas"], group["eps"], group["weight_decay"]
        self.moments: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.steps: dict[str, int] = {}
        for name, p in first.model.named_parameters():
            if p in first.opt.state:  # resumed: take over the members' moments
                states = [m.opt.state[m.model.get_parameter(name)] for m in members]
                self.steps[name] = int(states[0]["step"])
                self._adopt(name, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states])

    def _adopt(self, name: str, exp_avgs, exp_avg_sqs) -> None:
        """Stacks the members' moments of ``name`` and makes each member's optimizer state a view of them."""
        m1, m2 = torch.stack(exp_avgs), torch.stack(exp_avg_sqs)
        self.moments[name] = (m1, m2)
        for k, m in enumerate(self.members):
            p = m.model.get_parameter(name)
            step = torch.tensor(float(self.steps[name]))
            m.opt.state[p] = {"step": step, "exp_avg": m1[k], "exp_avg_sq": m2[k]}

    def _per_member(self, values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
        return torch.tensor(values, dtype=like.dtype, device=like.device).view(-1, *[1] * (like.dim() - 1))

    @torch.no_grad()
    def step(self) -> None:
        """Updates every stacked parameter with a gradient, each member at its optimizer's current lr."""
        beta1, beta2 = self.betas
        lrs = [m.opt.param_groups[0]["lr"] for m in self.members]
        for name, param in self.params.items():
            grad = param.grad
            if grad is None:
                continue
            if name not in self.moments:
                self.steps[name] = 0
                zeros = [torch.zeros_like(grad[0]) for _ in self.members]
                self._adopt(name, zeros, [z.clone() for z in zeros])
            exp_avg, exp_avg_sq = self.moments[name]
            self.steps[name] += 1
            step = self.steps[name]
            if self.weight_decay != 0:
                param.mul_(self._per_member([1 - lr * self.weight_decay for lr in lrs], param))
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1**step
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            neg_step_size = self._per_member([-(lr / bias_correction1) for lr in lrs], param)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
            param.addcdiv_(exp_avg * neg_step_size, denom)
        for m in self.members:
            m.opt.step()  # no gradients on the member's own views: only keeps its schedule's bookkeeping
            m.sched.step()

    def sync_steps(self) -> None:
        """Writes the step counts into the members' optimizer states (before they are saved)."""
        for name, step in self.steps.items():
            for m in self.members:
                m.opt.state[m.model.get_parameter(name)]["step"] = torch.tensor(float(step))


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
