"""``gpu_check.py``'s checks of scoring, generation and GLUE on the device:
the lm-eval adapter on the device against the CPU, and nfeval against Hugging Face ``generate``, lm-eval's
``HFLM`` and ``Trainer`` (``generate_vs_hf.py``, ``glue_sweep.py``)."""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import torch
from gpu_check_engine import Setup, write_corpus

from nfeval.engine.checkpoints import rundir


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
    """Times greedy generation of nfeval (its CUDA-graph steps, and its eager ones) against HF
    ``generate`` (its dynamic and its static, compiled KV cache) on the device, a 125M-shaped model,
    batch 1 and 16 (``benchmarks/generate_vs_hf.py``); returns per batch tokens/s, ratios, identical
    rows and the device's bandwidth limit."""
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
        row = gen.compare(
            ours,
            None,
            hf,
            batch,
            new_tokens,
            rounds,
            bandwidth,
            make_prompts,
            hf_static=True,
            nfeval_eager=True,
        )
        out |= {f"b{batch}_{k}": v for k, v in row.items() if k != "batch"}
    return out | graph_vs_eager(ours, make_prompts(16), new_tokens)


def graph_vs_eager(model, prompts: list[list[int]], new_tokens: int) -> dict:
    """Returns how many of ``prompts``' rows nfeval's static (on a GPU: CUDA-graph) steps generate as its
    eager steps do, batch 4, when rows end early at an EOS id (one the eager rows reach mid-way) and
    when sampled under a seed; a row that differs is a bug, not rounding, unless the logits tie."""
    from nfeval.engine.fast.speed import Fast
    from nfeval.engine.inference.generate import Sampling, generate

    def both(**kwargs):
        runs = [
            generate(model, prompts, max_new_tokens=new_tokens, batch_size=4, speed=Fast(static=x), **kwargs)
            for x in (False, True)
        ]
        return sum(a == b for a, b in zip(*runs)), runs[1]

    eager = generate(model, prompts, max_new_tokens=new_tokens, batch_size=4, speed=Fast(static=False))
    eos = eager[0][new_tokens // 2]
    same_eos, rows = both(eos_id=eos)
    same_sampled, _ = both(sampling=Sampling(temperature=0.8, top_k=50, seed=0))
    return {
        "graph_vs_eager_rows": len(prompts),
        "graph_vs_eager_eos_identical": same_eos,
        "graph_vs_eager_eos_lengths": sorted({len(r) for r in rows}),
        "graph_vs_eager_sampled_identical": same_sampled,
    }


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
    median = {name: timing.seconds for name, timing in timed.items()}
    results = {name: timing.result for name, timing in timed.items()}
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


GLUE_TRAIN_ROWS = 8000  # SST-2's training rows the sweep fine-tunes on (a random subset of its 67,349)


def glue_vs_trainer(s: Setup) -> dict:
    """Times the seven-learning-rate SST-2 sweep on the device (``benchmarks/glue_sweep.py``, bf16): nfeval
    one point at a time against HF ``Trainer`` in its strongest configuration (dynamic padding and
    ``group_by_length``), on ``GLUE_TRAIN_ROWS`` of SST-2's training rows and its whole dev set from the
    data folder (``DATA/glue/SST-2``), else on a synthetic SST-2. Returns the data, the rows, each side's
    seconds and best dev accuracy, and the Trainer / nfeval ratio."""
    import glue_sweep

    real = s.data_dir / "glue" / "SST-2"
    glue_dir = str(real.parent) if real.is_dir() else glue_sweep.synthetic_sst2(s.work / "glue-synthetic")
    rows = 64 if s.dry_run else GLUE_TRAIN_ROWS
    argv = ["--glue-dir", glue_dir, "--tasks", "sst2", "--device", str(s.device), "--train", str(rows),
            "--trainer-order", "group_by_length"]  # fmt: skip
    if s.dry_run:
        argv += ["--layers", "1", "--d-model", "32", "--heads", "2", "--epochs", "1",
                 "--lrs", "1e-3,2e-3", "--vocab", "300"]  # fmt: skip
    args = glue_sweep.parse_args(argv)
    sides = glue_sweep.sides_of("sst2", args, str(s.work / "glue-bench"))
    train = s.work / "glue-bench" / "sst2" / "glue" / "SST-2" / "train.tsv"
    times, scores = glue_sweep.interleaved(sides, 1)
    seconds = {side: t[0] for side, t in times.items()}
    out = {"data": str(real) if real.is_dir() else "synthetic SST-2", "lrs": len(args.lrs)}
    out["train_rows"] = len(train.read_text(encoding="utf-8").splitlines()) - 1  # less the header
    out["epochs"] = args.epochs
    for side, t in seconds.items():
        out[f"{side} s"] = t
        out[f"{side} best dev"] = max(best for best, _ in scores[side].values())
    out |= {f"{hf} / {ours}": ratio for (hf, ours), ratio in glue_sweep.trainer_ratios(seconds).items()}
    return out
