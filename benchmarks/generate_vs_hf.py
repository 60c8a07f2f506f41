"""Generation speed: nfeval's batched KV-cache generator vs Hugging Face ``generate``, same model.

The model is a Pre-LN GPT-2-vocabulary Transformer with random weights (default 4 layers, d=256),
built once as an nfeval ``Transformer`` and copied weight for weight into a ``GPT2LMHeadModel`` (exact
GELU, eps 1e-5), so greedy decoding must give the same tokens on both sides. Prompts are 16 passages
of CPython's own documentation (``pydoc_data``), GPT-2-tokenized, 12 to 42 tokens long (ragged, so
batches are left-padded). EOS is off: every row generates all its tokens. Each setting runs HF then
nfeval back to back after one untimed warm-up each; tokens/s counts new tokens.

    python benchmarks/generate_vs_hf.py [--layers 4 --d-model 256] [--batches 1 16] [--new-tokens 64 512]
    python benchmarks/generate_vs_hf.py --layers 12 --d-model 768 --new-tokens 64   # 125M-shaped
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from nfeval.engine.config import preset
from nfeval.engine.generate import generate
from nfeval.engine.model import Transformer

# ../shared/data beside the checkout (searched upwards, so a worktree deeper down finds it too)
SHARED = next(
    (p / "shared" / "data" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
    Path("../shared/data"),
)


def build_models(layers: int, d_model: int, seed: int = 0):
    """Returns (nfeval Transformer, GPT2LMHeadModel) with the same random weights, both in eval mode."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = preset(
        "prenorm-125M",
        n_layer=layers,
        d_model=d_model,
        n_head=max(1, d_model // 64),
        d_ffn=4 * d_model,
        vocab_size=50257,
        max_seq_len=1024,
    )
    torch.manual_seed(seed)
    ours = Transformer(cfg).eval()
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


def prompts(n: int) -> list[list[int]]:
    """Returns ``n`` GPT-2-tokenized passages of CPython's documentation, 12 to 42 tokens long."""
    from pydoc_data.topics import topics

    from nfeval.engine.tokenization import gpt2_tokenizer

    tok = gpt2_tokenizer(str(SHARED / "tokenizer" / "gpt2"))
    text = " ".join(topics[k] for k in sorted(topics))
    out = []
    for i in range(n):
        ids = tok.encode(text[5000 * i : 5000 * i + 2000]).ids
        out.append(ids[: 12 + (30 * i) // max(1, n - 1)])
    return out


def hf_generate(model, batch: list[list[int]], new_tokens: int) -> list[list[int]]:
    """HF generate, left-padded, greedy, EOS off; returns each row's new tokens."""
    width = max(map(len, batch))
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(batch):
        ids[r, width - len(p) :], mask[r, width - len(p) :] = torch.tensor(p), 1
    out = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )
    return out[:, width:].tolist()


def timed(fn, repeats: int) -> tuple[float, list]:
    """Returns (best wall seconds over ``repeats`` runs after one warm-up, the last result)."""
    result, best = fn(), math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per side (best is kept)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    ours, hf = build_models(args.layers, args.d_model)
    ours, hf = ours.to(args.device), hf.to(args.device)
    rows = []
    for batch in args.batches:
        ps = prompts(max(batch, 2))[: max(batch, 2)]  # batch 1: two prompts, one after the other
        for n in args.new_tokens:
            chunks = [ps[i : i + batch] for i in range(0, len(ps), batch)]
            run_hf = lambda: [r for c in chunks for r in hf_generate(hf, c, n)]  # noqa: B023, E731
            run_nf = lambda: generate(ours, ps, max_new_tokens=n, batch_size=batch)  # noqa: B023, E731
            t_hf, want = timed(run_hf, args.repeats)
            t_nf, got = timed(run_nf, args.repeats)
            tokens = len(ps) * n
            rows.append(
                {
                    "batch": batch,
                    "new_tokens": n,
                    "prompts": len(ps),
                    "hf_tokens_per_s": round(tokens / t_hf, 1),
                    "nfeval_tokens_per_s": round(tokens / t_nf, 1),
                    "speedup": round(t_hf / t_nf, 2),
                    "identical_rows": sum(a == b for a, b in zip(got, want)),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print(
        f"\nmodel: Pre-LN L={args.layers} d={args.d_model} vocab=50257 (random), device {args.device}, "
        f"{args.threads} thread(s), best of {args.repeats}"
    )
    print("| batch | new tokens | HF generate tok/s | nfeval tok/s | speedup | identical rows |")
    print("|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['batch']} | {r['new_tokens']} | {r['hf_tokens_per_s']} | {r['nfeval_tokens_per_s']} | "
            f"{r['speedup']}x | {r['identical_rows']}/{r['prompts']} |"
        )


if __name__ == "__main__":
    main()
