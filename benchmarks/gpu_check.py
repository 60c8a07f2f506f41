"""GPU check: the CUDA paths of a first GPU run and the speed comparisons of issues 26 and 27, each
checked and timed.

    python benchmarks/gpu_check.py [--out benchmarks/gpu_check] [--batch 8] [--seq 2048] [--steps 10]
    python benchmarks/gpu_check.py --checks generate_vs_hf,zeroshot_vs_hflm,glue_vs_trainer
    python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-check   # the same code on CPU, tiny shapes

Checks 1-4 were sized for ≤ 8 minutes on one H100/H200 and 5-7 for a few more, none measured yet: when
one device call (10 minutes at most) may not hold them all, run them as two ``--checks`` calls.

Checks (each reports its time and peak GPU memory; one failing does not stop the others):

1. ``train_step_eager`` / ``train_step_compiled``: a normformer-125M bf16 training step (forward,
   summed cross-entropy, backward, fused AdamW) on a random batch, eager and ``torch.compile``;
   tokens/s and MFU against the datasheet's dense bf16 peak (``nfeval.engine.training.budget.GPU_PEAKS``).
2. ``flash_attention``: the model's forward + backward with only the FLASH_ATTENTION SDPA backend
   allowed (fails if the model's attention cannot use it), and flash vs math attention outputs.
3. ``ddp_checkpoint_resume``: ``nfeval``'s Trainer under a 1-process DDP strategy (NCCL on GPU):
   6 steps with a checkpoint at step 3, then a resume from it; losses and weights compared.
4. ``zeroshot_cuda_vs_cpu``: the lm-eval adapter scores the same multiple-choice items with the
   trained checkpoint on the GPU and on the CPU, both fp32; log-likelihoods must agree to 1e-3,
   differing choices, greedy flags and generations are counted.
5. ``generate_vs_hf``: greedy generation of a random 125M-shaped GPT-2 on the device, nfeval against
   HF ``generate`` with its dynamic and its static KV cache (which ``generate`` compiles on a GPU), at
   batch 1 and 16 (``generate_vs_hf.py``): tokens/s, ratios, identical rows, the bandwidth limit.
6. ``zeroshot_vs_hflm``: 2,000 loglikelihood requests of a random 125M-shaped HF GPT-2 directory, fp32,
   batch 32, lm-eval's ``HFLM`` against nfeval's adapter (the engine running the GPT-2 weights):
   seconds, ratio, largest log-likelihood difference (must be < 1e-3).
7. ``glue_vs_trainer``: the seven-learning-rate SST-2 sweep (``glue_sweep.py`` defaults, bf16): nfeval
   one point at a time against HF ``Trainer`` in ``group_by_length`` and in random order; seconds,
   ratios, best dev accuracy per side. Real SST-2 when ../shared/data is beside the checkout, else a
   synthetic one (``glue_sweep.synthetic_sst2``).

Writes ``gpu_check.json`` (figures) and ``gpu_check.md`` (a section for benchmarks/RESULTS.md) into
``--out``; exits 1 if any check failed. ``--dry-run`` runs every path on the CPU with tiny shapes
(compile with the ``aot_eager`` backend) so CI knows the script starts.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import random
import shutil
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from nfeval.base.artifacts import atomic_write_json, atomic_write_text, provenance
from nfeval.engine.checkpoints import rundir
from nfeval.engine.model.config import preset
from nfeval.engine.model.flops import training_flops_per_token
from nfeval.engine.model.model import Transformer
from nfeval.engine.training.budget import gpu_peak, measure_matmul_flops, synchronize
from nfeval.engine.training.objective import Objective


@dataclass
class Setup:
    device: torch.device
    dry_run: bool
    model: str  # preset of the throughput and flash checks
    batch: int
    seq: int
    steps: int
    work: Path  # scratch folder (corpus, runs, caches)


def memory_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def run_check(name: str, fn: Callable[[], dict], s: Setup, results: dict) -> None:
    """Runs one check, recording its status, seconds, peak memory and figures in ``results``."""
    memory_reset(s.device)
    t0 = time.perf_counter()
    try:
        figures, status = fn(), "ok"
    except Exception as e:  # a failing check is a finding, not the end of the script
        figures, status = (
            {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]},
            "failed",
        )
    results[name] = {
        "status": status,
        "seconds": time.perf_counter() - t0,
        "peak_memory_gib": peak_memory_gib(s.device),
        **figures,
    }
    print(
        f"[{status}] {name}: {results[name]['seconds']:.1f} s {figures.get('error', '')}",
        file=sys.stderr,
        flush=True,
    )


def peak_bf16(device: torch.device) -> tuple[float, str]:
    """Returns (dense bf16 peak FLOP/s, where it comes from) of the device."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        found = gpu_peak(name, "bf16")
        if found:
            return found[0], f"datasheet ({found[1]})"
    return measure_matmul_flops(device, torch.bfloat16, seconds=0.2), "measured 1024² bf16 matmul"


def train_step(s: Setup, compiled: bool) -> dict:
    """Times a bf16 training step of the preset model; returns tokens/s, MFU and the last loss."""
    torch.manual_seed(0)
    cfg = preset(s.model, max_seq_len=max(s.seq, preset(s.model).max_seq_len))
    model = Transformer(cfg).to(s.device)
    obj = Objective(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=s.device.type == "cuda")
    step_fn = torch.compile(obj, backend="aot_eager" if s.dry_run else "inductor") if compiled else obj
    x = torch.randint(0, cfg.vocab_size, (s.batch, s.seq), device=s.device)
    y = torch.randint(0, cfg.vocab_size, (s.batch, s.seq), device=s.device)

    def step() -> torch.Tensor:
        with torch.autocast(s.device.type, dtype=torch.bfloat16):
            loss = step_fn(x, y) / y.numel()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.perf_counter()
    step()
    synchronize(s.device)
    first_s = time.perf_counter() - t0
    step()
    synchronize(s.device)
    t0 = time.perf_counter()
    for _ in range(s.steps):
        loss = step()
    synchronize(s.device)
    step_s = (time.perf_counter() - t0) / s.steps
    if not torch.isfinite(loss):
        raise RuntimeError(f"non-finite loss {float(loss)}")
    tps = s.batch * s.seq / step_s
    peak, source = peak_bf16(s.device)
    flops = training_flops_per_token(cfg, s.seq)
    return {
        "preset": s.model,
        "parameters": model.num_params(),
        "batch": s.batch,
        "seq_len": s.seq,
        "first_step_s": first_s,
        "step_ms": step_s * 1e3,
        "tokens_per_s": tps,
        "mfu": tps * flops / peak,
        "peak_flops": peak,
        "peak_source": source,
        "loss": float(loss),
    }


def flash_attention(s: Setup) -> dict:
    """Runs the model with only flash attention allowed; compares flash and math attention outputs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    cfg = preset(s.model, max_seq_len=max(s.seq, preset(s.model).max_seq_len))
    obj = Objective(Transformer(cfg).to(s.device))
    x = torch.randint(0, cfg.vocab_size, (2, s.seq), device=s.device)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), torch.autocast(s.device.type, dtype=torch.bfloat16):
        obj(x, x).backward()  # raises "No available kernel" if flash cannot run this attention
    synchronize(s.device)
    q, k, v = (
        torch.randn(2, cfg.n_head, s.seq, cfg.head_dim, device=s.device, dtype=torch.bfloat16) for _ in "qkv"
    )
    outputs = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        with sdpa_kernel([backend]):
            outputs[backend] = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True
            ).float()
    diff = float((outputs[SDPBackend.FLASH_ATTENTION] - outputs[SDPBackend.MATH]).abs().max())
    if diff > 0.05:
        raise RuntimeError(f"flash and math attention differ by {diff}")
    return {"model_forward_backward_with_flash_only": True, "flash_vs_math_max_abs_diff": diff}


def write_corpus(path: Path, n_docs: int = 300) -> str:
    """Writes a small synthetic text corpus (documents separated by blank lines); returns its path."""
    rng = random.Random(0)
    words = [
        "the",
        "model",
        "learns",
        "a",
        "norm",
        "layer",
        "scales",
        "each",
        "head",
        "and",
        "residual",
        "gain",
        "while",
        "training",
        "tokens",
        "flow",
        "through",
        "blocks",
        "of",
        "attention",
    ]
    docs = [
        "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + "." for _ in range(5))
        for _ in range(n_docs)
    ]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ddp_checkpoint_resume(s: Setup) -> dict:
    """Trains 6 steps under a 1-process DDP strategy with a checkpoint at 3, resumes from it, compares."""
    from nfeval.engine.training.parallel import DDP
    from nfeval.engine.training.train_config import TrainConfig
    from nfeval.engine.training.trainer import Trainer

    backend = "nccl" if s.device.type == "cuda" else "gloo"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group(backend, rank=0, world_size=1, timeout=datetime.timedelta(minutes=5))
    try:
        par = DDP(s.device, 0, 1, bf16=s.device.type == "cuda")
        cfg = TrainConfig(
            preset="normformer-tiny",
            train_data=write_corpus(s.work / "corpus.txt"),
            vocab_size=512,
            batch_size=4,
            seq_len=64,
            max_steps=6,
            log_interval=1,
            eval_interval=3,
            eval_samples=8,
            ckpt_interval=3,
            peak_flops=1e12,
            progress=False,
            lr=3e-3,
            device=str(s.device),
            dtype="bf16" if s.device.type == "cuda" else "fp32",
        )
        full_dir, resumed_dir = s.work / "ddp-full", s.work / "ddp-resumed"
        full = Trainer(cfg, str(full_dir), parallel=par).run()
        shutil.copytree(full_dir, resumed_dir)
        for name in (rundir.COMPLETE, rundir.WEIGHTS):  # as if killed during the final save
            (resumed_dir / name).unlink()
        resumed = Trainer.resume(cfg, str(resumed_dir), parallel=par).run()
    finally:
        dist.destroy_process_group()
    a, b = (rundir.read_metrics(str(d), "train") for d in (full_dir, resumed_dir))
    diff = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    if [r["step"] for r in b] != list(range(1, 7)) or resumed["step"] != 6 or diff > 1e-2:
        raise RuntimeError(f"resume differs: steps {[r['step'] for r in b]}, max loss difference {diff}")
    return {
        "backend": backend,
        "steps": 6,
        "losses_bitwise": diff == 0.0,
        "max_loss_diff": diff,
        "fingerprints_equal": full["fingerprint"] == resumed["fingerprint"],
    }


def zeroshot_cuda_vs_cpu(s: Setup) -> dict:
    """Scores multiple-choice items with the DDP check's checkpoint on the device and on the CPU (fp32)."""
    from nfeval.model_adapters.config import ScoringConfig
    from nfeval.model_adapters.lm import NFEvalLM

    run = s.work / "ddp-full"
    if not (run / rundir.COMPLETE).is_file():
        raise RuntimeError(f"{run}: the ddp_checkpoint_resume check did not leave a finished run")
    lms = {
        where: NFEvalLM(str(run), ScoringConfig(device=where, dtype="float32", progress=False, batch_size=8))
        for where in ("cpu", str(s.device))
    }
    sentences = [line for line in (s.work / "corpus.txt").read_text().splitlines() if line.strip()][:160]
    items = [
        (sentences[i], [sentences[(i + j * 7 + 1) % len(sentences)] for j in range(4)])
        for i in range(0, 160, 4)
    ]
    scores, generations = {}, {}
    for where, lm in lms.items():
        requests = [
            (None, lm.tok_encode(ctx), lm.tok_encode(" " + choice, add_special_tokens=False))
            for ctx, choices in items
            for choice in choices
        ]
        scores[where] = lm._loglikelihood_tokens(requests)
        prompts = [SimpleNamespace(args=(ctx, {"until": ["\n"], "max_gen_toks": 12})) for ctx, _ in items[:4]]
        generations[where] = lm.generate_until(prompts, disable_tqdm=True)
    cpu, dev = scores["cpu"], scores[str(s.device)]
    diff = max(abs(float(a[0]) - float(b[0])) for a, b in zip(cpu, dev))
    if diff > 1e-3:
        raise RuntimeError(f"device and CPU log-likelihoods differ by up to {diff}")
    # Choices, greedy flags and generations can flip on near-ties of a barely trained model: reported.
    choice = {
        w: [max(range(4), key=lambda j: float(sc[4 * i + j][0])) for i in range(len(items))]
        for w, sc in scores.items()
    }
    return {
        "items": len(items),
        "requests": len(cpu),
        "max_abs_loglik_diff": diff,
        "choices_differing": sum(a != b for a, b in zip(choice["cpu"], choice[str(s.device)])),
        "greedy_flags_differing": sum(a[1] != b[1] for a, b in zip(cpu, dev)),
        "generations_differing": sum(a != b for a, b in zip(generations["cpu"], generations[str(s.device)])),
    }


def generate_vs_hf(s: Setup) -> dict:
    """Times greedy generation of nfeval against HF ``generate`` (its dynamic and its static, compiled
    KV cache) on the device, a 125M-shaped model, batch 1 and 16 (``benchmarks/generate_vs_hf.py``);
    returns per batch tokens/s, ratios, identical rows and the device's bandwidth limit."""
    import generate_vs_hf as gen

    layers, d_model, new_tokens, rounds = (2, 64, 8, 1) if s.dry_run else (12, 768, 64, 3)
    ours, hf = gen.build_models(layers, d_model)
    ours, hf = ours.to(s.device), hf.to(s.device)
    bandwidth = gen.measure_bandwidth(megabytes=16 if s.dry_run else 1024, device=str(s.device))
    shared_tokenizer = (gen.SHARED / "tokenizer" / "gpt2").is_dir()
    make_prompts = gen.prompts if shared_tokenizer else gen.random_prompts
    out = {"shape": f"L={layers} d={d_model}", "prompts_from": "pydoc" if shared_tokenizer else "random ids"}
    out["bandwidth_gb_s"] = bandwidth / 1e9
    for batch in (1, 16):
        row = gen.compare(ours, None, hf, batch, new_tokens, rounds, bandwidth, make_prompts, hf_static=True)
        out |= {f"b{batch}_{k}": v for k, v in row.items() if k != "batch"}
    return out


def hf_gpt2_dir(s: Setup, path: Path) -> Path:
    """Saves a random GPT2LMHeadModel (125M-shaped; tiny in the dry run) with a BPE tokenizer trained on
    the check's corpus to ``path``; returns it."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from nfeval.engine.text.tokenization import train_bpe

    corpus = s.work / "corpus.txt"
    if not corpus.is_file():
        write_corpus(corpus)
    tok = train_bpe(corpus.read_text().splitlines(), vocab_size=512)
    layers, d_model = (2, 64) if s.dry_run else (12, 768)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=1024, n_embd=d_model, n_layer=layers,
                     n_head=d_model // 64, bos_token_id=0, eos_token_id=2)  # fmt: skip
    GPT2LMHeadModel(cfg).save_pretrained(str(path))
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    hf_tok.save_pretrained(str(path))
    return path


def zeroshot_vs_hflm(s: Setup) -> dict:
    """Times lm-eval's ``HFLM`` against nfeval's adapter (the engine running the GPT-2 weights) on the
    same loglikelihood requests of a HF GPT-2 directory on the device, fp32, equal batch size; returns
    seconds (median of interleaved rounds), the ratio and the largest log-likelihood difference."""
    from generate_vs_hf import interleaved
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from nfeval.model_adapters.config import ScoringConfig
    from nfeval.model_adapters.lm import NFEvalLM

    path = hf_gpt2_dir(s, s.work / "hf-gpt2")
    n, rounds = (40, 1) if s.dry_run else (2000, 3)
    lines = [line for line in (s.work / "corpus.txt").read_text().splitlines() if line.strip()]
    pairs = [(" ".join(lines[i : i + 3]), " " + lines[(i * 7 + 3) % len(lines)]) for i in range(n)]
    requests = [
        Instance("loglikelihood", doc={}, arguments=p, idx=i, metadata=("t", i, 1))
        for i, p in enumerate(pairs)
    ]
    where = str(s.device)
    lms = {
        "hflm": HFLM(pretrained=str(path), device=where, batch_size=32, dtype="float32"),
        "nfeval": NFEvalLM(
            str(path), ScoringConfig(device=where, dtype="float32", batch_size=32, progress=False)
        ),
    }
    forward_by = lms["nfeval"].model_backend.forward_by
    # each call returns Python floats: the device's work is done when it returns
    timed = interleaved(
        {name: functools.partial(lm.loglikelihood, requests, disable_tqdm=True) for name, lm in lms.items()},
        rounds,
    )
    median = {name: seconds for name, (seconds, _) in timed.items()}
    results = {name: result for name, (_, result) in timed.items()}
    diff = max(abs(a[0] - b[0]) for a, b in zip(results["hflm"], results["nfeval"]))
    if diff > 1e-3:
        raise RuntimeError(f"HFLM and nfeval log-likelihoods differ by up to {diff}")
    return {
        "requests": n,
        "forward_by": forward_by,
        "hflm_s": median["hflm"],
        "nfeval_s": median["nfeval"],
        "speedup": median["hflm"] / median["nfeval"],
        "max_abs_loglik_diff": diff,
        "greedy_flags_differing": sum(a[1] != b[1] for a, b in zip(results["hflm"], results["nfeval"])),
    }


def glue_vs_trainer(s: Setup) -> dict:
    """Times the seven-learning-rate SST-2 sweep on the device (``benchmarks/glue_sweep.py``): nfeval one
    point at a time and HF ``Trainer`` in ``group_by_length`` and random order, bf16; SST-2 from
    ../shared/data when present, else synthetic. Returns each side's seconds, the Trainer / nfeval ratios
    and each side's best dev accuracy."""
    import glue_sweep

    real = glue_sweep.DEFAULT_GLUE / "SST-2"
    glue_dir = str(real.parent) if real.is_dir() else glue_sweep.synthetic_sst2(s.work / "glue-synthetic")
    argv = ["--glue-dir", glue_dir, "--tasks", "sst2", "--device", str(s.device),
            "--trainer-order", "group_by_length,random"]  # fmt: skip
    if s.dry_run:
        argv += ["--train", "64", "--layers", "1", "--d-model", "32", "--heads", "2", "--epochs", "1",
                 "--lrs", "1e-3,2e-3", "--vocab", "300"]  # fmt: skip
    args = glue_sweep.parse_args(argv)
    times, scores = glue_sweep.interleaved(glue_sweep.sides_of("sst2", args, str(s.work / "glue-bench")), 1)
    seconds = {side: t[0] for side, t in times.items()}
    out = {"data": "SST-2" if real.is_dir() else "synthetic SST-2", "lrs": len(args.lrs)}
    for side, t in seconds.items():
        out[f"{side} s"] = t
        out[f"{side} best dev"] = max(best for best, _ in scores[side].values())
    out |= {f"{hf} / {ours}": ratio for (hf, ours), ratio in glue_sweep.trainer_ratios(seconds).items()}
    return out


def markdown(record: dict, command: str) -> str:
    """Returns the RESULTS.md section: the command, the machine and one row per check."""
    lines = [
        "## GPU check",
        "",
        f"Command: `{command}` — device: {record['device']}, torch {torch.__version__}, "
        f"{record['date']}; total {record['total_s']:.0f} s.",
        "",
        "| check | status | seconds | peak GPU memory (GiB) | figures |",
        "|---|---|---:|---:|---|",
    ]
    skip = {"status", "seconds", "peak_memory_gib", "traceback"}
    for name, r in record["checks"].items():
        figures = ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items() if k not in skip
        )
        mem = f"{r['peak_memory_gib']:.2f}" if r["peak_memory_gib"] is not None else "–"
        lines.append(f"| {name} | {r['status']} | {r['seconds']:.1f} | {mem} | {figures} |")
    return "\n".join(lines) + "\n"


# name -> check(setup); run in this order (zeroshot_cuda_vs_cpu scores ddp_checkpoint_resume's run)
CHECKS: dict[str, Callable[[Setup], dict]] = {
    "train_step_eager": functools.partial(train_step, compiled=False),
    "train_step_compiled": functools.partial(train_step, compiled=True),
    "flash_attention": flash_attention,
    "ddp_checkpoint_resume": ddp_checkpoint_resume,
    "zeroshot_cuda_vs_cpu": zeroshot_cuda_vs_cpu,
    "generate_vs_hf": generate_vs_hf,
    "zeroshot_vs_hflm": zeroshot_vs_hflm,
    "glue_vs_trainer": glue_vs_trainer,
}


def check_names(text: str) -> list[str]:
    """Returns the checks named in the comma-separated ``text``, in ``CHECKS``' order; raises on an
    unknown name or on zeroshot_cuda_vs_cpu without the run it scores."""
    names = text.split(",")
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown check {unknown[0]!r}: expected one of {', '.join(CHECKS)}")
    if "zeroshot_cuda_vs_cpu" in names and "ddp_checkpoint_resume" not in names:
        raise argparse.ArgumentTypeError("zeroshot_cuda_vs_cpu scores ddp_checkpoint_resume's run: add it")
    return [n for n in CHECKS if n in names]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "gpu_check"))
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes: checks that every path starts")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument(
        "--checks",
        type=check_names,
        default=list(CHECKS),
        help=f"comma-separated checks to run (default: all): {', '.join(CHECKS)}",
    )
    args = p.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; run with --dry-run to check the paths on the CPU", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="nfeval-gpu-check-"))
    os.environ["NFEVAL_CACHE"] = str(work / "cache")  # tokenizers and shards of the check stay in scratch
    s = Setup(
        device=torch.device("cpu") if args.dry_run else torch.device("cuda", 0),
        dry_run=args.dry_run,
        model="normformer-tiny" if args.dry_run else "normformer-125M",
        batch=2 if args.dry_run else args.batch,
        seq=32 if args.dry_run else args.seq,
        steps=1 if args.dry_run else args.steps,
        work=work,
    )
    results: dict = {}
    t0 = time.perf_counter()
    for name in args.checks:
        run_check(name, functools.partial(CHECKS[name], s), s, results)
    name = torch.cuda.get_device_name(s.device) if s.device.type == "cuda" else "CPU (dry run)"
    record = {
        "device": name,
        "dry_run": args.dry_run,
        "date": datetime.date.today().isoformat(),
        "total_s": time.perf_counter() - t0,
        "checks": results,
        "provenance": provenance(),
    }
    command = "python benchmarks/gpu_check.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:]))
    atomic_write_json(os.path.join(args.out, "gpu_check.json"), record)
    atomic_write_text(os.path.join(args.out, "gpu_check.md"), markdown(record, command.strip()))
    print(markdown(record, command.strip()))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
