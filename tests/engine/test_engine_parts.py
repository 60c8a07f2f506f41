"""The training engine's parts: datasheet peaks by exact GPU name, model FLOPs against torch's own
counter, and the lm-eval adapter's device handling."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from nfeval.engine.model.config import preset
from nfeval.engine.model.flops import training_flops_breakdown, training_flops_per_token
from nfeval.engine.model.model import Transformer
from nfeval.engine.training import budget
from nfeval.engine.training.budget import gpu_peak
from nfeval.engine.training.objective import Objective
from nfeval.engine.training.parallel import resolve_device
from nfeval.model_adapters.config import ScoringConfig

# Real torch.cuda.get_device_name() strings and their dense datasheet peaks (bf16, fp32).
DEVICE_NAMES = [
    ("NVIDIA H100 80GB HBM3", 989e12, 67e12),
    ("NVIDIA H100 PCIe", 756e12, 51e12),
    ("NVIDIA H100 NVL", 835e12, 60e12),
    ("NVIDIA H200", 989e12, 67e12),
    ("NVIDIA H200 NVL", 835e12, 60e12),
    ("NVIDIA A100-SXM4-80GB", 312e12, 19.5e12),
    ("NVIDIA A100-SXM4-40GB", 312e12, 19.5e12),
    ("NVIDIA A100 80GB PCIe", 312e12, 19.5e12),
    ("NVIDIA A100-PCIE-40GB", 312e12, 19.5e12),
    ("NVIDIA L4", 121e12, 30.3e12),
    ("NVIDIA L40", 181e12, 90.5e12),
    ("NVIDIA L40S", 366e12, 91.6e12),
    ("NVIDIA A10", 125e12, 31.2e12),
]


@pytest.mark.parametrize("name, bf16, fp32", DEVICE_NAMES)
def test_peak_table_resolves_exact_device_names(name, bf16, fp32):
    assert gpu_peak(name, "bf16")[0] == bf16
    assert gpu_peak(name, "fp32")[0] == fp32


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "NVIDIA A10G", "NVIDIA H100 80GB HBM3e", "L4 x"])
def test_unknown_gpus_have_no_datasheet_peak(name):
    assert gpu_peak(name, "bf16") is None  # measured instead: never another card's number


def counted_flops_per_token(objective: str, seq_len: int = 64) -> tuple[float, float]:
    """Returns (FLOPs per token torch's FlopCounterMode counts for forward + backward, masked fraction)."""
    torch.manual_seed(0)
    cfg = preset("prenorm-tiny", objective=objective, vocab_size=512, max_seq_len=seq_len)
    obj = Objective(Transformer(cfg))
    x = torch.randint(4, 512, (2, seq_len))
    y = torch.randint(4, 512, (2, seq_len))
    if objective == "mlm":
        y[torch.rand(y.shape) > 0.2] = -100
    with FlopCounterMode(display=False) as counter:
        obj(x, y).backward()
    n_tokens = x.numel()
    return counter.get_total_flops() / n_tokens, float((y != -100).float().mean())


def test_measured_peak_keeps_the_best_figure(tmp_path, monkeypatch):
    """A peak measured under load must not stick: the cache keeps the highest measurement."""
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path))
    measured = iter([10e9, 20e9, 5e9])
    durations = []

    def fake(device, dtype, seconds):
        durations.append(seconds)
        return next(measured)

    monkeypatch.setattr(budget, "measure_matmul_flops", fake)
    cfg = type("Cfg", (), {"peak_flops": None, "dtype": "fp32"})()
    got = [budget.peak_flops(cfg, torch.device("cpu"))[0] for _ in range(3)]
    assert got == [10e9, 20e9, 20e9] and durations == [0.5, 0.1, 0.1]


def test_matmul_peak_is_positive_and_finite():
    flops = budget.measure_matmul_flops(torch.device("cpu"), torch.float32, n=64, seconds=0.01)
    assert 0 < flops < float("inf")


@pytest.mark.parametrize("objective", ["clm", "mlm"])
def test_training_flops_match_torch_flop_counter(objective):
    counted, masked = counted_flops_per_token(objective)
    cfg = preset("prenorm-tiny", objective=objective, vocab_size=512, max_seq_len=64)
    terms = training_flops_breakdown(cfg, 64, masked_fraction=masked)
    # On CPU the counter does not see scaled_dot_product_attention, and it counts matmuls only:
    # compare the weight matmuls (6·N).
    assert terms["weight_matmuls"] == pytest.approx(counted, rel=1e-6)
    assert terms["attention_matmuls"] == 12.0 * cfg.n_layer * cfg.d_model * 64
    assert training_flops_per_token(cfg, 64, masked) == sum(terms.values()) > counted


def test_mlm_head_counted_on_masked_positions_only():
    cfg = preset("normformer-125M", objective="mlm")
    clm = preset("normformer-125M", objective="clm")
    d, v = cfg.d_model, cfg.vocab_size
    mlm_terms, clm_terms = training_flops_breakdown(cfg, 2048), training_flops_breakdown(clm, 2048)
    assert clm_terms["weight_matmuls"] - mlm_terms["weight_matmuls"] == pytest.approx(
        6 * (v * d - 0.15 * (v * d + d * d))
    )
    assert clm_terms["loss_softmax"] == pytest.approx(mlm_terms["loss_softmax"] / 0.15)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only fallback")
def test_cuda_request_on_a_cpu_only_machine_falls_back_with_a_warning(tiny_clm_ckpt):
    from nfeval.model_adapters.lm import NFEvalLM

    with pytest.warns(UserWarning, match="CUDA is not available"):
        lm = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cuda"))
    assert lm._device == torch.device("cpu")
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")  # training never silently falls back


def test_bare_cuda_gets_this_process_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("cuda") == torch.device("cuda", 3)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert resolve_device("cuda:1") == torch.device("cuda", 3)


def test_adapter_moves_a_loaded_checkpoint_to_its_dtype(tiny_clm_ckpt):
    from nfeval.engine.checkpoints import checkpoint
    from nfeval.model_adapters.lm import NFEvalLM

    ckpt = checkpoint.load(tiny_clm_ckpt)
    NFEvalLM(ckpt, ScoringConfig(device="cpu", dtype="bfloat16"))
    assert {p.dtype for p in ckpt.model.parameters()} == {torch.bfloat16}
