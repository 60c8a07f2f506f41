"""End-to-end time and accuracy of ``nfeval zeroshot`` vs lm-eval's stock ``hf`` model, side by side.

Both score the same Hugging Face GPT-2-shaped model (random weights, GPT-2's tokenizer from
``../shared/data/tokenizer/gpt2``, saved to a temp dir) on the same first N items of every task in
``../shared/data/zeroshot`` (StoryCloze when its files are there); the accuracies must agree. The
nfeval side also reports its scoring stage (wall time, model FLOPs, fraction of the matmul peak).

    python benchmarks/zeroshot_vs_hf.py [--limit 500] [--d-model 256] [--layers 4] [--batch-size 16]
        [--tasks piqa hellaswag ...]

``--packing N`` instead scores the first N HellaSwag items with a 125M-shaped (GPT-2 small) random
model through ``NFEvalLM``, packed and unpacked: tokens, model FLOPs, time and the largest |Δ log-prob|.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

# ../shared/data beside the checkout; $NFEVAL_SHARED_DATA for a checkout elsewhere (a git worktree)
SHARED = Path(os.environ.get("NFEVAL_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
TASKS = [t for t in ("piqa", "hellaswag", "winogrande", "openbookqa", "storycloze_2016")
         if (SHARED / "zeroshot" / t.split("_")[0]).is_dir()]  # fmt: skip


def build_model(path: str, d_model: int, layers: int) -> str:
    """Saves a random GPT2LMHeadModel with GPT-2's tokenizer to ``path``; returns ``path``."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from nfeval.engine.tokenization import GPT2_EOT, gpt2_tokenizer

    bpe = gpt2_tokenizer(str(SHARED / "tokenizer" / "gpt2"))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=GPT2_EOT, eos_token=GPT2_EOT, pad_token="<pad>"
    )
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=bpe.get_vocab_size(),
        n_embd=d_model,
        n_layer=layers,
        n_head=max(1, d_model // 64),
        n_positions=1024,
    )
    GPT2LMHeadModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--packing", type=int, default=None, metavar="N")
    args = parser.parse_args()
    if args.packing:
        packing_comparison(args.packing, args.batch_size)
        return

    import lm_eval
    from lm_eval.tasks import TaskManager

    import nfeval.tasks as nf_tasks
    from nfeval.zeroshot import evaluate as zeroshot

    data_dir = str(SHARED / "zeroshot")
    os.environ["NFEVAL_CACHE"] = tempfile.mkdtemp(prefix="nfeval-bench-cache-")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(os.path.join(tmp, "gpt2-random"), args.d_model, args.layers)
        names = [f"{t}_local" for t in args.tasks]

        t0 = time.perf_counter()
        manager = TaskManager(
            include_path=nf_tasks.TASKS_DIR, include_defaults=False, metadata={"data_dir": data_dir}
        )
        stock = lm_eval.simple_evaluate(
            model="hf",
            model_args=f"pretrained={model_dir},dtype=float32",
            tasks=names,
            task_manager=manager,
            limit=args.limit,
            batch_size=args.batch_size,
            device="cpu",
            log_samples=False,
        )
        t_hf = time.perf_counter() - t0

        t0 = time.perf_counter()
        ours = zeroshot.evaluate(
            model_dir,
            tasks=args.tasks,
            data_dir=data_dir,
            limit=args.limit,
            batch_size=args.batch_size,
            device="cpu",
            use_cache=False,
        )
        t_nf = time.perf_counter() - t0

    report = {
        "limit": args.limit,
        "model": f"GPT-2 shape d={args.d_model} L={args.layers} vocab=50259 (random)",
        "threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "wall_s": {"lm_eval_hf": round(t_hf, 1), "nfeval_zeroshot": round(t_nf, 1)},
        "speedup": round(t_hf / t_nf, 2),
        "scoring": ours["nfeval"].get("scoring"),
        "accuracy": {},
    }
    for task in names:
        row = {}
        for metric in ("acc,none", "acc_norm,none"):
            if metric in stock["results"][task]:
                row[metric] = {"hf": stock["results"][task][metric],
                               "nfeval": ours["results"][task][metric]}  # fmt: skip
        row["match"] = all(
            v["hf"] == v["nfeval"] for k, v in row.items() if k in ("acc,none", "acc_norm,none")
        )
        report["accuracy"][task] = row
    print(json.dumps(report, indent=2))


def packing_comparison(n_docs: int, batch_size: int) -> None:
    """Prints tokens, FLOPs, time and max |Δ log-prob| of packed vs unpacked scoring of HellaSwag."""
    from lm_eval.tasks import TaskManager

    import nfeval.tasks as nf_tasks
    from nfeval.model_adapters import NFEvalLM

    manager = TaskManager(include_path=nf_tasks.TASKS_DIR, include_defaults=False,
                          metadata={"data_dir": str(SHARED / "zeroshot")})  # fmt: skip
    task = manager.load(["hellaswag_local"])["tasks"]["hellaswag_local"]
    task.build_all_requests(limit=n_docs, rank=0, world_size=1)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(os.path.join(tmp, "gpt2-125m-random"), 768, 12)
        report, scores = (
            {"docs": n_docs, "requests": len(task.instances), "threads": torch.get_num_threads()},
            {},
        )
        for packed in (False, True):
            lm = NFEvalLM(
                pretrained=model_dir, device="cpu", batch_size=batch_size, pack=packed, progress=False
            )
            t0 = time.perf_counter()
            scores[packed] = [ll for ll, _ in lm.loglikelihood(task.instances, disable_tqdm=True)]
            wall = time.perf_counter() - t0
            report["packed" if packed else "unpacked"] = dict(
                lm.scoring_report(), end_to_end_s=round(wall, 1)
            )
    report["max_abs_delta"] = max(abs(a - b) for a, b in zip(scores[True], scores[False]))
    report["flops_ratio"] = report["unpacked"]["flops"] / report["packed"]["flops"]
    report["time_ratio"] = report["unpacked"]["wall_s"] / report["packed"]["wall_s"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
