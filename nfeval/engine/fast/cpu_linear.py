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
(plain oneDNN ~20 and ~11, MKL ~17 and ~6). On AMD at one thread, one-row products instead read a
contiguous transposed copy through torch's ``addmm`` (MKL's one-row product over an (in, out) weight,
the layout of HF GPT-2's ``Conv1D``): ``nfeval generate`` at batch 1 took 0.96× the time of oneDNN's
GEMV layout on a Zen 4 at the 125M shape, 0.89× that of MKL on the weight itself capped at AVX2
(``one_row_layout``).

Which is faster depends on the CPU: MKL picks its code by vendor, oneDNN by instruction set. On an Intel
CPU MKL runs AVX-512 code, as fast as oneDNN forward from 512 rows (one thread of a Xeon with AMX) and
faster forward + backward (oneDNN's backward pays two transposing copies: 0.83-0.89× MKL's speed), and
its one- and two-row products beat packed oneDNN. On an AMD CPU without AVX-512 (a Zen 3 EPYC) both run
AVX2 code and oneDNN forward + backward runs 0.80-0.96× MKL's speed. So there the default, ``auto``,
keeps torch's kernel except for products with packed weights from ``PACKED_ROWS`` rows (and, on AMD
with more than one thread, from one row: ``one_row_layout``); on an AMD CPU
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
    from N rows``, then, where decoding ``decoding_rows`` rows at a time reads weights laid out for one
    row (``one_row_layout``), `` and one row`` (oneDNN's layout) or ``; one row: torch on transposed
    weights``."""
    plain, rows = choice()
    text = plain if plain == "onednn" or rows is None else f"torch; packed: onednn from {rows} rows"
    layout = one_row_layout() if decoding_rows == 1 else None
    if layout == "transposed":
        return f"{text}; one row: torch on transposed weights"
    return f"{text} and one row" if layout == "one_row" and plain != "onednn" else text


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
        and _fp32_cpu_input(x)
        and weight.dtype == fp32
        and weight.dim() == 2
        and (bias is None or (bias.dtype == fp32 and _plain(bias)))
        and weight.is_contiguous()
        and _plain(weight)
    )


def _fp32_cpu_input(x: torch.Tensor) -> bool:
    """Whether ``x`` is an input nfeval's products may take from ``F.linear``: plain fp32 rows on a CPU,
    outside autocast (which ``F.linear`` obeys) and ``torch.compile`` (inductor lowers ``F.linear``
    itself and cannot lower these kernels)."""
    return (
        not torch.compiler.is_compiling()
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.dim() >= 2
        and not torch.is_autocast_enabled("cpu")
        and _plain(x)
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
    ``packed_weights`` its weight's copy serves the products that need no gradient and that the copy's
    layout is for. ``convert`` makes a model's ``nn.Linear`` modules these."""

    # (the copy, weight._version copied, its layout: "rows", "one_row" or "transposed")
    packed: tuple[torch.Tensor, int, str] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self.packed
        if (
            packed is not None
            and packed[1] == self.weight._version
            and not _needs_grad(x, self.weight, self.bias)
        ):
            copy, _, layout = packed
            if layout == "transposed" and _fp32_cpu_input(x) and x.numel() == x.shape[-1]:  # one row
                return _transposed_product(x, copy, self.bias)
            if layout != "transposed" and takes_onednn(
                x, self.weight, self.bias, packed=True, for_one_row=layout == "one_row"
            ):
                return _product(x, copy, self.bias)
        return linear(x, self.weight, self.bias)


def _transposed_product(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Returns ``F.linear(x, weight_t.t(), bias)`` for one row ``x``, from the (in, out) copy ``weight_t``."""
    row = x.reshape(1, -1)
    out = row @ weight_t if bias is None else torch.addmm(bias, row, weight_t)
    return out.view(*x.shape[:-1], weight_t.shape[1])


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
    """Yields with every fp32 CPU ``Linear`` of ``model`` holding a copy of its weight laid out for the
    products to come, which inference products read instead. Copies only when the copies fit in
    ``PACK_MAX_BYTES`` and the caller expects at least ``MIN_PACK_STEPS`` forward passes (``steps``) to
    repay them; drops them on exit. Nested calls copy once.

    ``rows``: how many rows most products will have (a decoding batch). For one row, the layout is
    ``one_row_layout``'s: oneDNN's GEMV layout (bitwise the plain oneDNN kernel's one-row results; its
    many-row layout read one-row products' weights ~10% slower: the 125M shape's 48 linear layers,
    cache-cold, one Zen 4 thread, 20.5 ms a step against 18.5), a transposed copy, or none. For more
    rows, where the kernel is oneDNN, its blocked layout (bitwise the plain kernel's results from two
    rows up): a row count there was no faster."""
    linears = [
        m
        for m in model.modules()
        if isinstance(m, Linear) and m.packed is None and _plain(m.weight) and m.weight.device.type == "cpu"
        and m.weight.dtype == torch.float32
    ]  # fmt: skip
    fits = sum(m.weight.nbytes for m in linears) <= PACK_MAX_BYTES
    layout = one_row_layout() if rows == 1 else ("rows" if choice().packed_rows is not None else None)
    if layout is None or not fits or steps < MIN_PACK_STEPS:
        linears = []
    for m in linears:
        with torch.no_grad():
            weight = m.weight.detach()
            copy = (
                weight.t().contiguous()
                if layout == "transposed"
                else _pack(weight, 1 if layout == "one_row" else None)
            )
            m.packed = (copy, m.weight._version, layout)
    try:
        yield
    finally:
        for m in linears:
            m.packed = None


def one_row_layout() -> str | None:
    """Returns the layout of the weights one-row products (decoding at batch 1) read here: ``"transposed"``
    (a contiguous (in, out) copy that torch's ``addmm``, MKL, reads), ``"one_row"`` (oneDNN's GEMV layout)
    or None (the weight itself, through ``linear``).

    Under ``auto`` on an AMD CPU at one thread, transposed: whole ``nfeval generate`` commands of the
    125M shape on a Zen 4 (8 prompts × 256 tokens, batch 1, one thread) took 0.957× the time of oneDNN's
    GEMV layout and, capped at AVX2, 0.891× that of MKL on the weight itself (a real Zen 3 was not
    measured), with the same tokens (``benchmarks/HISTORY.md``, 2026-12-06);
    alone, outside the decoding loop, the 48 products were no faster (1.01×), and the copies cost ~0.25 s
    a call. At more threads oneDNN's layout, wherever oneDNN takes one-row products: where every product
    takes it, and on AMD, whose MKL runs a one-row product on one thread whatever torch's count (the 48
    products on a Zen 4, two threads: MKL 24.0 ms, oneDNN's GEMV layout 14.3; capped at AVX2, 24.1 and
    13.8). Intel's MKL was not measured so: there one-row products read the weight itself."""
    packed_rows = choice().packed_rows
    amd = cpu_vendor() == "AuthenticAMD"
    if amd and switch(ENV) == "auto" and torch.get_num_threads() == 1:
        return "transposed"
    if packed_rows == 1 or (packed_rows is not None and amd and torch.get_num_threads() > 1):
        return "one_row"
    return None


def _pack(weight: torch.Tensor, rows: int | None) -> torch.Tensor:
    """Returns oneDNN's blocked copy of ``weight`` for products of ``rows`` rows (None: many)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)
