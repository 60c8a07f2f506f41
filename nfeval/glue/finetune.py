"""One GLUE fine-tuning point (task, learning rate, seed): encoding a task's splits RoBERTa-style, batching
by length, training the classifier with fairseq's recipe, evaluating on dev each epoch, and the
point's resumable state (``state.pt`` after each finished epoch, deleted when the point is done).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..base.artifacts import atomic_write_json, provenance
from ..base.progress import progress_bar
from ..base.sweep_points import lr_key
from ..engine.checkpoints import checkpoint as ckpt_lib
from ..engine.checkpoints import torch_files
from ..engine.fast import cpu_linear, denormals
from ..engine.model.model import SequenceClassifier, Transformer
from ..engine.text.tokenization import special_ids
from . import data as glue_data
from . import metrics as glue_metrics
from . import predictions as glue_predictions
from .points import RESULT, mismatch, same
from .recipe import ResolvedRecipe

STATE = "state.pt"


@dataclass
class EncodedTask:
    """A task's token ids and labels per split (``dev`` keyed by dev split name)."""

    spec: glue_data.TaskSpec
    fingerprint: dict[str, str]
    train: tuple[list[list[int]], list]
    dev: dict[str, tuple[list[list[int]], list]]
    test: dict[str, tuple[list[list[int]], list[str]]] = dataclasses.field(default_factory=dict)  # ids, index
    test_fingerprint: dict[str, str] = dataclasses.field(default_factory=dict)


def encode(tokenizer, split: glue_data.Split, max_len: int) -> list[list[int]]:
    """Returns RoBERTa-style inputs ``<s> A </s>`` / ``<s> A </s></s> B </s>``, at most ``max_len`` tokens.

    Pairs are truncated longest-first (a token at a time from the longer text), as Hugging Face does.
    """
    sp = special_ids(tokenizer)
    a = [e.ids for e in tokenizer.encode_batch(split.text_a, add_special_tokens=False)]
    if split.text_b is None:
        return [[sp.bos, *x[: max_len - 2], sp.eos] for x in a]
    b = [e.ids for e in tokenizer.encode_batch(split.text_b, add_special_tokens=False)]
    budget, out = max_len - 4, []
    for x, y in zip(a, b):
        la, lb = len(x), len(y)
        if la + lb > budget:
            short = min(la, lb, budget // 2)
            la, lb = (budget - short, short) if la >= lb else (short, budget - short)
        out.append([sp.bos, *x[:la], sp.eos, sp.eos, *y[:lb], sp.eos])
    return out


def encode_task(data: glue_data.TaskData, tokenizer, max_len: int) -> EncodedTask:
    """Returns every split of ``data`` encoded for a model."""

    def enc(split: glue_data.Split):
        return encode(tokenizer, split, max_len), split.labels

    return EncodedTask(
        data.spec,
        data.fingerprint(),
        enc(data.train),
        {n: enc(s) for n, s in data.dev.items()},
        {n: (encode(tokenizer, s, max_len), s.index) for n, s in data.test.items()},
        {n: s.sha256 for n, s in data.test.items()},
    )


def length_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator | None = None, pool: int = 100
) -> list[list[int]]:
    """Returns batches of example indices grouped by length.

    With a generator (training): a random permutation, sorted by length within pools of ``pool``
    batches, cut into batches, batch order shuffled. Without (evaluation): sorted by length.
    """
    n = len(lengths)
    if generator is None:
        order = sorted(range(n), key=lengths.__getitem__)
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    perm, chunk, batches = torch.randperm(n, generator=generator).tolist(), batch_size * pool, []
    for start in range(0, n, chunk):
        part = sorted(perm[start : start + chunk], key=lengths.__getitem__)
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def collate(
    seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (ids, padding_mask) right-padded to the longest sequence; the mask is True at real tokens."""
    width = max(len(s) for s in seqs)
    ids = torch.tensor([[*s, *[pad_id] * (width - len(s))] for s in seqs], dtype=torch.long)
    mask = torch.tensor([[True] * len(s) + [False] * (width - len(s)) for s in seqs])
    return ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)


def build_classifier(
    ckpt: ckpt_lib.Checkpoint, spec: glue_data.TaskSpec, recipe: ResolvedRecipe, seed: int
) -> SequenceClassifier:
    """Returns the checkpoint's transformer (with the recipe's dropout) under a fresh head seeded by
    ``seed``, with the CPU kernel (``cpu_linear.convert``)."""
    torch.manual_seed(seed)
    cfg = ckpt.model.cfg.replace(dropout=recipe.dropout, attn_dropout=recipe.attn_dropout)
    transformer = Transformer(cfg)
    transformer.load_state_dict(ckpt.model.state_dict())
    return cpu_linear.convert(SequenceClassifier(transformer, spec.num_labels, recipe.dropout).float())


def lr_lambda(total: int, warmup: int):
    """Returns the LambdaLR factor: linear warmup over ``warmup`` updates, then linear decay to 0 at
    ``total``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


@torch.no_grad()
def predict(
    model: SequenceClassifier,
    seqs: list[list[int]],
    regression: bool,
    batch_size: int,
    pad_id: int,
    device: torch.device,
    bf16: bool,
) -> list:
    """Returns one prediction per sequence (class index, or score for regression), in input order."""
    model.eval()
    preds: list = [None] * len(seqs)
    for batch in length_batches([len(s) for s in seqs], batch_size):
        ids, mask = collate([seqs[i] for i in batch], pad_id, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            scores = model(ids, mask).float()
        out = scores.squeeze(-1) if regression else scores.argmax(-1)
        for i, p in zip(batch, out.tolist()):
            preds[i] = p
    return preds


def evaluate(
    model: SequenceClassifier,
    enc: EncodedTask,
    recipe: ResolvedRecipe,
    pad_id: int,
    device: torch.device,
    preds: dict | None = None,
) -> dict[str, float]:
    """Returns the task's dev metrics for the model as it is; fills ``preds`` {split: predictions} if
    given."""
    labels, preds = {}, {} if preds is None else preds
    for name, (seqs, ys) in enc.dev.items():
        labels[name] = ys
        preds[name] = predict(
            model,
            seqs,
            enc.spec.is_regression,
            recipe.eval_batch_size,
            pad_id,
            device,
            recipe.bf16,
        )
    return glue_metrics.compute(enc.spec.name, labels, preds)


def _resume_state(key: Mapping, model, opt, sched, dev: torch.device) -> dict:
    """Returns what resuming after this epoch needs: the resume key, model, optimizer, scheduler and RNGs."""
    cuda_rng = torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None
    state = {"key": key, "model": model.state_dict(), "optimizer": opt.state_dict()}
    return state | {"scheduler": sched.state_dict(), "rng": torch.get_rng_state(), "cuda_rng": cuda_rng}


def _save_state(path: str, state: dict) -> None:
    torch_files.save(state, path)  # a full disk: one line naming the file, as every writer


def _restore_state(path: str, key: Mapping, model, opt, sched, dev: torch.device) -> tuple[list, dict] | None:
    """Loads a point's saved state into model, optimizer, scheduler and RNGs; returns (history, stats),
    or None when there is no saved state. Raises DataError when it was saved for another key."""
    if not os.path.isfile(path):
        return None
    state = torch_files.load(path)
    if not same(state["key"], key):
        raise mismatch(path, state["key"], key)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    if dev.type == "cuda" and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(state["cuda_rng"], dev)
    return state["history"], state["stats"]


def _train_epoch(
    model, opt, sched, enc: EncodedTask, recipe: ResolvedRecipe, batches, pad_id, dev, stats, bar
):
    """Runs one epoch of updates over ``batches``; returns the summed training loss (on the device)."""
    model.train()
    seqs, ys = enc.train
    loss_sum = torch.zeros((), device=dev)
    for batch in batches:
        ids, mask = collate([seqs[i] for i in batch], pad_id, dev)
        target = torch.tensor([ys[i] for i in batch], device=dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=recipe.bf16):
            scores = model(ids, mask).float()
        if enc.spec.is_regression:
            loss = F.mse_loss(scores.squeeze(-1), target.float())
        else:
            loss = F.cross_entropy(scores, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_norm)
        opt.step()
        model.transformer.normalize_weights()  # nGPT's weights back on the hypersphere; else a no-op
        sched.step()
        loss_sum += loss.detach()  # summed on the device: no host sync per update
        stats["tokens"] += sum(len(seqs[i]) for i in batch)
        stats["padded_tokens"] += mask.numel()
        bar.update(1)
    return loss_sum


def diverged(history: Sequence[Mapping]) -> bool:
    """Returns whether a point's training loss became non-finite (its ``train_loss`` stored as None)."""
    return any(h["train_loss"] is None for h in history)


def _point_result(enc: EncodedTask, lr, seed, recipe: ResolvedRecipe, history, stats, dev, key) -> dict:
    """Returns the point's result: the selected epoch's dev metrics, every epoch's, training stats, and
    whether it diverged (a non-finite training loss: the sweep never picks its learning rate)."""
    main = glue_metrics.MAIN_METRIC[enc.spec.name]
    last = recipe.select == "last_epoch"
    chosen = history[-1] if last else max(history, key=lambda h: h["metrics"][main])
    return {
        "task": enc.spec.name,
        "lr": lr,
        "seed": seed,
        "metric": main,
        "metrics": chosen["metrics"],
        "epoch": chosen["epoch"],
        "select": recipe.select,
        "diverged": diverged(history),
        "history": history,
        "train": stats,
        "device": str(dev),
        "cpu_flush_denormals": denormals.flushing() if dev.type == "cpu" else None,
        "key": dict(key),
        "provenance": provenance(),
    }


def set_up_point(ckpt, enc: EncodedTask, lr, seed, r: ResolvedRecipe, directory, key, dev: torch.device):
    """Returns (model, AdamW, LambdaLR schedule, history, stats) of a point as it starts, or as it
    resumes from its ``state.pt`` (the RNGs restored too)."""
    total = math.ceil(len(enc.train[0]) / r.batch_size) * r.epochs
    model = build_classifier(ckpt, enc.spec, r, seed).to(dev)
    opt = torch.optim.AdamW(
        model.parameters(), lr=lr, betas=r.betas, eps=r.eps, weight_decay=r.weight_decay, fused=True
    )  # fused: one kernel over every parameter, not a dozen ops per parameter
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(total, int(r.warmup_ratio * total)))
    os.makedirs(directory, exist_ok=True)
    stats = {"examples": len(enc.train[0]), "updates": 0, "tokens": 0, "padded_tokens": 0, "wall_s": 0.0}
    restored = _restore_state(os.path.join(directory, STATE), key, model, opt, sched, dev)
    history, stats = restored or ([], stats)
    return model, opt, sched, history, stats


def run_point(
    ckpt: ckpt_lib.Checkpoint,
    enc: EncodedTask,
    lr: float,
    seed: int,
    recipe: ResolvedRecipe,
    directory: str,
    key: Mapping,
    device: str = "cpu",
    progress: bool = True,
    until: int | None = None,
) -> dict | None:
    """Fine-tunes one (task, lr, seed) point, resuming from its last finished epoch; returns its result.

    The result (also written atomically to ``directory/result.json``) holds the selected epoch's dev
    metrics, every epoch's metrics, training statistics and the resume key. With ``until`` below the
    recipe's epochs, stops after that many finished epochs, leaving ``state.pt`` for a later call to
    resume from, and returns None. An epoch whose training loss is not finite ends the point: it is
    recorded as diverged (that epoch's ``train_loss`` None) and finished, since no later epoch recovers.
    """
    dev, r, main = torch.device(device), recipe, glue_metrics.MAIN_METRIC[enc.spec.name]
    pad_id = special_ids(ckpt.tokenizer).pad
    lengths = [len(s) for s in enc.train[0]]
    per_epoch = math.ceil(len(lengths) / r.batch_size)
    total = per_epoch * r.epochs

    model, opt, sched, history, stats = set_up_point(ckpt, enc, lr, seed, r, directory, key, dev)
    state_path = os.path.join(directory, STATE)

    desc = f"{enc.spec.name} lr={lr_key(lr)} seed={seed}"
    initial = len(history) * per_epoch
    bar = progress_bar(total=total, initial=initial, enabled=progress, leave=False, desc=desc, unit="upd")
    stop = r.epochs if until is None else min(until, r.epochs)
    for epoch in range(len(history), stop):
        batches = length_batches(lengths, r.batch_size, torch.Generator().manual_seed(seed * 100_003 + epoch))
        t0 = time.perf_counter()
        loss_sum = _train_epoch(model, opt, sched, enc, r, batches, pad_id, dev, stats, bar)
        stats["updates"] += len(batches)
        stats["wall_s"] += time.perf_counter() - t0
        loss = loss_sum.item() / len(batches)
        metrics = _record_epoch(model, enc, r, pad_id, dev, (directory, lr, seed), loss, history)
        bar.set_postfix({main: round(metrics[main], 4)})
        if diverged(history):
            break
        if epoch + 1 < r.epochs:
            _save_state(
                state_path, _resume_state(key, model, opt, sched, dev) | {"history": history, "stats": stats}
            )
    bar.close()
    if len(history) < r.epochs and not diverged(history):
        return None

    result = _point_result(enc, lr, seed, r, history, stats, dev, key)
    atomic_write_json(os.path.join(directory, RESULT), result)
    if os.path.exists(state_path):
        os.unlink(state_path)
    return result


def _record_epoch(model, enc: EncodedTask, r: ResolvedRecipe, pad_id: int, dev, point, loss, history) -> dict:
    """Evaluates ``model`` after an epoch of mean training ``loss``, appends the epoch's record to
    ``history`` (``train_loss`` None when not finite) and, when the epoch is the one the point reports,
    writes its predictions into the point's folder (``point``: directory, lr, seed); returns its dev
    metrics."""
    directory, lr, seed = point
    preds: dict = {}
    metrics = evaluate(model, enc, r, pad_id, dev, preds)
    epoch = len(history) + 1
    history.append({"epoch": epoch, "train_loss": loss if math.isfinite(loss) else None, "metrics": metrics})
    if glue_predictions.is_reported(history, glue_metrics.MAIN_METRIC[enc.spec.name], r.select):
        glue_predictions.write(directory, enc.spec.name, lr, seed, epoch, enc, preds)
        keep_test_predictions(directory, model, enc, r, pad_id, dev, epoch)
    return metrics


def keep_test_predictions(directory: str, model, enc, recipe, pad_id: int, device, epoch: int) -> None:
    """Writes the test predictions of the point's reported epoch (``model`` as it is now) to
    ``directory/test_predictions.json``; does nothing when the task has no test split."""
    if not enc.test:
        return
    splits = {}
    for name, (seqs, index) in enc.test.items():
        bf16 = recipe.dtype == "bf16"
        preds = predict(model, seqs, enc.spec.is_regression, recipe.eval_batch_size, pad_id, device, bf16)
        splits[name] = {"index": list(index), "preds": preds}
    atomic_write_json(
        os.path.join(directory, glue_predictions.TEST_PREDICTIONS),
        {"task": enc.spec.name, "epoch": epoch, "data": enc.test_fingerprint, "splits": splits,
         "nfeval": {"provenance": provenance()}},
    )  # fmt: skip
