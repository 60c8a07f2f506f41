"""How a run is spread over processes: one process, DDP or FSDP2, behind one strategy object.

The training loop never asks "am I distributed, am I sharded?": it calls the strategy. Each one owns
wrapping the model, turning gradient sync off between micro-batches, the full (unsharded) model and
optimizer state for checkpoints, RNG state, and the collectives the loop needs (all-reduce of a
copy, objects from rank 0). ``join_process_group`` is also what the lm-eval adapter uses.

Under torchrun the default process group is NCCL on GPU (gloo on CPU) with the default timeout.
Waits that can legitimately last long (rank 0 tokenizing a big corpus or training its BPE) go
through a second, gloo group with a long timeout, so the other ranks are not killed by a 10-minute
NCCL barrier.
"""

from __future__ import annotations

import contextlib
import datetime
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from ...base import env
from ...base.errors import ConfigError

T = TypeVar("T")
HOST_WAIT = datetime.timedelta(hours=12)  # rank 0 may tokenize (and train a BPE on) a large corpus
_host_group: Any = None  # the long-timeout gloo group of this process, once joined


def launched_rank() -> int:
    """Returns this process's rank as torchrun or a Slurm job set it (``RANK``; 0 when unset)."""
    return env.integer("RANK", 0)


def resolve_device(requested: str | None, cpu_fallback: bool = False) -> torch.device:
    """Returns the device for ``requested`` (auto/None, cpu, cuda, cuda:N); a bare ``cuda`` gets this
    process's index (LOCAL_RANK). Without CUDA, ``cuda`` warns and gives CPU when ``cpu_fallback``
    (as lm-eval's HFLM does), else raises ValueError."""
    req = str(requested or "auto").strip()
    if req == "auto":
        req = "cuda" if torch.cuda.is_available() else "cpu"
    if not req.startswith("cuda"):
        return torch.device(req)
    if not torch.cuda.is_available():
        if cpu_fallback:
            warnings.warn(
                f"device={requested!r}: CUDA is not available on this machine; using the CPU", stacklevel=3
            )
            return torch.device("cpu")
        raise ConfigError(f"device={requested!r}: CUDA is not available on this machine")
    device = torch.device(req)
    world = env.integer("WORLD_SIZE", 1)
    if device.index is None or world > 1:  # under torchrun each process takes its own GPU
        device = torch.device("cuda", env.integer("LOCAL_RANK", 0))
    return device


def check_device(requested: str | None) -> None:
    """Raises ConfigError when ``requested`` (``--device``: auto/None, cpu, cuda or cuda:N) names a device
    this machine does not have: CUDA on a CPU-only torch or without a visible GPU, or ``cuda:N`` past the
    visible GPUs (under torchrun each process takes its LOCAL_RANK's GPU whatever N). The command line
    calls it for every command with ``--device``, before any work."""
    req = str(requested or "auto").strip()
    if not req.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        why = "this torch is a CPU-only build" if torch.version.cuda is None else "no CUDA device is visible"
        raise ConfigError(f"--device {req}: CUDA is not available on this machine ({why}); use --device cpu")
    index, count = torch.device(req).index, torch.cuda.device_count()
    if index is not None and index >= count and env.integer("WORLD_SIZE", 1) <= 1:
        raise ConfigError(
            f"--device {req}: this machine has {count} CUDA device(s): cuda:0 to cuda:{count - 1}"
        )


def join_process_group(device: torch.device) -> tuple[int, int]:
    """Returns (rank, world size); under torchrun (WORLD_SIZE > 1) joins the process group (NCCL on
    GPU, gloo on CPU) and the long-timeout gloo group, once per process."""
    global _host_group
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if env.integer("WORLD_SIZE", 1) <= 1 and not dist.is_initialized():
        return 0, 1
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if _host_group is None:
        _host_group = dist.new_group(backend="gloo", timeout=HOST_WAIT)
    return dist.get_rank(), dist.get_world_size()


def leave_process_group() -> None:
    """Destroys this process's process groups, if it joined any; returns None. Every command that may
    run under torchrun ends with it: a gloo process left to the interpreter's exit can abort with
    "terminate called without an active exception" (pytorch/pytorch#190489)."""
    global _host_group
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _host_group = None


def make_strategy(requested_device: str, fsdp: bool, bf16: bool = False) -> Strategy:
    """Returns the strategy for this process: single-process, DDP, or FSDP2 (``fsdp``) under torchrun."""
    device = resolve_device(requested_device)
    rank, world = join_process_group(device)
    if world == 1:
        return Strategy(device)
    return (FSDP2 if fsdp else DDP)(device, rank, world, bf16)


class Strategy:
    """How a training process is spread over processes; this base is one process (``name`` "single"):
    no wrapping, no collectives. DDP and FSDP2 override what they distribute."""

    name = "single"

    def __init__(self, device: torch.device, rank: int = 0, world: int = 1, bf16: bool = False):
        self.device, self.rank, self.world, self.bf16 = device, rank, world, bf16

    @property
    def main(self) -> bool:
        return self.rank == 0

    # -- model and optimizer -------------------------------------------------------------------

    def wrap(self, obj: nn.Module) -> nn.Module:
        """Returns ``obj`` (already on the device) wrapped for this strategy."""
        return obj

    def grad_sync(self, wrapped: nn.Module, enabled: bool) -> contextlib.AbstractContextManager:
        """Returns the context for one micro-batch's backward: gradient sync only when ``enabled``."""
        return contextlib.nullcontext()

    def make_optimizer(self, wrapped: nn.Module, **hyper: Any) -> torch.optim.Optimizer:
        """Returns AdamW over ``wrapped``'s parameters, with fused kernels where the device has them."""
        try:
            return torch.optim.AdamW(wrapped.parameters(), fused=True, **hyper)
        except (RuntimeError, ValueError, TypeError):
            return torch.optim.AdamW(wrapped.parameters(), **hyper)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Returns the full (unsharded) model state on CPU; collective under FSDP2."""
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}

    def optimizer_state(self, wrapped: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
        """Returns the full optimizer state to save; collective under FSDP2."""
        return opt.state_dict()

    def load_optimizer_state(self, wrapped: nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
        """Restores a state returned by ``optimizer_state``."""
        opt.load_state_dict(state)

    # -- RNG -----------------------------------------------------------------------------------

    def rng_state(self) -> list[dict[str, Any]]:
        """Returns every process's RNG states in rank order (CPU, and this process's GPU only)."""
        mine = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            mine["cuda"] = torch.cuda.get_rng_state(self.device)
        return self.all_gather_object(mine)

    def set_rng_state(self, states: list[dict[str, Any]]) -> None:
        """Restores this process's RNG states from ``rng_state``'s list."""
        if len(states) != self.world:
            raise ConfigError(
                f"the checkpoint was written by {len(states)} process(es); resume with the same number "
                f"(now {self.world}): the global batch and data order depend on it"
            )
        mine = states[self.rank]
        torch.set_rng_state(mine["torch"])
        if self.device.type == "cuda" and mine.get("cuda") is not None:
            torch.cuda.set_rng_state(mine["cuda"], self.device)

    # -- collectives ---------------------------------------------------------------------------

    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Returns a reduced copy of ``t`` (sum, min or max over processes); ``t`` is left as it is."""
        return t.clone()

    def all_gather_object(self, obj: T) -> list[T]:
        """Returns ``obj`` from every process, in rank order."""
        return [obj]

    def from_main(self, work: Callable[[], T]) -> T:
        """Returns ``work()`` run on rank 0 only, sent to every process (which wait as long as it takes).
        If rank 0 fails, every process raises."""
        return work()

    def barrier(self) -> None:
        """Waits for every process."""


class DDP(Strategy):
    """DistributedDataParallel: every process holds the whole model; gradients are averaged."""

    name = "ddp"

    def wrap(self, obj: nn.Module) -> nn.Module:
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(obj, device_ids=ids)

    def grad_sync(self, wrapped: nn.Module, enabled: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if enabled else wrapped.no_sync()

    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        out = t.clone()
        dist.all_reduce(
            out, op={"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]
        )
        return out

    def all_gather_object(self, obj: T) -> list[T]:
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, obj, group=_host_group)
        return everyone

    def from_main(self, work: Callable[[], T]) -> T:
        box: list[Any] = [None]
        error = None
        if self.main:
            try:
                box[0] = ("ok", work())
            except Exception as e:  # sent on, so the other processes stop too; re-raised here
                error, box[0] = e, ("error", f"{type(e).__name__}: {e}")
        dist.broadcast_object_list(box, src=0, group=_host_group)
        if error is not None:
            raise error
        if box[0][0] == "error":
            raise RuntimeError(f"rank 0 failed: {box[0][1]}")
        return box[0][1]

    def barrier(self) -> None:
        dist.barrier(group=_host_group)


class FSDP2(DDP):
    """FSDP2 (``fully_shard``) per block and at the top; bf16 runs gather bf16 parameters and reduce
    gradients in fp32 (a MixedPrecisionPolicy), so no full-precision all-gathers or weight copies."""

    name = "fsdp2"

    def wrap(self, obj: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (self.world,))
        policy = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.bf16
            else None
        )
        kwargs = {"mesh": mesh, **({"mp_policy": policy} if policy else {})}
        for block in obj.model.blocks:
            fully_shard(block, **kwargs)
        fully_shard(obj, **kwargs)
        return obj

    def make_optimizer(self, wrapped: nn.Module, **hyper: Any) -> torch.optim.Optimizer:
        # Fused AdamW takes sharded (DTensor) parameters on GPU; on CPU the foreach kernels are used.
        fused = {"fused": True} if self.device.type == "cuda" else {}
        return torch.optim.AdamW(wrapped.parameters(), **fused, **hyper)

    def grad_sync(self, wrapped: nn.Module, enabled: bool) -> contextlib.AbstractContextManager:
        wrapped.set_requires_gradient_sync(enabled)
        return contextlib.nullcontext()

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k: v.detach().cpu() for k, v in state.items()}

    def optimizer_state(self, wrapped: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(
            wrapped, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )

    def load_optimizer_state(self, wrapped: nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(wrapped, opt, state, options=StateDictOptions(full_state_dict=True))
