"""GLUE fine-tuning: ``nfeval glue --ckpt PATH --sweep`` fine-tunes a checkpoint on each task at every
learning rate of a grid (and ``--seeds N`` seeds), picks the best learning rate on dev, and writes

    <out>/glue/<task>/lr=<lr>/seed=<s>/result.json   one point, written atomically when it finishes
    <out>/glue.json                                   the summary (per-LR table, best LR, GLUE average)

Tasks run by separate invocations into the same ``--out`` (of the same checkpoint) share one summary.

Recipe defaults are those of fairseq's RoBERTa GLUE recipe (examples/roberta/README.glue.md): 10 epochs,
linear warmup over 6% of the updates then linear decay to 0, Adam(W) β=(0.9, 0.98), eps 1e-6, weight
decay 0.1 on every parameter, dropout and attention dropout 0.1, no gradient clipping, batch 32 for
the large tasks (MNLI, QNLI, QQP, SST-2) and 16 for the others, sequences truncated to 512 tokens
(capped at the model's ``max_seq_len``). As fairseq's ``--best-checkpoint-metric``, each point reports
the epoch with the best dev score (``--select last_epoch`` reports the last epoch instead).

The paper's seven-value grid is not public; the default grid is seven roughly log-spaced values for
base-sized models, ``DEFAULT_LRS`` = 1e-5 … 3e-4 (small CPU models usually want larger values: pass
``--lrs``). Without ``--sweep`` and ``--lrs`` each task runs once at fairseq's recipe learning rate.

Inputs are ``<s> A </s>`` or ``<s> A </s></s> B </s>`` (RoBERTa), pairs truncated longest-first. The
head pools the first token of an encoder and the last real token of a causal model
(``nfeval.model.SequenceClassifier``); STS-B is a one-output regression with MSE loss.

Speed: batches are padded only to their longest member, and drawn from length-sorted pools of 100
batches (bucketing); bf16 autocast on GPUs that support it; ``--jobs N`` runs points in N processes
(spread over the visible GPUs). Resume: finished points are skipped (their result.json records the
checkpoint fingerprint, data sha256s and recipe, and a mismatch is an error, never a silent mix); an
unfinished point restarts from its last finished epoch (``state.pt``, deleted when the point is done).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import dataclasses
import fcntl
import functools
import glob
import json
import math
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..artifacts import atomic_write_json, provenance
from ..engine import checkpoint as ckpt_lib
from ..engine import torch_files
from ..engine.config import load_json
from ..engine.model import SequenceClassifier, Transformer
from ..engine.tokenization import special_ids
from ..errors import ConfigError, DataError, MissingDataError
from . import data as glue_data
from . import metrics as glue_metrics
from . import predictions as glue_predictions
from . import submission as glue_submission

DEFAULT_LRS = (1e-5, 2e-5, 3e-5, 5e-5, 1e-4, 2e-4, 3e-4)
RESULT = "result.json"
LOCK = ".lock"  # flock'ed while a sweep computes the point
STATE = "state.pt"
SELECTIONS = ("best_epoch", "last_epoch")
DTYPES = ("auto", "bf16", "fp32")


@dataclass
class Recipe:
    """Fine-tuning hyper-parameters other than the learning rate and seed (fairseq RoBERTa GLUE defaults)."""

    epochs: int = 10
    warmup_ratio: float = 0.06
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    weight_decay: float = 0.1
    dropout: float = 0.1
    attn_dropout: float = 0.1
    clip_norm: float = 0.0  # 0: no clipping, as the recipe
    batch_size: int | None = None  # None: 32 for large tasks, 16 for small ones
    eval_batch_size: int = 64
    max_len: int = 512
    select: str = "best_epoch"
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ConfigError(f"recipe epochs={self.epochs}: expected at least 1")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"recipe batch_size={self.batch_size}: expected a positive integer")
        if self.max_len < 8:
            raise ConfigError(f"recipe max_len={self.max_len}: expected at least 8 tokens")
        if self.select not in SELECTIONS:
            raise ConfigError(f"recipe select={self.select!r}: expected one of {SELECTIONS}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"recipe dtype={self.dtype!r}: expected one of {DTYPES}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"recipe warmup_ratio={self.warmup_ratio}: expected a value in [0, 1)")

    def resolve(self, spec: glue_data.TaskSpec, max_seq_len: int, device: str) -> dict[str, Any]:
        """Returns the recipe as run on ``spec``'s task: batch size, length cap and dtype filled in."""
        r = dataclasses.asdict(self)
        r["betas"] = list(self.betas)
        r["batch_size"] = self.batch_size or (32 if spec.large else 16)
        r["max_len"] = min(self.max_len, max_seq_len)
        if self.dtype == "auto":
            cuda = device.startswith("cuda") and torch.cuda.is_available()
            r["dtype"] = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
        return r


@dataclass
class EncodedTask:
    """A task's token ids and labels per split (``dev`` keyed by dev split name)."""

    spec: glue_data.TaskSpec
    fingerprint: dict[str, str]
    train: tuple[list[list[int]], list]
    dev: dict[str, tuple[list[list[int]], list]]
    test: dict[str, tuple[list[list[int]], list[str]]] = dataclasses.field(default_factory=dict)  # ids, index
    test_fingerprint: dict[str, str] = dataclasses.field(default_factory=dict)


def lr_key(lr: float) -> str:
    """Returns the string a learning rate is stored under (Python's repr: ``1e-05``, ``0.0003``)."""
    return repr(float(lr))


def point_dir(out_dir: str, task: str, lr: float, seed: int) -> str:
    """Returns the folder of one sweep point."""
    return os.path.join(out_dir, "glue", task, f"lr={lr_key(lr)}", f"seed={seed}")


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
        data.spec, data.fingerprint(), enc(data.train), {n: enc(s) for n, s in data.dev.items()},
        {n: (encode(tokenizer, s, max_len), s.index) for n, s in data.test.items()},
        {n: s.sha256 for n, s in data.test.items()},
    )  # fmt: skip


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
    ckpt: ckpt_lib.Checkpoint, spec: glue_data.TaskSpec, recipe: Mapping, seed: int
) -> SequenceClassifier:
    """Returns the checkpoint's transformer (with the recipe's dropout) under a fresh head seeded by ``seed``."""
    torch.manual_seed(seed)
    cfg = ckpt.model.cfg.replace(dropout=recipe["dropout"], attn_dropout=recipe["attn_dropout"])
    transformer = Transformer(cfg)
    transformer.load_state_dict(ckpt.model.state_dict())
    return SequenceClassifier(transformer, spec.num_labels, recipe["dropout"]).float()


def lr_lambda(total: int, warmup: int):
    """Returns the LambdaLR factor: linear warmup over ``warmup`` updates, then linear decay to 0 at ``total``."""

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
    recipe: Mapping,
    pad_id: int,
    device: torch.device,
    preds: dict | None = None,
) -> dict[str, float]:
    """Returns the task's dev metrics for the model as it is; fills ``preds`` {split: predictions} if given."""
    labels, preds = {}, {} if preds is None else preds
    for name, (seqs, ys) in enc.dev.items():
        labels[name] = ys
        preds[name] = predict(
            model,
            seqs,
            enc.spec.is_regression,
            recipe["eval_batch_size"],
            pad_id,
            device,
            recipe["dtype"] == "bf16",
        )
    return glue_metrics.compute(enc.spec.name, labels, preds)


def _same(a: Any, b: Any) -> bool:
    return json.loads(json.dumps(a)) == json.loads(json.dumps(b))


def _mismatch(path: str, stored: Mapping, key: Mapping) -> DataError:
    diff = [k for k in key if not _same(stored.get(k), key[k])]
    return DataError(
        f"{path}: written for a different {', '.join(diff)} than this run "
        "(use another --out folder, or delete the folder to recompute)"
    )


def finished_result(directory: str, key: Mapping) -> dict | None:
    """Returns the point's result when it is finished for exactly ``key``; None if not finished.

    Raises DataError when a result exists for a different checkpoint, data or recipe, or is not JSON.
    """
    path = os.path.join(directory, RESULT)
    if not os.path.isfile(path):
        return None
    result = load_json(path, hint="delete it to recompute the point")
    if not _same(result.get("key"), key):
        raise _mismatch(path, result.get("key") or {}, key)
    return result


@contextlib.contextmanager
def point_lock(directory: str, wait: bool = False) -> Iterator[bool]:
    """Holds the point's lock file while the block runs; yields False when another process holds it.

    ``flock`` locks die with their process, so a killed sweep never leaves a stale lock behind.
    """
    os.makedirs(directory, exist_ok=True)
    fd = os.open(os.path.join(directory, LOCK), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def claim_and_run(directory: str, key: Mapping, wait: bool, run: Callable[[], dict]) -> dict | None:
    """Returns the point's result under its lock: read back when another sweep finished it meanwhile,
    else computed by ``run()``; None when another live sweep holds the lock and ``wait`` is False."""
    with point_lock(directory, wait) as held:
        if not held:
            return None
        return finished_result(directory, key) or run()


def finished_on_disk(out_dir: str, task: str, key: Mapping) -> list[dict]:
    """Returns every finished point of ``task`` under ``out_dir`` for the same checkpoint, data and recipe
    as ``key`` (any learning rate and seed): what concurrent sweeps into one folder computed together."""
    same = ("checkpoint", "data", "recipe")
    found = []
    for path in sorted(glob.glob(os.path.join(out_dir, "glue", task, "lr=*", "seed=*", RESULT))):
        result = load_json(path, hint="delete it to recompute the point")
        stored = result.get("key") or {}
        if all(_same(stored.get(k), key[k]) for k in same):
            found.append(result)
    return found


def _save_state(path: str, state: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=STATE)
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def run_point(
    ckpt: ckpt_lib.Checkpoint,
    enc: EncodedTask,
    lr: float,
    seed: int,
    recipe: Mapping,
    directory: str,
    key: Mapping,
    device: str = "cpu",
    progress: bool = True,
) -> dict:
    """Fine-tunes one (task, lr, seed) point, resuming from its last finished epoch; returns its result.

    The result (also written atomically to ``directory/result.json``) holds the selected epoch's dev
    metrics, every epoch's metrics, training statistics and the resume key.
    """
    dev = torch.device(device)
    spec, r = enc.spec, recipe
    pad_id = special_ids(ckpt.tokenizer).pad
    bf16 = r["dtype"] == "bf16"
    seqs, ys = enc.train
    lengths = [len(s) for s in seqs]
    per_epoch = math.ceil(len(seqs) / r["batch_size"])
    total = per_epoch * r["epochs"]

    model = build_classifier(ckpt, spec, r, seed).to(dev)
    opt = torch.optim.AdamW(
        model.parameters(), lr=lr, betas=tuple(r["betas"]), eps=r["eps"], weight_decay=r["weight_decay"]
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(total, int(r["warmup_ratio"] * total)))
    history: list[dict] = []
    stats = {"examples": len(seqs), "updates": 0, "tokens": 0, "padded_tokens": 0, "wall_s": 0.0}

    os.makedirs(directory, exist_ok=True)
    state_path = os.path.join(directory, STATE)
    if os.path.isfile(state_path):
        state = torch_files.load(state_path)
        if not _same(state["key"], key):
            raise _mismatch(state_path, state["key"], key)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        if dev.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"], dev)
        history, stats = state["history"], state["stats"]

    bar = tqdm(
        total=total,
        initial=len(history) * per_epoch,
        disable=not progress,
        leave=False,
        desc=f"{spec.name} lr={lr_key(lr)} seed={seed}",
        unit="upd",
    )
    for epoch in range(len(history), r["epochs"]):
        model.train()
        order = length_batches(
            lengths, r["batch_size"], torch.Generator().manual_seed(seed * 100_003 + epoch)
        )
        t0, loss_sum = time.perf_counter(), torch.zeros((), device=dev)
        for batch in order:
            ids, mask = collate([seqs[i] for i in batch], pad_id, dev)
            target = torch.tensor([ys[i] for i in batch], device=dev)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                scores = model(ids, mask).float()
            if spec.is_regression:
                loss = F.mse_loss(scores.squeeze(-1), target.float())
            else:
                loss = F.cross_entropy(scores, target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if r["clip_norm"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), r["clip_norm"])
            opt.step()
            sched.step()
            loss_sum += loss.detach()  # summed on the device: no host sync per update
            stats["tokens"] += sum(lengths[i] for i in batch)
            stats["padded_tokens"] += mask.numel()
            bar.update(1)
        stats["updates"] += len(order)
        stats["wall_s"] += time.perf_counter() - t0
        preds: dict = {}
        metrics = evaluate(model, enc, r, pad_id, dev, preds)
        history.append({"epoch": epoch + 1, "train_loss": loss_sum.item() / len(order), "metrics": metrics})
        if glue_predictions.is_reported(history, glue_metrics.MAIN_METRIC[spec.name], r["select"]):
            glue_predictions.write(directory, spec.name, lr, seed, epoch + 1, enc, preds)
            glue_submission.keep_test_predictions(directory, model, enc, r, pad_id, dev, epoch + 1)
        bar.set_postfix(
            {glue_metrics.MAIN_METRIC[spec.name]: round(metrics[glue_metrics.MAIN_METRIC[spec.name]], 4)}
        )
        if epoch + 1 < r["epochs"]:
            _save_state(
                state_path,
                {
                    "key": key,
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(),
                    "rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None,
                    "history": history,
                    "stats": stats,
                },
            )
    bar.close()

    main = glue_metrics.MAIN_METRIC[spec.name]
    chosen = history[-1] if r["select"] == "last_epoch" else max(history, key=lambda h: h["metrics"][main])
    result = {
        "task": spec.name,
        "lr": lr,
        "seed": seed,
        "metric": main,
        "metrics": chosen["metrics"],
        "epoch": chosen["epoch"],
        "select": r["select"],
        "history": history,
        "train": stats,
        "device": str(dev),
        "key": dict(key),
        "provenance": provenance(),
    }
    atomic_write_json(os.path.join(directory, RESULT), result)
    if os.path.exists(state_path):
        os.unlink(state_path)
    return result


# --- parallel points: one process per job, each caching its checkpoint and encoded tasks --------------

_WORKER: dict[str, Any] = {}


def _init_worker(devices, threads: int, trust_checkpoint: bool) -> None:
    """Binds this worker process to its device and its share of the CPU cores."""
    device = devices.get()
    _WORKER.update(device=device, trust_checkpoint=trust_checkpoint)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    torch.set_num_threads(threads)


@functools.lru_cache(maxsize=1)
def _worker_ckpt(path: str) -> ckpt_lib.Checkpoint:
    return ckpt_lib.load(path, trust_checkpoint=_WORKER.get("trust_checkpoint", False))


@functools.lru_cache(maxsize=4)
def _worker_task(ckpt_path: str, glue_dir: str | None, task: str, max_len: int) -> EncodedTask:
    return encode_task(glue_data.load(task, glue_dir), _worker_ckpt(ckpt_path).tokenizer, max_len)


def _worker_point(
    ckpt_path: str,
    glue_dir: str | None,
    task: str,
    lr: float,
    seed: int,
    recipe: dict,
    directory: str,
    key: dict,
) -> dict | None:
    ckpt = _worker_ckpt(ckpt_path)
    enc = _worker_task(ckpt_path, glue_dir, task, recipe["max_len"])
    if ckpt.fingerprint != key["checkpoint"] or enc.fingerprint != key["data"]:
        raise DataError(f"{ckpt_path} or the {task} data changed while the sweep was running")
    run = functools.partial(run_point, ckpt, enc, lr, seed, recipe, directory, key, _WORKER["device"], False)
    return claim_and_run(directory, key, wait=False, run=run)


def _job_devices(device: str, jobs: int) -> list[str]:
    if device == "cuda" and torch.cuda.is_available():
        return [f"cuda:{i % torch.cuda.device_count()}" for i in range(jobs)]
    return [device] * jobs


# --- the sweep ------------------------------------------------------------------------------------------


def _run_here(ckpt, data, points, results, device, progress, bar, wait: bool) -> list[tuple]:
    """Runs ``points`` in this process, appending to ``results``; returns the points another sweep holds."""
    encoded: dict[tuple[str, int], EncodedTask] = {}
    deferred = []
    for point in points:
        task, lr, seed, r, directory, key = point
        if (task, r["max_len"]) not in encoded:
            encoded[task, r["max_len"]] = encode_task(data[task], ckpt.tokenizer, r["max_len"])
        enc = encoded[task, r["max_len"]]
        run = functools.partial(run_point, ckpt, enc, lr, seed, r, directory, key, device, progress)
        result = claim_and_run(directory, key, wait, run)
        if result is None:
            deferred.append(point)
            continue
        results[task].append(result)
        bar.update(1)
    return deferred


def _run_in_pool(ckpt, glue_dir, points, results, device, jobs, trust_checkpoint, bar) -> list[tuple]:
    """Runs ``points`` in ``jobs`` processes (one device each); returns the points another sweep holds."""
    ctx = mp.get_context("spawn")
    devices = ctx.Queue()
    for d in _job_devices(device, jobs):
        devices.put(d)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    deferred = []
    with cf.ProcessPoolExecutor(
        jobs, mp_context=ctx, initializer=_init_worker, initargs=(devices, threads, trust_checkpoint)
    ) as pool:
        futures = {pool.submit(_worker_point, ckpt.path, glue_dir, *point): point for point in points}
        try:
            for fut in cf.as_completed(futures):
                result = fut.result()
                if result is None:
                    deferred.append(futures[fut])
                    continue
                results[futures[fut][0]].append(result)
                bar.update(1)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return deferred


def summarize(results: Mapping[str, Sequence[Mapping]]) -> dict[str, Any]:
    """Returns {task: {"metric", "best_lr", "best", "score", "per_lr"}} from each task's point results.

    Per-LR values are means over seeds (with sample std when there are several); the best LR is the one
    with the highest mean main metric on dev (the smaller LR on ties); a task's score is the mean of its
    metrics at the best LR (the GLUE benchmark's task score).
    """
    tasks: dict[str, Any] = {}
    for task, points in results.items():
        main = glue_metrics.MAIN_METRIC[task]
        by_lr: dict[float, list[Mapping]] = {}
        for p in sorted(points, key=lambda p: (p["lr"], p["seed"])):
            by_lr.setdefault(p["lr"], []).append(p["metrics"])
        per_lr = {}
        for lr, runs in by_lr.items():
            row: dict[str, Any] = {m: statistics.fmean(run[m] for run in runs) for m in runs[0]}
            row["seeds"] = len(runs)
            if len(runs) > 1:
                row["std"] = {m: statistics.stdev(run[m] for run in runs) for m in runs[0]}
            per_lr[lr_key(lr)] = row
        best_lr = max(by_lr, key=lambda lr: (per_lr[lr_key(lr)][main], -lr))
        best = {m: v for m, v in per_lr[lr_key(best_lr)].items() if m not in ("seeds", "std")}
        tasks[task] = {
            "metric": main,
            "best_lr": best_lr,
            "best": best,
            "score": glue_metrics.task_score(task, best),
            "per_lr": per_lr,
        }
    return tasks


def format_table(summary: Mapping[str, Any]) -> str:
    """Returns the summary as a text table: main metric per LR (best marked *), best LR, score, GLUE average."""
    tasks = summary["tasks"]
    lrs = sorted({float(k) for t in tasks.values() for k in t["per_lr"]})
    head = (
        f"{'task':<6} {'metric':<11}"
        + "".join(f"{lr_key(lr):>10}" for lr in lrs)
        + f"{'best_lr':>10}{'score':>8}"
    )
    lines = [head, "-" * len(head)]
    for task, t in tasks.items():
        cells = ""
        for lr in lrs:
            row = t["per_lr"].get(lr_key(lr))
            mark = "*" if lr == t["best_lr"] else " "
            cells += f"{row[t['metric']]:>9.4f}{mark}" if row else f"{'-':>10}"
        lines.append(f"{task:<6} {t['metric']:<11}{cells}{lr_key(t['best_lr']):>10}{t['score']:>8.4f}")
        extra = {m: v for m, v in t["best"].items() if m != t["metric"]}
        if extra:
            lines.append(f"{'':<6} at best lr: " + ", ".join(f"{m}={v:.4f}" for m, v in extra.items()))
    lines.append(f"GLUE average over {len(tasks)} task(s): {summary['glue_average']:.4f}")
    return "\n".join(lines)


def sweep(
    ckpt: str | ckpt_lib.Checkpoint,
    tasks: Sequence[str],
    lrs: Sequence[float] | Mapping[str, Sequence[float]] | None = None,
    seeds: int = 1,
    out_dir: str = "results",
    glue_dir: str | None = None,
    recipe: Recipe | None = None,
    jobs: int = 1,
    device: str | None = None,
    progress: bool = True,
    trust_checkpoint: bool = False,
) -> dict[str, Any]:
    """Fine-tunes every (task, lr, seed) point not yet finished, writes ``<out_dir>/glue.json``; returns it.

    ``lrs``: one grid for all tasks, a grid per task, or None for ``DEFAULT_LRS``. All data is read and
    checked before any training starts. The summary's GLUE average is the mean of the task scores of
    this sweep's tasks and of those kept from an earlier summary of the same checkpoint in ``out_dir``.
    Concurrent sweeps into one ``out_dir`` never compute a point twice (a per-point lock: a point held by
    another sweep is waited for at the end), and each task's summary covers every finished point on disk
    for the same checkpoint, data and recipe.
    """
    recipe = recipe or Recipe()
    if seeds < 1:
        raise ConfigError(f"--seeds {seeds}: expected at least 1")
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: expected at least 1")
    tasks = list(dict.fromkeys(tasks))
    if not tasks:
        raise ConfigError("--tasks: no GLUE task given")
    specs = [glue_data.spec(t) for t in tasks]  # unknown task names fail here, before any loading
    grids = {
        t: list(
            dict.fromkeys(float(x) for x in (lrs.get(t) if isinstance(lrs, Mapping) else lrs) or DEFAULT_LRS)
        )
        for t in tasks
    }
    for t, grid in grids.items():
        if any(not (lr > 0) for lr in grid):
            raise ConfigError(f"--lrs: {t}: learning rates must be positive, got {grid}")
    if isinstance(ckpt, str):
        ckpt = ckpt_lib.load(ckpt, trust_checkpoint=trust_checkpoint)
    if ckpt.tokenizer is None:
        raise MissingDataError(f"{ckpt.path}: no tokenizer.json (GLUE needs the checkpoint's tokenizer)")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    data = {t: glue_data.load(t, glue_dir) for t in tasks}

    resolved = {s.name: recipe.resolve(s, ckpt.config.max_seq_len, device) for s in specs}
    points, results = [], {t: [] for t in tasks}
    for t in tasks:
        for lr in grids[t]:
            for seed in range(seeds):
                key = {
                    "task": t,
                    "lr": lr,
                    "seed": seed,
                    "checkpoint": ckpt.fingerprint,
                    "data": data[t].fingerprint(),
                    "recipe": resolved[t],
                }
                directory = point_dir(out_dir, t, lr, seed)
                done = finished_result(directory, key)
                if done is not None:
                    results[t].append(done)
                else:
                    points.append((t, lr, seed, resolved[t], directory, key))
    total = sum(len(v) for v in results.values()) + len(points)
    print(
        f"nfeval glue: {total} point(s), {total - len(points)} already finished, {len(points)} to run",
        flush=True,
    )

    bar = tqdm(total=len(points), disable=not progress or not points, desc="glue sweep", unit="point")
    if jobs == 1 or len(points) <= 1:
        deferred = _run_here(ckpt, data, points, results, device, progress, bar, wait=False)
    else:
        deferred = _run_in_pool(ckpt, glue_dir, points, results, device, jobs, trust_checkpoint, bar)
    if deferred:
        print(f"nfeval glue: waiting for {len(deferred)} point(s) another sweep is running", flush=True)
        _run_here(ckpt, data, deferred, results, device, progress, bar, wait=True)
    bar.close()
    for t in tasks:  # points finished by concurrent sweeps into the same folder count too
        seen = {(p["lr"], p["seed"]) for p in results[t]}
        any_key = {"checkpoint": ckpt.fingerprint, "data": data[t].fingerprint(), "recipe": resolved[t]}
        results[t] += [p for p in finished_on_disk(out_dir, t, any_key) if (p["lr"], p["seed"]) not in seen]
        grids[t] = sorted({p["lr"] for p in results[t]})

    path = os.path.join(out_dir, "glue.json")
    source = os.path.abspath(glue_dir) if glue_dir else glue_data.HUB_DATASET
    tasks_out = summarize(results)
    recipes = {t: {**resolved[t], "lrs": grids[t], "seeds": seeds} for t in tasks}
    data_meta = {t: {"source": source, "sha256": d.fingerprint()} for t, d in data.items()}
    earlier = earlier_summary(path, ckpt.fingerprint)
    for t in earlier.get("tasks", {}):
        if t not in tasks_out:
            tasks_out[t] = earlier["tasks"][t]
            recipes[t] = earlier["nfeval"]["recipe"][t]
            data_meta[t] = earlier["nfeval"]["data"][t]
    order = sorted(tasks_out, key=glue_data.TASKS.index)
    out = {
        "nfeval": {
            "provenance": provenance(),
            "model": ckpt_lib.summary(ckpt),
            "recipe": {t: recipes[t] for t in order},
            "data": {t: data_meta[t] for t in order},
        },
        "tasks": {t: tasks_out[t] for t in order},
        "glue_average": glue_metrics.glue_average({t: tasks_out[t]["score"] for t in order}),
    }
    atomic_write_json(path, out)
    return out


def earlier_summary(path: str, fingerprint: str) -> dict:
    """Returns the glue.json at ``path`` when it summarises the same checkpoint, else {}.

    Its tasks that a sweep does not rerun are kept, so tasks run by separate invocations (say MNLI on
    one GPU, the small tasks on another) end up in one summary; each task records its own recipe and grid.
    """
    if not os.path.isfile(path):
        return {}
    summary = load_json(path, hint="delete it to rebuild the summary")
    return summary if summary.get("nfeval", {}).get("model", {}).get("fingerprint") == fingerprint else {}


# --- command line -----------------------------------------------------------------------------------------


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--lrs {text!r}: expected comma-separated numbers such as 1e-5,3e-5"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("--lrs: expected at least one learning rate")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds the ``nfeval glue`` options."""
    p.add_argument("--ckpt", required=True, help="nfeval run or checkpoint directory (masked or causal LM)")
    p.add_argument(
        "--glue-dir",
        help="folder with the GLUE distribution TSVs (CoLA/, SST-2/, ...); "
        f"default: the hub copy {glue_data.HUB_DATASET}",
    )
    p.add_argument(
        "--tasks",
        default=",".join(glue_data.TASKS),
        help=f"comma-separated tasks (default all: {','.join(glue_data.TASKS)})",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="sweep the learning-rate grid (default grid: "
        + ", ".join(lr_key(x) for x in DEFAULT_LRS)
        + "); without it: fairseq's recipe LR per task",
    )
    p.add_argument("--lrs", type=_floats, help="comma-separated learning rates (overrides the grid)")
    p.add_argument("--seeds", type=int, default=1, help="seeds per learning rate: 0 .. N-1 (default 1)")
    p.add_argument("--epochs", type=int, default=Recipe.epochs, help=f"default {Recipe.epochs}")
    p.add_argument("--batch-size", type=int, help="default: 32 for MNLI/QNLI/QQP/SST-2, 16 for the others")
    p.add_argument(
        "--eval-batch-size",
        type=int,
        default=Recipe.eval_batch_size,
        help=f"default {Recipe.eval_batch_size}",
    )
    p.add_argument(
        "--max-len", type=int, default=Recipe.max_len, help="max tokens per input (capped at the model's)"
    )
    p.add_argument(
        "--warmup-ratio",
        type=float,
        default=Recipe.warmup_ratio,
        help=f"share of updates with linear warmup (default {Recipe.warmup_ratio})",
    )
    p.add_argument(
        "--weight-decay", type=float, default=Recipe.weight_decay, help=f"default {Recipe.weight_decay}"
    )
    p.add_argument(
        "--dropout",
        type=float,
        default=Recipe.dropout,
        help=f"dropout and attention dropout (default {Recipe.dropout})",
    )
    p.add_argument(
        "--select",
        choices=SELECTIONS,
        default=Recipe.select,
        help="which epoch a point reports (default: the best on dev, as fairseq)",
    )
    p.add_argument("--dtype", choices=DTYPES, default=Recipe.dtype, help="auto: bf16 on GPUs that support it")
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    p.add_argument("--jobs", type=int, default=1, help="points run in parallel processes (spread over GPUs)")
    p.add_argument("--out", default="results", help="results folder (default: results)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--trust-checkpoint", action="store_true", help=torch_files.TRUST_HELP)
    p.add_argument(
        "--predict-test",
        action="store_true",
        help="write the GLUE server's submission files (OUT/glue/submission/*.tsv) from each task's "
        "best-LR model; needs --glue-dir with the test files",
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval glue``: the sweep, then prints the table and where the summary is."""
    tasks = [t.strip().lower() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        glue_data.spec(t)
    lrs = args.lrs if (args.lrs or args.sweep) else {t: [glue_data.SPECS[t].fairseq_lr] for t in tasks}
    recipe = Recipe(
        epochs=args.epochs,
        batch_size=args.batch_size,
        eval_batch_size=args.eval_batch_size,
        max_len=args.max_len,
        warmup_ratio=args.warmup_ratio,
        weight_decay=args.weight_decay,
        dropout=args.dropout,
        attn_dropout=args.dropout,
        select=args.select,
        dtype=args.dtype,
    )
    if args.predict_test:
        glue_submission.check_test_files(tasks, args.glue_dir)
    summary = sweep(
        args.ckpt,
        tasks,
        lrs,
        seeds=args.seeds,
        out_dir=args.out,
        glue_dir=args.glue_dir,
        recipe=recipe,
        jobs=args.jobs,
        device=args.device,
        progress=not args.no_progress,
        trust_checkpoint=args.trust_checkpoint,
    )
    print(format_table(summary))
    print(f"summary: {os.path.join(args.out, 'glue.json')}")
    if args.predict_test:
        print(f"submission: {glue_submission.write_submission(args.out, summary, tasks, args.glue_dir)}")
    return 0
