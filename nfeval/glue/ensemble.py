"""Several learning-rate points of one GLUE task and seed, fine-tuned together as one batched ensemble.

Why the results equal the one-at-a-time path (``finetune.run_point``): the points of one (task, seed,
recipe) read the same batches in the same order (the batch order is seeded by the seed and the epoch,
never by the learning rate), start from the same weights, and draw the same dropout masks (each point
reseeds the global RNG with its seed when it builds its model, and the learning rate changes no shape).
So the ensemble runs the model's own forward once per batch under ``torch.func.vmap`` over the members'
stacked weights (``functional_call``) with ``randomness="same"``: each dropout mask is drawn once, with
the shape and from the RNG state of a run alone, and shared by the members, which is exactly what each
of them would draw alone. That forward is the classifier's own (``SequenceClassifier``), which runs an
encoder's last layer at the first position only, every token still a key and value (exact: only that
row feeds the head). Each member keeps its own fused ``torch.optim.AdamW`` and ``LambdaLR`` (the source
of its learning rate at every update, and what its ``state.pt`` saves) and steps them itself on its
slice of the stacked gradients (``members.step_members``): the same kernel on the same numbers as a run
alone. Members' parameters are views of the stacked tensors, so there is one copy of the weights.

The point files are the one-at-a-time path's: ``state.pt`` after every epoch but the last (the same
model, optimizer and scheduler state dicts, so either path resumes the other's points), then
``predictions.json``/``test_predictions.json`` whenever an epoch becomes the reported one, and
``result.json`` at the end. Members resuming from different epochs train as separate ensembles. A
member's ``train.wall_s`` is its share (1/K) of the ensemble's time.

``plan_units`` cuts the points into ensembles for ``--ensemble``: ``1`` one point per unit (today's path),
``N`` at most N points, ``auto`` as many as fit in ``MEMORY_FRACTION`` of the device's free memory (an
estimate from the parameter count and the activations of a batch of the longest sequence), spread over at
least ``jobs`` units. Speed on CPU: a step is matmul-bound (three quarters of its time in ``mm``/``addmm``
at this project's shapes), and a batched matmul over K members does the same work as K matmuls at the same
speed, so the ensemble saves only the per-member dropout draws (~5%) and data pipeline, while vmap adds
copies and a separate bias pass: at one thread it measured 10-30% slower per member-step than one at a time
(benchmarks/RESULTS.md, "Seven LRs as one batched ensemble"). A point alone also multiplies through oneDNN
(``engine.cpu_linear``: about twice MKL's speed on an AMD CPU), which vmap's batched products cannot, so
there the ensemble's weights match the one-at-a-time path's to the two kernels' rounding, not the same
kernel's. It is meant for GPUs, where small models one at a time underuse the device (not measured yet).
Dev evaluation runs member by member on the members' own models (views of the stack): exactly what a run
alone predicts.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import time
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from ..base.artifacts import atomic_write_json
from ..base.errors import ConfigError
from ..base.progress import progress_bar
from ..base.sweep_lock import point_lock
from ..engine.config import ModelConfig
from ..engine.tokenization import special_ids
from . import finetune
from . import metrics as glue_metrics
from . import predictions as glue_predictions
from .members import Member, clip_per_member, stack_members, step_members
from .points import RESULT, Point, finished_result, lr_key

AUTO = "auto"
MEMORY_FRACTION = 0.5  # of the free device memory that ``auto`` fills with ensemble members


# --- planning -------------------------------------------------------------------------------------------


def ensemble_setting(value: int | str) -> int | str:
    """Returns ``--ensemble`` as ``"auto"`` or a positive int; raises ConfigError otherwise."""
    if value == AUTO:
        return AUTO
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0
    if size < 1 or str(value).strip() != str(size):
        raise ConfigError(f"--ensemble {value!r}: expected auto or a positive integer (1: one at a time)")
    return size


def ensemble_arg(text: str) -> int | str:
    """argparse type of ``--ensemble``: returns ``ensemble_setting(text)``, a usage error when invalid."""
    try:
        return ensemble_setting(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--ensemble ")) from None


def member_bytes(cfg: ModelConfig, n_params: int, batch_size: int, longest: int) -> int:
    """Returns an estimate of one member's training memory in bytes: fp32 weights, gradients and two
    AdamW moments (16 bytes a parameter) plus the activations autograd keeps for a batch of
    ``batch_size`` sequences of ``longest`` tokens (per layer ~16·d + 4·d_ffn floats a token and four
    attention maps)."""
    tokens = batch_size * longest
    attention = 4 * batch_size * cfg.n_head * longest**2
    per_layer = tokens * (16 * cfg.d_model + 4 * cfg.d_ffn) + attention
    return 16 * n_params + 4 * cfg.n_layer * per_layer


def free_bytes(device: str) -> int:
    """Returns the device's free memory in bytes (CPU: MemAvailable of /proc/meminfo)."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def members_that_fit(ckpt, encoded, points: Sequence[Point], device: str, jobs: int) -> int:
    """Returns how many members fit in ``MEMORY_FRACTION`` of the device's free memory shared by ``jobs``
    processes (at least 1), for the most demanding task of ``points`` (``encoded``: {(task, max_len):
    EncodedTask})."""
    cfg = ckpt.model.cfg
    n_params = ckpt.model.num_params() + (cfg.d_model + 3) * cfg.d_model  # + the classification head
    need = max(
        member_bytes(
            cfg, n_params, p.recipe.batch_size, max(map(len, encoded[p.task, p.recipe.max_len].train[0]))
        )
        for p in points
    )
    return max(1, int(MEMORY_FRACTION * free_bytes(device) / jobs) // need)


def plan_units(
    points: Sequence[Point], setting: int | str, jobs: int, fits: int | None = None
) -> list[list[Point]]:
    """Returns ``points`` cut into units trained together: points of one (task, seed, recipe), in order,
    at most ``setting`` per unit, or under ``auto`` at most ``fits`` (members that fit in memory) and
    spread over at least ``jobs`` units."""
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        groups.setdefault((p.task, p.seed, p.recipe), []).append(p)
    units = []
    for group in groups.values():
        size = setting if setting != AUTO else max(1, min(fits or 1, math.ceil(len(group) / jobs)))
        units += [group[i : i + size] for i in range(0, len(group), size)]
    return units


# --- the members and their optimizer --------------------------------------------------------------------


def set_up_member(ckpt, enc, point: Point, dev: torch.device) -> Member:
    """Returns a point's member as ``run_point`` sets it up (restored from its state.pt if it has one)."""
    _, lr, seed, r, directory, key = point
    model, opt, sched, history, stats = finetune.set_up_point(ckpt, enc, lr, seed, r, directory, key, dev)
    cuda_rng = torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None
    return Member(point, model, opt, sched, history, stats, torch.get_rng_state(), cuda_rng)


# --- training -------------------------------------------------------------------------------------------


class Ensemble:
    """Members of one task, seed and recipe at the same epoch, trained as one vmapped model."""

    def __init__(self, enc, members: Sequence[Member], pad_id: int, dev: torch.device):
        self.enc, self.members, self.pad_id, self.dev = enc, list(members), pad_id, dev
        self.recipe = members[0].point.recipe
        self.base = copy.deepcopy(members[0].model).to("meta")
        self.buffers = dict(members[0].model.named_buffers())
        self.params = stack_members(self.members)
        self.views = [[m.model.get_parameter(name) for name in self.params] for m in self.members]

    def _scores(self, params, ids, mask):
        with (
            warnings.catch_warnings(),
            torch.autocast(self.dev.type, torch.bfloat16, enabled=self.recipe.bf16),
        ):
            # without dropout SDPA takes a fused CPU kernel that vmap runs member by member (as fast as
            # one run at a time; its math kernel, which vmap batches, is slower on CPU than that loop)
            warnings.filterwarnings("ignore", message=".*batching rule for aten::_scaled_dot_product")
            return functional_call(self.base, (params, self.buffers), (ids, mask)).float()

    def _loss(self, params, ids, mask, target):
        scores = self._scores(params, ids, mask)
        if self.enc.spec.is_regression:
            return F.mse_loss(scores.squeeze(-1), target.float())
        return F.cross_entropy(scores, target)

    def train_epoch(self, batches, bar) -> torch.Tensor:
        """Runs one epoch of updates over ``batches``; returns each member's summed training loss."""
        self.base.train()
        seqs, ys = self.enc.train
        losses_of = vmap(self._loss, in_dims=(0, None, None, None), randomness="same")
        loss_sum = torch.zeros(len(self.members), device=self.dev)
        for batch in batches:
            ids, mask = finetune.collate([seqs[i] for i in batch], self.pad_id, self.dev)
            target = torch.tensor([ys[i] for i in batch], device=self.dev)
            losses = losses_of(self.params, ids, mask, target)
            for p in self.params.values():
                p.grad = None
            losses.sum().backward()  # member k's gradient is that of its own loss
            if self.recipe.clip_norm > 0:
                clip_per_member(self.params, self.recipe.clip_norm)
            step_members(self.members, self.params, self.views)
            loss_sum += losses.detach()
            tokens = sum(len(seqs[i]) for i in batch)
            for m in self.members:
                m.stats["tokens"] += tokens
                m.stats["padded_tokens"] += mask.numel()
            bar.update(1)
        return loss_sum

    def evaluate(self) -> list[tuple[dict, dict]]:
        """Returns each member's (dev metrics, {split: predictions}), from its own model: its parameters
        are views of the stack, and evaluated one at a time they are as fast as batched ones on CPU
        (where vmap's larger tensors fall out of cache) and exactly what a run alone predicts."""
        out = []
        for m in self.members:
            preds: dict = {}
            metrics = finetune.evaluate(m.model, self.enc, self.recipe, self.pad_id, self.dev, preds)
            out.append((metrics, preds))
        return out

    def save_states(self) -> None:
        """Writes each member's state.pt as ``run_point`` writes it (tensors copied out of the stack)."""
        for m in self.members:
            state = finetune._resume_state(m.point.key, m.model, m.opt, m.sched, self.dev)
            state = _owned(state | {"history": m.history, "stats": m.stats})
            finetune._save_state(m.state_path, state)


def _owned(obj):
    """Returns ``obj`` with every tensor copied into its own storage (a view would save the whole stack)."""
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _owned(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_owned(v) for v in obj)
    return obj


def _finish_epoch(ens: Ensemble, epoch: int, loss_sums: list[float], n_batches: int, seconds: float) -> None:
    """Records the epoch in each member's history and writes its predictions when the epoch is reported."""
    r, enc = ens.recipe, ens.enc
    main = glue_metrics.MAIN_METRIC[enc.spec.name]
    for m, loss_sum, (metrics, preds) in zip(ens.members, loss_sums, ens.evaluate()):
        m.stats["updates"] += n_batches
        m.stats["wall_s"] += seconds / len(ens.members)
        m.history.append({"epoch": epoch + 1, "train_loss": loss_sum / n_batches, "metrics": metrics})
        if glue_predictions.is_reported(m.history, main, r.select):
            task, lr, seed = m.point.task, m.point.lr, m.point.seed
            glue_predictions.write(m.point.directory, task, lr, seed, epoch + 1, enc, preds)
            finetune.keep_test_predictions(m.point.directory, m.model, enc, r, ens.pad_id, ens.dev, epoch + 1)


def train_ensemble(enc, members: Sequence[Member], pad_id: int, dev: torch.device, progress: bool) -> list:
    """Trains members at the same epoch to the end of the recipe; returns their results (also written)."""
    first, r = members[0], members[0].point.recipe
    torch.set_rng_state(first.rng)
    if first.cuda_rng is not None:
        torch.cuda.set_rng_state(first.cuda_rng, dev)
    ens = Ensemble(enc, members, pad_id, dev)
    lengths = [len(s) for s in enc.train[0]]
    per_epoch = math.ceil(len(lengths) / r.batch_size)
    lrs = ",".join(lr_key(m.point.lr) for m in members)
    desc = f"{enc.spec.name} lr={lrs} seed={first.point.seed}"
    done = len(first.history)
    total, initial = per_epoch * r.epochs, done * per_epoch
    bar = progress_bar(total=total, initial=initial, enabled=progress, leave=False, desc=desc, unit="upd")
    for epoch in range(done, r.epochs):
        generator = torch.Generator().manual_seed(first.point.seed * 100_003 + epoch)
        batches = finetune.length_batches(lengths, r.batch_size, generator)
        t0 = time.perf_counter()
        loss_sums = ens.train_epoch(batches, bar).tolist()
        _finish_epoch(ens, epoch, loss_sums, len(batches), time.perf_counter() - t0)
        if epoch + 1 < r.epochs:
            ens.save_states()
    bar.close()
    results = []
    for m in members:
        lr, seed, key = m.point.lr, m.point.seed, m.point.key
        result = finetune._point_result(enc, lr, seed, r, m.history, m.stats, dev, key)
        atomic_write_json(os.path.join(m.point.directory, RESULT), result)
        if os.path.exists(m.state_path):
            os.unlink(m.state_path)
        results.append(result)
    return results


def run_ensemble(ckpt, enc, points: Sequence[Point], device: str = "cpu", progress: bool = True) -> list:
    """Fine-tunes ``points`` (one task, seed and recipe) together, each resuming from its last finished
    epoch; returns their results in the order of ``points``. Points at different epochs train as
    separate ensembles."""
    dev = torch.device(device)
    members = [set_up_member(ckpt, enc, p, dev) for p in points]
    by_epoch: dict[int, list[Member]] = {}
    for m in members:
        by_epoch.setdefault(len(m.history), []).append(m)
    pad_id = special_ids(ckpt.tokenizer).pad
    results = {}
    for group in by_epoch.values():
        for m, result in zip(group, train_ensemble(enc, group, pad_id, dev, progress)):
            results[m.point.directory] = result
    return [results[p.directory] for p in points]


def claim_and_run_ensemble(
    ckpt, enc, points: Sequence[Point], device: str, progress: bool, wait: bool
) -> tuple[list[dict], list[Point]]:
    """Returns (results, points another sweep holds): each point under its lock, read back when another
    sweep finished it meanwhile, the rest trained as one ensemble."""
    with contextlib.ExitStack() as locks:
        held = [p for p in points if locks.enter_context(point_lock(p.directory, wait))]
        deferred = [p for p in points if p not in held]
        finished = {p.directory: finished_result(p.directory, p.key) for p in held}
        todo = [p for p in held if finished[p.directory] is None]
        trained = run_ensemble(ckpt, enc, todo, device, progress) if todo else []
    results = [finished[p.directory] for p in held if finished[p.directory] is not None]
    return results + trained, deferred
