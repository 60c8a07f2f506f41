"""Why nfeval's GLUE fine-tune and the Trainer of ``glue_sweep.py`` score differently (issue 27): both
sides trained from the same weights on the SAME batches in the SAME order (nfeval's length batches, fed
to the Trainer through its sampler), with the per-step loss and the classifier's weights compared.

``--dropout 0`` (the default) makes both deterministic: any gap is then a recipe difference. With
glue_sweep's Trainer set-up they agree to ~1e-8 for every step; ``--schedule hf`` (the Trainer's own
warmup, one step behind nfeval's) or ``--no-freeze-token-type`` (HF's trained token-type embedding, which
nfeval's encoder lacks) each make them differ from the first update. ``--order`` picks the Trainer's data
order: ``nfeval`` (the same batches), ``group_by_length`` (the Trainer's own, as glue_sweep runs it) or
``random`` (a plain shuffle); ``--no-nfeval`` runs the Trainer only (compare its dev metric with the
sweep's nfeval numbers).

    python benchmarks/glue_gap_probe.py --train 400 --batch-size 16 --layers 2 --d-model 64
    python benchmarks/glue_gap_probe.py --train 4000 --batch-size 32 --layers 6 --d-model 256 --vocab 4096 \\
        --dropout 0.1 --lrs 1e-4,2e-4,5e-4 --order group_by_length --no-nfeval
"""

from __future__ import annotations

import argparse
import math
import tempfile

import torch
from glue_sweep import DEFAULT_GLUE, prepare_task
from glue_trainer import recipe_model, recipe_trainer_class, roberta_names, roberta_state, trainer_inputs
from glue_trainer import training_arguments as sweep_training_arguments

from nfeval.base.progress import progress_bar
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.text.tokenization import special_ids
from nfeval.glue import finetune
from nfeval.glue import metrics as glue_metrics
from nfeval.glue import sweep as glue


def nfeval_order(lengths: list[int], batch_size: int, epoch: int) -> list[list[int]]:
    """Returns nfeval's training batches of ``epoch`` for seed 0 (``run_point``'s generator)."""
    return finetune.length_batches(lengths, batch_size, torch.Generator().manual_seed(epoch))


def run_nfeval(ckpt, enc, recipe, lr: float, first_state: dict) -> tuple[list, list, list[float]]:
    """Returns (loss per step, head.out_proj.weight after each step, dev metric per epoch) of nfeval's own
    set-up and training step, one batch at a time."""
    dev, pad = torch.device("cpu"), special_ids(ckpt.tokenizer).pad
    model, opt, sched, _, stats = finetune.set_up_point(ckpt, enc, lr, 0, recipe, tempfile.mkdtemp(), {}, dev)
    lengths = [len(s) for s in enc.train[0]]
    losses, weights, dev_scores = [], [], []
    quiet = progress_bar(total=1, enabled=False)
    for epoch in range(recipe.epochs):
        for batch in nfeval_order(lengths, recipe.batch_size, epoch):
            loss = finetune._train_epoch(model, opt, sched, enc, recipe, [batch], pad, dev, stats, quiet)
            losses.append(loss.item())
            weights.append(model.head.out_proj.weight.detach().clone())
            if len(weights) == 1:
                first_state.update(roberta_names(ckpt, model.state_dict()))
        metrics = finetune.evaluate(model, enc, recipe, pad, dev)
        dev_scores.append(metrics[glue_metrics.MAIN_METRIC[enc.spec.name]])
    return losses, weights, dev_scores


def fixed_order_sampler(lengths: list[int], batch_size: int, order: str):
    """Returns a sampler of the Trainer's training indices in ``order`` (``nfeval`` or ``random``), one
    order per epoch through ``set_epoch``."""

    class Sampler(torch.utils.data.Sampler):
        epoch = 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __len__(self) -> int:
            return len(lengths)

        def __iter__(self):
            if order == "random":
                shuffle = torch.Generator().manual_seed(self.epoch)
                return iter(torch.randperm(len(lengths), generator=shuffle).tolist())
            return iter([i for b in nfeval_order(lengths, batch_size, self.epoch) for i in b])

    return Sampler()


def run_trainer(ckpt, data, args, lr: float, first_state: dict) -> tuple[list, list, list[float]]:
    """Returns (loss per step, classifier.out_proj.weight after each step, dev metric per epoch) of the
    Trainer as ``glue_sweep.py`` sets it up, dropout ``args.dropout``, data in ``args.order``, with the
    Trainer's own warmup (``--schedule hf``) or token-type embedding (``--no-freeze-token-type``) where
    asked."""
    from transformers import PrinterCallback, Trainer, TrainerCallback

    train, dev_set, dev_name, collator = trainer_inputs(ckpt, data, args)
    lengths = [len(x) for x in train["input_ids"]]
    losses, weights = [], []

    class ProbeTrainer(recipe_trainer_class()):
        def _get_train_sampler(self, train_dataset=None):
            if args.order == "group_by_length":
                return super()._get_train_sampler(train_dataset)
            return fixed_order_sampler(lengths, args.batch_size, args.order)

        def create_scheduler(self, num_training_steps: int, optimizer=None):
            if args.schedule == "hf":
                return Trainer.create_scheduler(self, num_training_steps, optimizer)
            return super().create_scheduler(num_training_steps, optimizer)

        def compute_loss(self, model, inputs, *a, **kw):
            out = super().compute_loss(model, inputs, *a, **kw)
            if model.training:
                losses.append(out.item())
            return out

    class Snapshot(TrainerCallback):
        def on_step_end(self, targs, state, control, model=None, **kw):
            weights.append(model.classifier.out_proj.weight.detach().clone())
            if len(weights) == 1:
                first_state.update({k: t.detach().clone() for k, t in model.state_dict().items()})

    torch.manual_seed(0)
    model = recipe_model(ckpt, data.spec, roberta_state(ckpt, data.spec, args), args.dropout)
    model.roberta.embeddings.token_type_embeddings.weight.requires_grad_(not args.freeze_token_type)
    spec = data.spec

    def compute_metrics(pred):
        return glue_metrics.compute(
            spec.name, {dev_name: pred.label_ids.tolist()}, {dev_name: pred.predictions.argmax(-1).tolist()}
        )

    targs = sweep_training_arguments(lr, "group_by_length", args)  # the sampler above sets the order
    targs.seed = args.dropout_seed  # the Trainer seeds torch with it: only the dropout masks follow
    trainer = ProbeTrainer(
        model=model,
        args=targs,
        train_dataset=train,
        eval_dataset=dev_set,
        data_collator=collator,
        compute_metrics=compute_metrics,
        callbacks=[Snapshot()],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    main = f"eval_{glue_metrics.MAIN_METRIC[spec.name]}"
    return losses, weights, [h[main] for h in trainer.state.log_history if main in h]


def prepare(task: str, args, work: str):
    """Returns (checkpoint, task data, nfeval's resolved recipe, encoded task) of the probe's subset of
    ``task`` under ``work``: what both sides train on."""
    _, data, ckpt_dir = prepare_task(task, args, work)
    ckpt = checkpoint.load(ckpt_dir)
    recipe = glue.Recipe(
        epochs=args.epochs, batch_size=args.batch_size, max_len=args.max_len,
        dropout=args.dropout, attn_dropout=args.dropout,
    ).resolve(data.spec, args.max_len, "cpu")  # fmt: skip
    return ckpt, data, recipe, finetune.encode_task(data, ckpt.tokenizer, recipe.max_len)


def compare(task: str, args) -> None:
    """Prints, per lr, both sides' per-step losses and weight gaps (or the Trainer's dev metric alone)."""
    ckpt, data, recipe, enc = prepare(task, args, tempfile.mkdtemp(prefix="glue-gap-"))
    for lr in args.lrs:
        hf_loss, hf_w, hf_dev = run_trainer(ckpt, data, args, lr, hf_first := {})
        side = f"{args.order} order, {args.schedule} warmup, token type frozen {args.freeze_token_type}"
        print(f"lr {lr:g}: Trainer ({side}) dev per epoch {[round(x, 4) for x in hf_dev]}", flush=True)
        if not args.nfeval:
            continue
        nf_loss, nf_w, nf_dev = run_nfeval(ckpt, enc, recipe, lr, nf_first := {})
        print(f"lr {lr:g}: nfeval dev per epoch {[round(x, 4) for x in nf_dev]}")
        gaps = {k: (nf_first[k] - t).abs().max().item() for k, t in hf_first.items() if k in nf_first}
        worst = sorted(gaps.items(), key=lambda kv: -kv[1])[:4]
        print("after step 1, largest weight gaps:", ", ".join(f"{k} {g:.1e}" for k, g in worst))
        print("step | nfeval loss | Trainer loss | max |out_proj.weight gap|")
        steps = len(nf_loss)
        for s in sorted({*range(min(steps, 5)), *range(0, steps, max(1, steps // 10)), steps - 1}):
            gap = (nf_w[s] - hf_w[s]).abs().max().item() if s < len(hf_w) else math.nan
            print(f"{s + 1:4d} | {nf_loss[s]:.7f} | {hf_loss[s]:.7f} | {gap:.2e}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--glue-dir", default=str(DEFAULT_GLUE))
    p.add_argument("--task", default="sst2")
    p.add_argument("--train", type=int, default=320)
    p.add_argument("--lrs", type=lambda s: [float(x) for x in s.split(",")], default=[5e-4])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--dropout-seed", type=int, default=0, help="the Trainer's seed (its dropout masks)")
    p.add_argument("--order", choices=("nfeval", "group_by_length", "random"), default="nfeval")
    p.add_argument(
        "--schedule",
        choices=("hf", "nfeval"),
        default="nfeval",
        help="the Trainer's LR schedule: its own linear warmup (step/warmup) or nfeval's ((step+1)/warmup)",
    )
    p.add_argument(
        "--freeze-token-type",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="freeze the Trainer's token-type embedding (HF trains it; nfeval has none)",
    )
    p.add_argument("--nfeval", action=argparse.BooleanOptionalAction, default=True)
    p.set_defaults(device="cpu")  # glue_sweep's TrainingArguments read it: the probe runs on the CPU
    return p.parse_args(argv)


if __name__ == "__main__":
    torch.set_num_threads(1)
    cli = parse_args()
    compare(cli.task, cli)
