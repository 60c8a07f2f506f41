"""GLUE sweep time: ``nfeval.glue.sweep`` vs a stock Hugging Face ``Trainer`` fine-tune (run_glue style).

Both sides fine-tune the same RoBERTa-shaped encoder (post-LN, embedding LayerNorm, learned positions;
random init, no pretraining: no weights can be downloaded) on the same subset of one GLUE task, with the
same token ids, learning-rate grid, epochs, batch size, warmup, Adam betas/eps, weight decay and
dropout, evaluating on the full dev set after every epoch. The Trainer side pads every input to
``--max-len`` as run_glue does by default (``pad_to_max_length``); nfeval pads per batch and buckets by
length. Reported: wall time of the whole sweep on each side, and the dev metric (best epoch, and last
epoch) at each learning rate, so that speed is compared at an equal dev score.

    python benchmarks/glue_sweep.py --task sst2 --train 4000 --lrs 3e-4,1e-3 --epochs 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import torch

from nfeval.engine import checkpoint
from nfeval.engine.config import ModelConfig
from nfeval.engine.model import Transformer
from nfeval.engine.tokenization import special_ids, train_bpe
from nfeval.glue import data as glue_data
from nfeval.glue import finetune, points
from nfeval.glue import metrics as glue_metrics
from nfeval.glue import sweep as glue

DEFAULT_GLUE = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"


def subset_glue_dir(glue_dir: str, task: str, n_train: int, out: str) -> str:
    """Writes a GLUE folder for ``task`` with ``n_train`` random training rows (header kept) and the full
    dev set."""
    spec = glue_data.spec(task)
    src, dst = Path(glue_dir) / spec.folder, Path(out) / spec.folder
    dst.mkdir(parents=True, exist_ok=True)
    lines = (src / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    head, rows = (lines[:1], lines[1:]) if isinstance(spec.label_column, str) else ([], lines)
    rows = random.Random(0).sample(rows, min(n_train, len(rows)))
    (dst / "train.tsv").write_text("".join(head + rows), encoding="utf-8")
    for name in spec.dev_files.values():
        (dst / name).write_bytes((src / name).read_bytes())
    return out


def encoder_config(vocab: int, args) -> ModelConfig:
    """Returns a RoBERTa-shaped nfeval config (post-LN, embedding LayerNorm, learned positions)."""
    return ModelConfig(
        vocab_size=vocab,
        n_layer=args.layers,
        d_model=args.d_model,
        n_head=args.heads,
        d_ffn=4 * args.d_model,
        max_seq_len=args.max_len,
        objective="mlm",
        norm_position="post",
        embedding_norm=True,
        final_norm=False,
    )


def run_nfeval(ckpt_dir: str, glue_dir: str, args) -> tuple[float, dict]:
    """Returns (seconds, {lr: (best-epoch metric, last-epoch metric)}) of nfeval's sweep."""
    recipe = glue.Recipe(
        epochs=args.epochs, batch_size=args.batch_size, max_len=args.max_len, eval_batch_size=64
    )
    out = tempfile.mkdtemp(prefix="nfeval-glue-bench-")
    t0 = time.perf_counter()
    summary = glue.sweep(
        ckpt_dir,
        [args.task],
        args.lrs,
        out_dir=out,
        glue_dir=glue_dir,
        recipe=recipe,
        device="cpu",
        progress=False,
    )
    seconds = time.perf_counter() - t0
    main = glue_metrics.MAIN_METRIC[args.task]
    scores = {}
    for lr in args.lrs:
        result_path = Path(points.point_dir(out, args.task, lr, 0)) / points.RESULT
        history = json.loads(result_path.read_text())["history"]
        scores[lr] = (max(h["metrics"][main] for h in history), history[-1]["metrics"][main])
    assert summary["tasks"][args.task]["metric"] == main
    return seconds, scores


def run_trainer(ckpt, data: glue_data.TaskData, args) -> tuple[float, dict]:
    """Returns (seconds, {lr: (best-epoch metric, last-epoch metric)}) of Trainer runs, padding to max
    length."""
    import datasets
    from transformers import (
        RobertaConfig,
        RobertaForSequenceClassification,
        Trainer,
        TrainingArguments,
    )

    spec, tok = data.spec, ckpt.tokenizer
    sp = special_ids(tok)

    def padded(split: glue_data.Split) -> datasets.Dataset:
        ids = finetune.encode(tok, split, args.max_len)
        return datasets.Dataset.from_dict(
            {
                "input_ids": [s + [sp.pad] * (args.max_len - len(s)) for s in ids],
                "attention_mask": [[1] * len(s) + [0] * (args.max_len - len(s)) for s in ids],
                "labels": split.labels,
            }
        )

    train = padded(data.train)
    dev = {name: padded(split) for name, split in data.dev.items()}
    ((dev_name, dev_set),) = dev.items()
    main = glue_metrics.MAIN_METRIC[spec.name]

    def compute_metrics(pred):
        preds = pred.predictions.argmax(-1) if not spec.is_regression else pred.predictions.squeeze(-1)
        return glue_metrics.compute(
            spec.name, {dev_name: pred.label_ids.tolist()}, {dev_name: preds.tolist()}
        )

    cfg = ckpt.config
    hf_cfg = RobertaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        intermediate_size=cfg.d_ffn,
        max_position_embeddings=cfg.max_seq_len + sp.pad + 1,
        type_vocab_size=1,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        pad_token_id=sp.pad,
        bos_token_id=sp.bos,
        eos_token_id=sp.eos,
        num_labels=spec.num_labels,
    )
    t0, scores = time.perf_counter(), {}
    for lr in args.lrs:
        torch.manual_seed(0)
        model = RobertaForSequenceClassification(hf_cfg)
        targs = TrainingArguments(
            output_dir=tempfile.mkdtemp(prefix="hf-glue-bench-"),
            learning_rate=lr,
            num_train_epochs=args.epochs,
            per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=64,
            warmup_steps=0.06,
            lr_scheduler_type="linear",
            adam_beta1=0.9,
            adam_beta2=0.98,
            adam_epsilon=1e-6,
            weight_decay=0.1,
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
        )
        trainer = Trainer(
            model=model,
            args=targs,
            train_dataset=train,
            eval_dataset=dev_set,
            compute_metrics=compute_metrics,
        )
        trainer.train()
        history = [h[f"eval_{main}"] for h in trainer.state.log_history if f"eval_{main}" in h]
        scores[lr] = (max(history), history[-1])
    return time.perf_counter() - t0, scores


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--glue-dir", default=str(DEFAULT_GLUE))
    p.add_argument("--task", default="sst2", choices=[t for t in glue_data.TASKS if t != "stsb"])
    p.add_argument("--train", type=int, default=4000, help="training examples (random subset)")
    p.add_argument("--lrs", type=lambda s: [float(x) for x in s.split(",")], default=[3e-4, 1e-3])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-len", type=int, default=128, help="run_glue's default max_seq_length")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--threads", type=int, default=1, help="torch threads for both sides")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    work = tempfile.mkdtemp(prefix="glue-bench-")
    glue_dir = subset_glue_dir(args.glue_dir, args.task, args.train, os.path.join(work, "glue"))
    data = glue_data.load_local(args.task, glue_dir)
    tok = train_bpe(data.train.text_a + (data.train.text_b or []), vocab_size=args.vocab)
    torch.manual_seed(0)
    ckpt_dir = os.path.join(work, "ckpt")
    checkpoint.save(ckpt_dir, Transformer(encoder_config(tok.get_vocab_size(), args)), tok)
    ckpt = checkpoint.load(ckpt_dir)

    seqs = finetune.encode(tok, data.train, args.max_len)
    mean_len = sum(map(len, seqs)) / len(seqs)
    print(
        f"task {args.task}: {len(data.train)} train / {sum(map(len, data.dev.values()))} dev examples, "
        f"mean length {mean_len:.1f} tokens (max_len {args.max_len}); model {ckpt.model.num_params():,} "
        "params "
        f"({args.layers} layers, d={args.d_model}); lrs {args.lrs}, {args.epochs} epochs, batch "
        f"{args.batch_size}; "
        f"torch threads {torch.get_num_threads()}"
    )
    ours, our_scores = run_nfeval(ckpt_dir, glue_dir, args)
    theirs, their_scores = run_trainer(ckpt, data, args)
    main_metric = glue_metrics.MAIN_METRIC[args.task]
    print(f"\n| lr | nfeval {main_metric} best epoch / last | HF Trainer {main_metric} best epoch / last |")
    print("|---|---|---|")
    for lr in args.lrs:
        (a, b), (c, d) = our_scores[lr], their_scores[lr]
        print(f"| {lr:g} | {a:.4f} / {b:.4f} | {c:.4f} / {d:.4f} |")
    best_ours, best_theirs = max(s[0] for s in our_scores.values()), max(s[0] for s in their_scores.values())
    print(f"| best over grid | {best_ours:.4f} | {best_theirs:.4f} |")
    print(
        f"\nsweep wall time: nfeval {ours:.1f} s, HF Trainer (pad to {args.max_len}) {theirs:.1f} s, "
        f"speed-up {theirs / ours:.2f}x"
    )


if __name__ == "__main__":
    main()
