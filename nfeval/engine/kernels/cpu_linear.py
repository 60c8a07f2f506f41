"""fp32 linear products on an x86 CPU through oneDNN: ``F.linear``'s value, at AVX-512 speed on AMD.

torch's CPU ``F.linear`` (``addmm``) calls MKL's sgemm, which runs its AVX2 code on AMD processors: on
the 2-core EPYC (Zen 5) one thread's fp32 products reach ~100 GFLOP/s through MKL and ~230 through
oneDNN (``torch.ops.mkldnn._linear_pointwise``, the kernel inductor uses) from 64 rows up, and few-row
products read their weights faster (``benchmarks/cpu_linear.py``; ``benchmarks/RESULTS.md``, "CPU
linear kernel"). Both accumulate in fp32 and differ by the order of their sums, as any two GEMM kernels
do (|Δ| ~1e-6 relative; oneDNN's rounding error is ~1.4× MKL's on average).

``linear`` takes oneDNN for fp32 tensors on a CPU when the product is large enough to repay its fixed
cost (~10 µs a call more than MKL's: ``MIN_MACS``) and the weight is plain and contiguous (the kernel
reads the weight as contiguous whatever its strides say). Everything else is ``F.linear``: other
devices and dtypes, autocast (which ``F.linear`` obeys), ``torch.compile`` (inductor lowers
``F.linear`` its own way), tensors under ``torch.func`` transforms (vmap has no rule for the kernel),
tensor subclasses (DTensor). Gradients go through ``_OneDNNLinear``, whose backward runs the same
kernel on transposed copies.

The model itself is plain torch; ``convert`` puts the kernel into a built model where nfeval trains or
scores it (the trainer, the scoring and generation backends, GLUE fine-tuning, the analyses), as
torchtitan's model converters do, and registers the kernel with torch's FLOP counter then.

Inference that runs many forward passes (decoding, zero-shot scoring) packs the weights first
(``packed_weights``: oneDNN's blocked layout, which the kernel otherwise reorders into at every call):
a decoding step of the 125M shape then reads its weights at ~31 GB/s with one row and ~15 with 16
(plain oneDNN ~20 and ~11, MKL ~17 and ~6).

Which is faster depends on the CPU: MKL picks its code by vendor, oneDNN by instruction set. On an Intel
CPU MKL runs AVX-512 code, as fast as oneDNN forward from 512 rows (one thread of a Xeon with AMX) and
faster forward + backward (oneDNN's backward pays two transposing copies: 0.83-0.89× MKL's speed), and
its one- and two-row products beat packed oneDNN. On an AMD CPU without AVX-512 (a Zen 3 EPYC) both run
AVX2 code and oneDNN forward + backward runs 0.80-0.96× MKL's speed. So there the default, ``auto``,
keeps torch's kernel except for products with packed weights from ``PACKED_ROWS`` rows (and, on AMD
with more than one thread, from one row: ``one_row_packing``); on an AMD CPU
with AVX-512 (Zen 4, 5) ``auto`` takes oneDNN for every product. ``NFEVAL_CPU_LINEAR=onednn|torch``
forces one (``torch``: torch's results bit for bit); ``choice()`` says what this machine does.
"""

from __future__ import annotations

import contextlib
import functools
import platform
from collections.abc import Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.utils.flop_counter import register_flop_formula

from ...base.env import CPU_LINEAR, switch

ENV = CPU_LINEAR
# Rows × in × out below which MKL's fixed cost, ~10 µs a call lower, wins (break-even on one EPYC thread:
# ~1M with a plain weight, ~0.5M with a packed one, which the kernel need not reorder first).
MIN_MACS, MIN_PACKED_MACS = 1 << 20, 1 << 19
# ``packed_weights`` reorders every weight (~1.4 GB/s: 0.25 s for the 125M shape), which one- to 16-row
# products repay at 6-9 ms a decoding step of that shape: worth it from a few dozen forward passes on.
MIN_PACK_STEPS = 32
PACK_MAX_BYTES = 1 << 30  # the copies double the linear weights' memory while packed
# Where oneDNN has no faster code than MKL (an Intel Xeon; an AMD EPYC without AVX-512), packed oneDNN
# still reads few-row products' weights faster (one thread, 125M shapes): on the Xeon 0.73-0.90× MKL's
# speed at 1-2 rows and 1.15-1.67× at 4-16 (generation at batch 1 / 16 ran 1.21× / 1.32× HF's on MKL,
# 1.09× / 1.53× all packed); on a Zen 3 EPYC 0.77-1.07× at 1 row, 0.99-1.67× at 4, 0.93-1.17× at 16.
PACKED_ROWS = 4


def _cpuinfo(field: str) -> str | None:
    """Returns the first value of ``field`` in Linux's /proc/cpuinfo, or None where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_vendor() -> str:
    """Returns the CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...), or "" when unknown."""
    vendor = _cpuinfo("vendor_id")
    if vendor is not None:
        return vendor
    processor = platform.processor()  # Windows: "Intel64 Family 6 ... GenuineIntel"
    return next((v for v in ("GenuineIntel", "AuthenticAMD") if v in processor), "")


def cpu_has_avx512() -> bool:
    """Returns whether torch's CPU kernels run AVX-512 code here: the CPU's instruction set as torch
    detects it on any OS, capped by ``ATEN_CPU_CAPABILITY`` (``avx2`` makes an AVX-512 CPU choose as a
    Zen 3 does: ``benchmarks/generate_command_vs_hf.py --emulate-avx2``)."""
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def onednn_available() -> bool:
    """Returns whether this is an x86 machine whose torch has oneDNN's linear kernel."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return x86 and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class Choice(NamedTuple):
    """Which products take oneDNN on this machine."""

    kernel: str  # of products with a plain weight (training, prefill): "onednn" or "torch"
    packed_rows: int | None  # rows from which a product with a packed weight does; None: nothing packed


@functools.cache
def choice() -> Choice:
    """Returns which fp32 CPU products take oneDNN, as ``NFEVAL_CPU_LINEAR`` (default ``auto``) says.

    ``auto``: on an x86 CPU with AVX-512 not made by Intel (where MKL runs its AVX2 code and oneDNN its
    AVX-512 code) every product; elsewhere (an Intel CPU, where MKL runs AVX-512 code too; a CPU without
    AVX-512, where both run AVX2 code) products with packed weights from ``PACKED_ROWS`` rows (MKL's
    own one- and two-row products are faster) and nothing else. ``onednn``: every product, on any x86
    CPU. Either only with a torch built with oneDNN's kernel. ``torch``: none (torch's ``F.linear``
    everywhere, bit for bit)."""
    wanted = switch(ENV)
    if wanted == "torch" or not onednn_available():
        return Choice("torch", None)
    if wanted == "auto" and (cpu_vendor() == "GenuineIntel" or not cpu_has_avx512()):
        return Choice("torch", PACKED_ROWS)
    return Choice("onednn", 1)


def kernel() -> str:
    """Returns the kernel of fp32 CPU products with a plain weight: ``onednn`` or ``torch``."""
    return choice().kernel


def describe(decoding_rows: int | None = None) -> str:
    """Returns the kernels in words, for run records: ``onednn``, ``torch``, or ``torch; packed: onednn
    from N rows``, then `` and one row`` where decoding ``decoding_rows`` rows at a time reads weights
    packed for one row (``one_row_packing``)."""
    plain, rows = choice()
    if plain == "onednn" or rows is None:
        return plain
    one_row = " and one row" if decoding_rows == 1 and one_row_packing() else ""
    return f"torch; packed: onednn from {rows} rows{one_row}"


def _linear_flops(x_shape, weight_shape, *args, **kwargs) -> int:
    """torch's FLOP counter formula for the kernel: 2 × rows × in × out, as for ``addmm``."""
    rows = 1
    for size in x_shape[:-1]:
        rows *= size
    return 2 * rows * weight_shape[0] * weight_shape[1]


@functools.cache
def count_kernel_flops() -> None:
    """Makes FlopCounterMode (the MFU checks) count the kernel as it counts addmm; returns None. Once per
    process: torch's FLOP table is the process's."""
    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    if op is not None:
        register_flop_formula(op)(_linear_flops)


def _plain(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, nn.Parameter) and not torch._C._functorch.is_functorch_wrapped_tensor(t)


def takes_onednn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    packed: bool = False,
    for_one_row: bool = False,
) -> bool:
    """Returns whether ``linear(x, weight, bias)`` runs on oneDNN (else on ``F.linear``); ``packed``:
    whether a product with the weight's packed copy would (a lower size floor; ``choice().packed_rows``),
    ``for_one_row``: a copy laid out for one row (``packed_weights``)."""
    fp32 = torch.float32
    floor = MIN_PACKED_MACS if packed else MIN_MACS
    rows = x.numel() // max(1, x.shape[-1]) if x.dim() else 0
    # the size and this machine's rule first: they decide most calls (a decoding step's) in a few µs
    return (
        rows * weight.numel() >= floor
        and _serves(rows, packed, for_one_row)
        and not torch.compiler.is_compiling()  # inductor lowers F.linear itself (it cannot lower this kernel)
        and x.device.type == "cpu"
        and x.dtype == fp32
        and weight.dtype == fp32
        and weight.dim() == 2
        and x.dim() >= 2
        and (bias is None or (bias.dtype == fp32 and _plain(bias)))
        and weight.is_contiguous()
        and not torch.is_autocast_enabled("cpu")
        and _plain(x)
        and _plain(weight)
    )


def _serves(rows: int, packed: bool, for_one_row: bool = False) -> bool:
    """Whether this machine's ``choice()`` sends a product of ``rows`` rows to oneDNN (``for_one_row``: its
    packed copy is laid out for one row, which ``packed_weights`` makes only where one row takes it)."""
    kernel, packed_rows = choice()
    if packed:
        return packed_rows is not None and (rows >= packed_rows or (for_one_row and rows == 1))
    return kernel == "onednn"


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _product(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # grad @ weight: weight.t() as the (in, out) "weight" of the kernel
            grad_x = _product(grad, weight.t().contiguous(), None)
        rows = grad.reshape(-1, grad.shape[-1])
        if ctx.needs_input_grad[1]:  # grad.t() @ x: the sum runs over rows
            grad_weight = _product(rows.t(), x.reshape(-1, x.shape[-1]).t().contiguous(), None)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = rows.sum(0)
        return grad_x, grad_weight, grad_bias


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Returns ``F.linear(x, weight, bias)``, computed by oneDNN where ``takes_onednn`` says so."""
    if not takes_onednn(x, weight, bias):
        return F.linear(x, weight, bias)
    if _needs_grad(x, weight, bias):
        return _OneDNNLinear.apply(x, weight, bias)
    return _product(x, weight, bias)


def _needs_grad(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, init and state dict) whose product is ``linear``'s; inside
    ``packed_weights`` its weight's blocked copy serves products that need no gradient. ``convert``
    makes a model's ``nn.Linear`` modules these."""

    # (oneDNN blocked weight, weight._version packed, laid out for one row)
    packed: tuple[torch.Tensor, int, bool] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self.packed
        if (
            packed is not None
            and packed[1] == self.weight._version
            and not _needs_grad(x, self.weight, self.bias)
            and takes_onednn(x, self.weight, self.bias, packed=True, for_one_row=packed[2])
        ):
            return _product(x, packed[0], self.bias)
        return linear(x, self.weight, self.bias)


def convert(model: nn.Module) -> nn.Module:
    """Returns ``model`` (changed in place) computing its fp32 CPU linear products as this machine's
    ``choice()`` says: every plain ``nn.Linear`` becomes a ``Linear`` (its parameters, hooks and state
    dict kept) and every module's ``linear`` product of shared or sliced weights (``F.linear``: the tied
    output projection, part of qkv) becomes ``linear``. FlopCounterMode counts the kernel from then on
    (``count_kernel_flops``). Converting again changes nothing.

    Apply it after the model is built, before it is wrapped (DDP, FSDP, ``torch.compile``), where nfeval
    trains or scores: the model, its exports and saved weights stay plain torch."""
    count_kernel_flops()
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = Linear  # as torch's parametrize and FSDP2 swap a module's class in place
        elif getattr(module, "linear", None) is F.linear:
            module.linear = linear
    return model


@contextlib.contextmanager
def packed_weights(model: nn.Module, steps: int = MIN_PACK_STEPS, rows: int | None = None) -> Iterator[None]:
    """Yields with every fp32 CPU ``Linear`` of ``model`` holding oneDNN's blocked copy of its weight,
    which inference products read instead (bitwise the plain kernel's results from two rows up). Packs
    only when the kernel is oneDNN, the copies fit in ``PACK_MAX_BYTES`` and the caller expects at least
    ``MIN_PACK_STEPS`` forward passes (``steps``) to repay the copy; drops the copies on exit. Nested
    calls pack once.

    ``rows``: how many rows most products will have (a decoding batch). For one row the copies take
    oneDNN's GEMV layout, bitwise the plain kernel's one-row results; the many-row layout reads one-row
    products' weights ~10% slower (the 125M shape's 48 linear layers, cache-cold, one Zen 4 thread: 20.5
    ms a step against 18.5). Where one-row products keep MKL (``one_row_packing``), nothing is packed for
    one row. For more rows the many-row layout stays: a row count there was no faster."""
    linears = [
        m
        for m in model.modules()
        if isinstance(m, Linear) and m.packed is None and _plain(m.weight) and m.weight.device.type == "cpu"
        and m.weight.dtype == torch.float32
    ]  # fmt: skip
    fits = sum(m.weight.nbytes for m in linears) <= PACK_MAX_BYTES
    one_row = rows == 1
    unread = one_row and not one_row_packing()  # one-row products here keep MKL: a copy would go unread
    if choice().packed_rows is None or not fits or steps < MIN_PACK_STEPS or unread:
        linears = []
    for m in linears:
        with torch.no_grad():
            m.packed = (_pack(m.weight.detach(), 1 if one_row else None), m.weight._version, one_row)
    try:
        yield
    finally:
        for m in linears:
            m.packed = None


def one_row_packing() -> bool:
    """Returns whether one-row products (decoding at batch 1) read weights packed for one row here: where
    every product takes oneDNN, and on an AMD CPU whose rule keeps MKL for few rows when torch runs more
    than one thread. MKL's one-row product runs on one thread whatever torch's count, oneDNN's on all of
    them (the 125M shape's 48 one-row products on a Zen 4, one thread / two: MKL 23.8 / 24.0 ms, packed
    for one row 20.1 / 14.3; capped at AVX2, 24.6 / 24.1 and 20.6 / 13.8). At one thread MKL stays: the
    caps overstated oneDNN's one-row speed against a real Zen 3's before. Intel's MKL was not measured so."""
    packed_rows = choice().packed_rows
    if packed_rows is None:
        return False
    return packed_rows == 1 or (cpu_vendor() == "AuthenticAMD" and torch.get_num_threads() > 1)


def _pack(weight: torch.Tensor, rows: int | None) -> torch.Tensor:
    """Returns oneDNN's blocked copy of ``weight`` for products of ``rows`` rows (None: many)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)
