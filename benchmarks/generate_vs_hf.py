"""Generation speed: nfeval's batched KV-cache generator vs Hugging Face ``generate``, same model, in process.

The model is a Pre-LN GPT-2-vocabulary Transformer with random weights (default 4 layers, d=256),
built once as an nfeval ``Transformer`` and copied weight for weight into a ``GPT2LMHeadModel`` (exact
GELU, eps 1e-5), so greedy decoding must give the same tokens on both sides. Prompts are 16 passages
of CPython's own documentation (``pydoc_data``), GPT-2-tokenized, 12 to 42 tokens long (ragged, so
batches are left-padded); batch 1 runs two prompts one after the other. EOS is off: every row
generates all its tokens; tokens/s counts new tokens. Rounds are interleaved (each round times both
sides once, in alternating order, after one untimed warm-up each) and each side's median is kept;
beside the ratio of the medians stands its spread, the lowest and highest ratio of one round's pair.

Beside each rate stands the memory-bandwidth limit of decoding: the bytes one step reads (the
weights, once per step, and the KV cache) per token, divided by the bandwidth of a 256 MB tensor
copy measured in the same run. nfeval's greedy head reads an int8 copy of the output projection
(``nfeval.engine.fast.greedy_head``), HF's reads fp32. The bf16 row is nfeval with ``--dtype bf16``
weights, an opt-in: its tokens are compared with fp32's.

    python benchmarks/generate_vs_hf.py [--layers 4 --d-model 256] [--batches 1 16] [--new-tokens 64]
    python benchmarks/generate_vs_hf.py --layers 12 --d-model 768   # 125M-shaped
    ... --results benchmarks/RESULTS.md   # replace this shape's block in the generation section
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from pathlib import Path
from typing import NamedTuple

import torch
from results_md import write_block

from nfeval.engine.fast.cpu_linear import convert
from nfeval.engine.fast.speed import Fast
from nfeval.engine.inference.generate import generate
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.training.budget import synchronize

# ../shared/data beside the checkout (searched upwards, so a worktree deeper down finds it too)
SHARED = next(
    (p / "shared" / "data" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
    Path("../shared/data"),
)


def gpt2_layout(layers: int, d_model: int, vocab_size: int = 50257):
    """Returns a Pre-LN ``ModelConfig`` in GPT-2's own layout (learned positions, no embedding scale,
    GPT-2's init), so its weights map onto ``GPT2LMHeadModel`` one to one; the preset alone brings
    fairseq's recipe (sinusoidal positions, a scaled embedding), which GPT-2 has not."""
    return preset(
        "prenorm-125M", n_layer=layers, d_model=d_model, n_head=max(1, d_model // 64), d_ffn=4 * d_model,
        vocab_size=vocab_size, max_seq_len=1024, positions="learned", scale_embedding=False, init="gpt2",
    )  # fmt: skip


def build_models(layers: int, d_model: int, seed: int = 0):
    """Returns (nfeval Transformer with its CPU kernel, GPT2LMHeadModel) with the same random weights,
    both in eval mode."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = gpt2_layout(layers, d_model)
    torch.manual_seed(seed)
    ours = convert(Transformer(cfg).eval())
    hf_cfg = GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.max_seq_len,
        n_embd=d_model,
        n_layer=layers,
        n_head=cfg.n_head,
        n_inner=cfg.d_ffn,
        activation_function="gelu",
        layer_norm_epsilon=1e-5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    hf = GPT2LMHeadModel(hf_cfg).eval()
    src = ours.state_dict()
    state = {
        "transformer.wte.weight": src["tok_emb.weight"],
        "lm_head.weight": src["tok_emb.weight"],
        "transformer.wpe.weight": src["pos_emb.weight"],
        "transformer.ln_f.bias": src["final_norm.bias"],
        "transformer.ln_f.weight": src["final_norm.weight"],
    }
    names = {
        "attn_norm": "ln_1",
        "ffn_norm": "ln_2",
        "attn.qkv": "attn.c_attn",
        "attn.out_proj": "attn.c_proj",
        "fc1": "mlp.c_fc",
        "fc2": "mlp.c_proj",
    }
    for i in range(layers):
        for ours_name, hf_name in names.items():
            w, b = src[f"blocks.{i}.{ours_name}.weight"], src[f"blocks.{i}.{ours_name}.bias"]
            conv1d = "norm" not in ours_name  # GPT-2's Conv1D stores the weight transposed
            state[f"transformer.h.{i}.{hf_name}.weight"] = w.t().contiguous() if conv1d else w
            state[f"transformer.h.{i}.{hf_name}.bias"] = b
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and all(".attn.bias" in m or "masked_bias" in m for m in missing), (
        missing,
        unexpected,
    )
    return ours, hf


def prompt_length(i: int, n: int) -> int:
    """Returns the length of prompt ``i`` of ``n``: 12 to 42 tokens, ragged."""
    return 12 + (30 * i) // max(1, n - 1)


def prompts(n: int) -> list[list[int]]:
    """Returns ``n`` GPT-2-tokenized passages of CPython's documentation, 12 to 42 tokens long."""
    from pydoc_data.topics import topics

    from nfeval.engine.text.tokenization import gpt2_tokenizer

    tok = gpt2_tokenizer(str(SHARED / "tokenizer" / "gpt2"))
    text = " ".join(topics[k] for k in sorted(topics))
    return [tok.encode(text[5000 * i : 5000 * i + 2000]).ids[: prompt_length(i, n)] for i in range(n)]


def random_prompts(n: int, vocab_size: int = 50257) -> list[list[int]]:
    """Returns ``n`` prompts of seeded random token ids, as long as ``prompts``' (for a machine without
    the shared GPT-2 tokenizer: the weights are random, so the text does not matter)."""
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab_size, (prompt_length(i, n),), generator=g).tolist() for i in range(n)]


def hf_generate(model, batch: list[list[int]], new_tokens: int, **options) -> list[list[int]]:
    """HF generate, left-padded, greedy, EOS off, with ``options`` (e.g. ``cache_implementation``);
    returns each row's new tokens."""
    width = max(map(len, batch))
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(batch):
        ids[r, width - len(p) :], mask[r, width - len(p) :] = torch.tensor(p), 1
    out = model.generate(
        ids.to(model.device),
        attention_mask=mask.to(model.device),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
        **options,
    )
    return out[:, width:].tolist()


def measure_bandwidth(megabytes: int = 256, repeats: int = 5, device: str = "cpu") -> float:
    """Returns the memory bandwidth of ``device`` in bytes/s: bytes read + written by the fastest of
    ``repeats`` copies of a ``megabytes`` fp32 tensor."""
    src = torch.ones(megabytes * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        synchronize(src.device)
        t0 = time.perf_counter()
        dst.copy_(src)
        synchronize(src.device)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def bytes_per_token(model, batch: int, context: float, head_bytes_per_weight: int) -> float:
    """Returns the bytes one decoding step reads per row: every weight once (the tied output projection
    at ``head_bytes_per_weight``, the rest fp32) shared by ``batch`` rows, plus the row's KV cache of
    ``context`` tokens."""
    cfg = model.cfg
    head = cfg.vocab_size * cfg.d_model
    rest = sum(p.numel() for p in model.parameters()) - head
    cache = 2 * cfg.n_layer * context * cfg.d_model * 4
    return (4 * rest + head_bytes_per_weight * head) / batch + cache


class Timing(NamedTuple):
    """One side's times over interleaved rounds."""

    seconds: float  # the median round
    result: object  # the last round's result
    rounds: list[float]  # every round's seconds, in order


def interleaved(sides: dict, rounds: int) -> dict[str, Timing]:
    """Returns each side's ``Timing``; each round runs every side once, in an order that alternates from
    round to round, after one untimed warm-up each."""
    results = {name: fn() for name, fn in sides.items()}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in list(sides)[:: 1 if r % 2 == 0 else -1]:
            t0 = time.perf_counter()
            results[name] = sides[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: Timing(statistics.median(times[name]), results[name], times[name]) for name in sides}


def ratio_spread(slow: list[float], fast: list[float]) -> tuple[float, float]:
    """Returns the lowest and highest ``slow[r] / fast[r]`` over the rounds r: the spread of a ratio whose
    two sides ran back to back in each round, which a drift of the machine's speed moves least."""
    ratios = [a / b for a, b in zip(slow, fast, strict=True)]
    return min(ratios), max(ratios)


def spread(low_high: tuple[float, float]) -> str:
    """Returns a ratio's spread as the tables print it: ``0.97-1.08``."""
    return f"{low_high[0]:.2f}-{low_high[1]:.2f}"


def agreement(got: list[list[int]], want: list[list[int]]) -> tuple[int, float]:
    """Returns (rows identical to ``want``, fraction of tokens equal position by position)."""
    same = sum(a == b for a, b in zip(got, want))
    pairs = [(x, y) for a, b in zip(got, want) for x, y in zip(a, b)]
    return same, sum(x == y for x, y in pairs) / max(1, len(pairs))


def compare(
    ours,
    ours_bf16,
    hf,
    batch: int,
    new_tokens: int,
    rounds: int,
    bandwidth: float,
    make_prompts=prompts,
    hf_static: bool = False,
    nfeval_eager: bool = False,
) -> dict:
    """Returns one table row: HF, nfeval fp32 and nfeval bf16 at ``batch``, timed interleaved, on
    ``make_prompts(n)``; with ``hf_static`` also HF with its static KV cache (which ``generate``
    compiles on a GPU), its speed and its agreement with nfeval in ``hf_static_*`` fields; with
    ``nfeval_eager`` also nfeval's eager steps (``Fast(static=False)``: on a GPU, without its CUDA
    graph)."""
    ps = make_prompts(max(batch, 2))
    chunks = [ps[i : i + batch] for i in range(0, len(ps), batch)]
    sides = {
        "hf": lambda: [r for c in chunks for r in hf_generate(hf, c, new_tokens)],
        "nfeval": lambda: generate(ours, ps, max_new_tokens=new_tokens, batch_size=batch, speed=Fast()),
    }
    if hf_static:
        sides["hf_static"] = lambda: [
            r for c in chunks for r in hf_generate(hf, c, new_tokens, cache_implementation="static")
        ]
    if nfeval_eager:
        sides["nfeval_eager"] = lambda: generate(
            ours, ps, max_new_tokens=new_tokens, batch_size=batch, speed=Fast(static=False)
        )
    if ours_bf16 is not None:
        sides["bf16"] = lambda: generate(
            ours_bf16, ps, max_new_tokens=new_tokens, batch_size=batch, speed=Fast()
        )
    timed = interleaved(sides, rounds)
    tokens = len(ps) * new_tokens
    context = sum(map(len, ps)) / len(ps) + new_tokens / 2  # mean cached tokens over the decode
    row = {"batch": batch, "new_tokens": new_tokens, "prompts": len(ps)}
    for name, timing in timed.items():
        row[f"{name}_tok_s"] = tokens / timing.seconds
    nf = timed["nfeval"]
    ratios = {"hf": "speedup", "hf_static": "hf_static_speedup", "nfeval_eager": "eager_speedup"}
    for name, key in ratios.items():
        if name in timed:
            row[key] = timed[name].seconds / nf.seconds
            row[f"{key}_range"] = ratio_spread(timed[name].rounds, nf.rounds)
    row["identical"], _ = agreement(nf.result, timed["hf"].result)
    if hf_static:
        row["hf_static_identical"], _ = agreement(nf.result, timed["hf_static"].result)
    if nfeval_eager:
        row["eager_identical"], _ = agreement(nf.result, timed["nfeval_eager"].result)
    row["limit_fp32"] = bandwidth / bytes_per_token(ours, batch, context, 4)
    row["limit_int8_head"] = bandwidth / bytes_per_token(ours, batch, context, 1)
    if ours_bf16 is not None:
        row["bf16_identical"], row["bf16_token_agreement"] = agreement(timed["bf16"].result, nf.result)
    return row


def table(rows: list[dict], args, bandwidth: float) -> str:
    """Returns the markdown block of one run: settings, machine load, one line per batch size."""
    load = os.getloadavg()
    static = all("hf_static_tok_s" in r for r in rows)
    lines = [
        f"Model: Pre-LN L={args.layers} d={args.d_model} vocab 50257 (random), device {args.device}, "
        f"{args.threads} torch thread(s); {args.rounds} interleaved rounds, median (the ratios' spread: "
        "the lowest-highest of the rounds' pairs). "
        f"Memory bandwidth (256 MB copy, read + write): {bandwidth / 1e9:.1f} GB/s. "
        f"Load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} ({os.cpu_count()} cores).",
        "",
        "| batch | new tokens | HF tok/s | nfeval tok/s | nfeval / HF | spread | identical rows | "
        "bandwidth limit tok/s (fp32 / int8 head) | nfeval bf16 tok/s | bf16 = fp32 rows, tokens |"
        + (" HF static-cache tok/s | nfeval / HF static | identical rows |" if static else ""),
        "|---:|---:|---:|---:|---:|---|---|---|---:|---|" + ("---:|---:|---|" if static else ""),
    ]
    for r in rows:
        bf16 = (
            f"{r['bf16_tok_s']:.1f} | {r['bf16_identical']}/{r['prompts']}, {r['bf16_token_agreement']:.1%}"
            if "bf16_tok_s" in r
            else "- | -"
        )
        lines.append(
            f"| {r['batch']} | {r['new_tokens']} | {r['hf_tok_s']:.1f} | {r['nfeval_tok_s']:.1f} | "
            f"**{r['speedup']:.2f}x** | {spread(r['speedup_range'])} | {r['identical']}/{r['prompts']} | "
            f"{r['limit_fp32']:.0f} / {r['limit_int8_head']:.0f} | {bf16} |"
            + (
                f" {r['hf_static_tok_s']:.1f} | **{r['hf_static_speedup']:.2f}x** "
                f"({spread(r['hf_static_speedup_range'])}) | "
                f"{r['hf_static_identical']}/{r['prompts']} |"
                if static
                else ""
            )
        )
    return "\n".join(lines)


def write_results(path: str, key: str, block: str) -> None:
    """Replaces (or adds to the generation section) the block of ``path`` marked with ``key``."""
    heading = "## Generation (`nfeval generate` vs Hugging Face `generate`)"
    write_block(path, f"generate_vs_hf {key}", block, heading)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds (median kept)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-bf16", action="store_true", help="skip the nfeval bf16 side")
    parser.add_argument(
        "--hf-static",
        action="store_true",
        help="also time HF generate with its static KV cache (cache_implementation='static')",
    )
    parser.add_argument("--results", metavar="RESULTS.md", help="write the table into this file")
    parser.add_argument("--note", default="", help="a line above the table (e.g. the machine's state)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    ours, hf = build_models(args.layers, args.d_model)
    ours, hf = ours.to(args.device), hf.to(args.device)
    ours_bf16 = None if args.no_bf16 else copy.deepcopy(ours).to(torch.bfloat16)
    bandwidth = measure_bandwidth(device=args.device)
    make_prompts = prompts if (SHARED / "tokenizer" / "gpt2").is_dir() else random_prompts
    if make_prompts is random_prompts:
        print(f"{SHARED / 'tokenizer' / 'gpt2'}: not found; prompts are random token ids", flush=True)
    rows = []
    for batch in args.batches:
        row = compare(ours, ours_bf16, hf, batch, args.new_tokens, args.rounds, bandwidth, make_prompts,
                      hf_static=args.hf_static)  # fmt: skip
        rows.append(row)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}, flush=True)
    block = "\n\n".join(x for x in (args.note, table(rows, args, bandwidth)) if x)
    print("\n" + block)
    if args.results:
        write_results(args.results, f"L={args.layers} d={args.d_model}", block)


if __name__ == "__main__":
    main()
