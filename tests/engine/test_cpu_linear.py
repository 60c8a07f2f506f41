"""The oneDNN linear kernel: F.linear's values and gradients, where it runs and where it must not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nfeval.base.errors import ConfigError
from nfeval.engine.fast import cpu_linear
from nfeval.engine.fast.cpu_linear import Linear, linear, packed_weights, takes_onednn
from nfeval.engine.fast.speed import Fast
from nfeval.engine.inference.generate import generate
from nfeval.engine.model.config import ModelConfig
from nfeval.engine.model.model import SequenceClassifier, Transformer

pytestmark = pytest.mark.skipif(
    not cpu_linear.onednn_available(), reason="not an x86 torch built with oneDNN's kernel"
)


@pytest.fixture(autouse=True)
def onednn_kernel(monkeypatch):
    """Every test here runs with the oneDNN kernel, whatever ``auto`` picks on this CPU."""
    monkeypatch.setenv(cpu_linear.ENV, "onednn")
    cpu_linear.choice.cache_clear()
    yield
    monkeypatch.undo()  # the environment, and any test's own patches of this module
    cpu_linear.choice.cache_clear()


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the products that reach oneDNN."""
    calls = []
    product = cpu_linear._product

    def counted(x, weight, bias):
        calls.append((tuple(x.shape), weight.is_mkldnn))
        return product(x, weight, bias)

    monkeypatch.setattr(cpu_linear, "_product", counted)
    return calls


@pytest.fixture
def transposed_calls(monkeypatch):
    """Records the input shape of every product a transposed copy serves."""
    calls = []
    product = cpu_linear._transposed_product

    def counted(x, weight_t, bias):
        calls.append(x.shape)
        return product(x, weight_t, bias)

    monkeypatch.setattr(cpu_linear, "_transposed_product", counted)
    return calls


def operands(rows=64, n_in=128, n_out=256, seed=0):
    """Returns (x, weight, bias) whose product is above the kernel's size floor."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(n_out, n_in, generator=g) * 0.1
    return torch.randn(rows, n_in, generator=g), weight, torch.randn(n_out, generator=g)


@pytest.mark.parametrize("shape", [(64, 128), (4, 16, 128)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_values_equal_f_linear(kernel_calls, shape, with_bias):
    x, w, b = operands()
    x = torch.randn(shape)
    bias = b if with_bias else None
    torch.testing.assert_close(linear(x, w, bias), F.linear(x, w, bias), rtol=1e-5, atol=1e-5)
    assert len(kernel_calls) == 1


def test_non_contiguous_input_equals_f_linear(kernel_calls):
    x, w, b = operands()
    x = torch.randn(128, 64).t()  # a transposed view
    torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    assert kernel_calls


def test_gradients_equal_f_linear(kernel_calls):
    x, w, b = operands()
    x3 = x.view(4, 16, 128)
    grad = torch.randn(4, 16, 256)
    leaves = [t.clone().requires_grad_() for t in (x3, w, b)]
    reference = [t.clone().requires_grad_() for t in (x3, w, b)]
    linear(*leaves).backward(grad)
    F.linear(*reference).backward(grad)
    for got, want in zip(leaves, reference):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-4)
    assert len(kernel_calls) == 3  # forward, input gradient, weight gradient


def test_only_the_needed_gradients_are_computed(kernel_calls):
    x, w, b = operands()
    w = w.requires_grad_()
    linear(x, w, b).sum().backward()  # x and b need none
    assert w.grad is not None and len(kernel_calls) == 2


def test_fallbacks_are_f_linear_bit_for_bit(kernel_calls):
    x, w, b = operands()
    cases = {
        "strided weight": (x, w.t().contiguous().t(), b),  # the kernel would read it as contiguous
        "bf16": (x.bfloat16(), w.bfloat16(), b.bfloat16()),
        "below the floor": (x[:2], w, b),
        "vector input": (x[0], w, b),
    }
    for name, args in cases.items():
        assert torch.equal(linear(*args), F.linear(*args)), name
    with torch.autocast("cpu", dtype=torch.bfloat16):  # F.linear obeys autocast: so must linear
        assert linear(x, w, b).dtype == torch.bfloat16
    batched = torch.func.vmap(lambda w_: linear(x, w_, b))(torch.stack([w, 2 * w]))  # no rule under vmap
    assert torch.equal(batched[1], F.linear(x, 2 * w, b))
    assert kernel_calls == []


def test_environment_keeps_torch_kernel(monkeypatch, kernel_calls):
    x, w, b = operands()
    monkeypatch.setenv(cpu_linear.ENV, "torch")
    cpu_linear.choice.cache_clear()
    try:
        assert not takes_onednn(x, w, b)
        assert torch.equal(linear(x, w, b), F.linear(x, w, b)) and kernel_calls == []
        monkeypatch.setenv(cpu_linear.ENV, "mkl")
        cpu_linear.choice.cache_clear()
        with pytest.raises(ConfigError, match="NFEVAL_CPU_LINEAR='mkl'"):
            cpu_linear.kernel()
    finally:
        monkeypatch.setenv(cpu_linear.ENV, "onednn")
        cpu_linear.choice.cache_clear()
    assert cpu_linear.kernel() == "onednn"


@pytest.mark.parametrize(
    ("vendor", "avx512", "expected"),
    [
        ("GenuineIntel", True, ("torch", cpu_linear.PACKED_ROWS)),
        ("GenuineIntel", False, ("torch", cpu_linear.PACKED_ROWS)),
        ("AuthenticAMD", True, ("onednn", 1)),
        ("AuthenticAMD", False, ("torch", cpu_linear.PACKED_ROWS)),  # Zen 3: both kernels run AVX2 code
    ],
)
def test_auto_takes_onednn_where_only_onednn_runs_avx512_code(monkeypatch, vendor, avx512, expected):
    monkeypatch.setattr(cpu_linear, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(cpu_linear, "cpu_has_avx512", lambda: avx512)
    for value in ("auto", ""):  # unset or empty: auto
        monkeypatch.setenv(cpu_linear.ENV, value)
        cpu_linear.choice.cache_clear()
        assert cpu_linear.choice() == expected
    monkeypatch.delenv(cpu_linear.ENV)
    cpu_linear.choice.cache_clear()
    assert cpu_linear.choice() == expected
    monkeypatch.setenv(cpu_linear.ENV, "onednn")  # forced: every product, whoever made the CPU
    cpu_linear.choice.cache_clear()
    assert cpu_linear.choice() == ("onednn", 1) and cpu_linear.describe() == "onednn"


def test_on_intel_packed_weights_serve_from_four_rows(monkeypatch, kernel_calls):
    monkeypatch.setattr(cpu_linear, "cpu_vendor", lambda: "GenuineIntel")
    monkeypatch.setattr(cpu_linear, "cpu_has_avx512", lambda: True)
    monkeypatch.setenv(cpu_linear.ENV, "auto")
    cpu_linear.choice.cache_clear()
    assert cpu_linear.describe() == "torch; packed: onednn from 4 rows"
    torch.manual_seed(0)
    layer = Linear(768, 768)
    with packed_weights(layer):
        for rows in (1, 2, 4, 16):
            x = torch.randn(rows, 768)
            with torch.no_grad():
                out = layer(x)
            torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        layer(torch.randn(64, 768)).sum().backward()  # a training product: torch's kernel
    assert [(shape[0], packed) for shape, packed in kernel_calls] == [(4, True), (16, True)]


@pytest.mark.parametrize(
    ("vendor", "threads", "layout"),
    [
        ("AuthenticAMD", 1, "transposed"),
        ("AuthenticAMD", 2, "one_row"),
        ("GenuineIntel", 1, None),
        ("GenuineIntel", 2, None),
    ],
)
def test_where_mkl_keeps_few_rows_one_row_layout_follows_vendor_and_threads(
    monkeypatch, kernel_calls, vendor, threads, layout
):
    """On AMD one row reads a transposed copy through MKL at one thread and oneDNN's GEMV layout at
    more (MKL's one-row product does not use a second thread there); on Intel the weight itself."""
    monkeypatch.setattr(cpu_linear, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(cpu_linear, "cpu_has_avx512", lambda: False)
    monkeypatch.setenv(cpu_linear.ENV, "auto")
    cpu_linear.choice.cache_clear()
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    assert cpu_linear.one_row_layout() == layout
    many_rows = "torch; packed: onednn from 4 rows"
    one_row = {"transposed": "; one row: torch on transposed weights", "one_row": " and one row", None: ""}
    assert cpu_linear.describe(decoding_rows=1) == many_rows + one_row[layout]
    assert cpu_linear.describe() == cpu_linear.describe(decoding_rows=2) == many_rows
    torch.manual_seed(0)
    layer, x = Linear(768, 768), torch.randn(1, 768)
    with torch.no_grad():
        # oneDNN's own one-row sums (the GEMV layout), MKL's over the (in, out) copy, or F.linear's
        want = {
            "one_row": lambda: cpu_linear._product(x, layer.weight, layer.bias),
            "transposed": lambda: torch.addmm(layer.bias, x, layer.weight.t().contiguous()),
            None: lambda: F.linear(x, layer.weight, layer.bias),
        }[layout]()
        kernel_calls.clear()
        with packed_weights(layer, rows=1):
            assert (layer.packed and layer.packed[2]) == layout  # no copy that no product would read
            got = layer(x)
            for rows in (2, 4):
                layer(torch.randn(rows, 768))
    assert torch.equal(got, want)
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    served = [(shape[0], packed) for shape, packed in kernel_calls]
    assert served == ([(1, True), (4, True)] if layout == "one_row" else [])


@torch.no_grad()
def test_a_transposed_copy_serves_only_one_fp32_row_without_gradient(monkeypatch, transposed_calls):
    """Rows, gradients, other dtypes and a changed weight fall back to ``linear`` on the weight itself."""
    monkeypatch.setattr(cpu_linear, "one_row_layout", lambda: "transposed")
    served = transposed_calls
    torch.manual_seed(0)
    layer, no_bias = Linear(256, 512), Linear(256, 512, bias=False)
    with packed_weights(layer, rows=1), packed_weights(no_bias, rows=1):
        assert layer.packed[0].shape == (256, 512) and layer.packed[0].is_contiguous()
        for x in (torch.randn(1, 256), torch.randn(1, 1, 256)):  # a decoding step's (B, T, d) too
            for m in (layer, no_bias):
                torch.testing.assert_close(m(x), F.linear(x, m.weight, m.bias), rtol=1e-5, atol=1e-5)
                assert m(x).shape == (*x.shape[:-1], 512)
        assert served == [(1, 256)] * 4 + [(1, 1, 256)] * 4
        served.clear()
        layer(torch.randn(2, 256))
        layer(torch.randn(1, 0, 256))
        with torch.enable_grad():
            x = torch.randn(1, 256, requires_grad=True)
            layer(x).sum().backward()
            assert x.grad is not None
        assert served == []
        no_bias.weight.mul_(2)  # an in-place update: the copy is stale
        x = torch.randn(1, 256)
        torch.testing.assert_close(no_bias(x), F.linear(x, no_bias.weight), rtol=1e-5, atol=1e-5)
        assert served == []


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads Linux's /proc/cpuinfo")
def test_cpu_vendor_reads_this_machine():
    vendor = cpu_linear.cpu_vendor()
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        text = f.read()
    assert vendor and f"vendor_id\t: {vendor}\n" in text
    flags = next(line for line in text.splitlines() if line.startswith("flags")).split(":", 1)[1].split()
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() in ("", "default"):  # not capped below the CPU's
        assert cpu_linear.cpu_has_avx512() == {"avx512vl", "avx512bw", "avx512dq"}.issubset(flags)


def test_aten_cpu_capability_avx2_chooses_as_a_cpu_without_avx512():
    """Capping torch's kernels at AVX2 (how ``generate_command_vs_hf.py --emulate-avx2`` stands in for a
    Zen 3) makes ``auto`` choose as on a CPU without AVX-512, whatever the machine."""
    code = "from nfeval.engine.fast import cpu_linear; print(cpu_linear.cpu_has_avx512())"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_flop_counter_counts_the_kernel_as_a_matmul(kernel_calls):
    x, w, b = operands()
    layer = cpu_linear.convert(nn.Linear(128, 256))  # registers the kernel's FLOP formula
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    with FlopCounterMode(display=False) as counter:
        layer(x).sum().backward()
    assert counter.get_total_flops() == 2 * 2 * 64 * 128 * 256  # forward and the weight gradient
    assert len(kernel_calls) == 2


def model(d=256, layers=2, seed=0):
    """Returns a small causal Transformer with the kernel (``cpu_linear.convert``), in eval mode."""
    cfg = ModelConfig(vocab_size=512, n_layer=layers, d_model=d, n_head=4, d_ffn=4 * d, max_seq_len=96)
    torch.manual_seed(seed)
    return cpu_linear.convert(Transformer(cfg).eval())


@pytest.mark.parametrize("objective", ["clm", "mlm"])
@torch.no_grad()
def test_convert_puts_the_kernel_into_a_plain_model(kernel_calls, objective):
    cfg = ModelConfig(vocab_size=512, n_layer=2, d_model=256, n_head=4, d_ffn=1024, objective=objective)
    torch.manual_seed(0)
    plain = SequenceClassifier(Transformer(cfg), 3).eval()  # an encoder's last layer slices qkv's weight
    ids = torch.randint(0, 512, (16, 24))
    want = plain(ids), plain.transformer(ids)  # the tied output projection
    keys = list(plain.state_dict())
    assert kernel_calls == [] and not any(isinstance(m, Linear) for m in plain.modules())
    assert cpu_linear.convert(plain) is plain and list(plain.state_dict()) == keys
    assert not [m for m in plain.modules() if type(m) is nn.Linear]
    assert cpu_linear.convert(plain) is plain  # converting again changes nothing
    got = [plain(ids)]
    if objective == "mlm":  # the encoder's last layer: its first position's share of qkv's weight
        assert ((16, 1, 256), False) in kernel_calls
    kernel_calls.clear()
    got.append(plain.transformer(ids))
    modules = [m for m in plain.transformer.modules() if isinstance(m, Linear)]
    assert len(kernel_calls) == len(modules) + 1  # every linear module and the tied output projection
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_packed_weights_give_the_plain_kernels_values(kernel_calls):
    m = model()
    ids = torch.randint(0, 512, (4, 8))
    plain = m(ids)
    with packed_weights(m):
        assert all(lin.packed is not None for lin in m.modules() if isinstance(lin, Linear))
        inside = m(ids)
    assert all(lin.packed is None for lin in m.modules() if isinstance(lin, Linear))  # copies dropped
    assert any(is_packed for _, is_packed in kernel_calls)
    assert torch.equal(inside, plain)  # from two rows on, the blocked layout changes no sum


@torch.no_grad()
def test_weights_packed_for_one_row_give_the_plain_kernels_one_row_values(kernel_calls):
    x, weight, bias = operands(rows=1, n_in=1024, n_out=1024)
    layer = Linear(1024, 1024)
    layer.weight.copy_(weight), layer.bias.copy_(bias)
    plain = cpu_linear._product(x, weight, bias)
    with packed_weights(layer, rows=1):
        packed = layer(x)
    assert kernel_calls[-1] == ((1, 1024), True)
    assert torch.equal(packed, plain)  # the layout for one row is the GEMV's own: no sum changes


def test_decoding_one_row_at_a_time_packs_for_one_row(monkeypatch):
    hints = []
    pack = cpu_linear._pack
    monkeypatch.setattr(cpu_linear, "_pack", lambda weight, rows: hints.append(rows) or pack(weight, rows))
    m = model(seed=3)
    for batch_size, prompts, want in ((1, 3, 1), (16, 1, 1), (16, 3, None), (2, 5, None)):
        hints.clear()
        generate(m, [[5, 6, 7]] * prompts, max_new_tokens=40, batch_size=batch_size, speed=Fast())
        assert hints and set(hints) == {want}


@torch.no_grad()
def test_packed_copy_is_ignored_once_its_weight_changes(kernel_calls):
    m = model()
    ids = torch.randint(0, 512, (4, 8))
    with packed_weights(m):
        for p in m.parameters():
            p.mul_(1.5)
        inside = m(ids)
    assert torch.equal(inside, m(ids))
    assert not any(is_packed for _, is_packed in kernel_calls)


def test_training_inside_packed_weights_uses_the_weights(kernel_calls):
    m = model().train()
    ids = torch.randint(0, 512, (4, 8))
    with packed_weights(m):
        m.loss(ids, ids).backward()
    assert all(p.grad is not None for p in m.parameters())
    assert not any(is_packed for _, is_packed in kernel_calls)


@pytest.mark.parametrize(
    "setting", ["few steps", "too large", "torch kernel"], ids=lambda s: s.replace(" ", "-")
)
def test_packing_is_skipped(monkeypatch, setting):
    m = model(d=128, layers=1)
    steps = cpu_linear.MIN_PACK_STEPS
    if setting == "few steps":
        steps -= 1
    elif setting == "too large":
        monkeypatch.setattr(cpu_linear, "PACK_MAX_BYTES", 0)
    else:
        monkeypatch.setenv(cpu_linear.ENV, "torch")
        cpu_linear.choice.cache_clear()
    with packed_weights(m, steps):
        assert all(lin.packed is None for lin in m.modules() if isinstance(lin, Linear))


@pytest.mark.parametrize("layout", [None, "transposed"], ids=["batch16", "batch1-transposed"])
def test_generation_with_packed_weights_equals_recomputation(
    monkeypatch, kernel_calls, transposed_calls, layout
):
    batch_size = 16 if layout is None else 1
    if layout is not None:
        monkeypatch.setattr(cpu_linear, "one_row_layout", lambda: layout)
    m = model(seed=3)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 512, (n,), generator=g).tolist() for n in range(3, 19)]
    new = generate(
        m, prompts[: 16 if layout is None else 4], max_new_tokens=40, batch_size=batch_size, speed=Fast()
    )
    assert any(is_packed for _, is_packed in kernel_calls) == (layout is None)
    assert bool(transposed_calls) == (layout == "transposed")
    for prompt, tokens in zip(prompts[:4], new[:4]):
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(len(tokens)):
                ids.append(int(m(torch.tensor([ids]))[0, -1].argmax()))
        assert ids[len(prompt) :] == tokens


def test_model_training_step_equals_torch_kernel(monkeypatch):
    m = model().train()
    ids = torch.randint(0, 512, (4, 32))
    torch.manual_seed(1)
    m.loss(ids, ids).backward()
    ours = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    monkeypatch.setenv(cpu_linear.ENV, "torch")
    cpu_linear.choice.cache_clear()
    torch.manual_seed(1)
    m.loss(ids, ids).backward()
    for n, p in m.named_parameters():
        torch.testing.assert_close(ours[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)
