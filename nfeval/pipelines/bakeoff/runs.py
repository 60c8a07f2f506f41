"""The work of a bakeoff, each stage resumable: the LR tune (``nfeval tune``) per candidate, the paired
step-time ratios that fix the equal-time budgets, the N-seed training runs, zero-shot scoring and the
rising-LR stability test.

Layout of ``--out``: ``tune/<name>/tune.json``, ``step_ratios.json``, ``runs/<name>/seed<k>/`` (an
``nfeval train`` run dir, finished when ``seed<k>.json`` exists: written last, so a rerun skips it and a
killed run resumes from its newest checkpoint), ``zeroshot/<name>-seed<k>*.json``, ``stability/<name>.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ...analysis.runs import StabilityOptions
from ...base.artifacts import atomic_write_json
from ...base.jsonio import load_json
from ...engine.model.config import preset
from ...engine.training.grad_stats import average_rows, read_grad_stats
from ...engine.training.own_recipes import OWN_RECIPES
from ...engine.training.train_config import TrainConfig, clip_window, leave_to_scheme, own_recipe
from ...launch import cluster
from ...launch.jobs import LaunchPoint
from ...model_adapters.config import ScoringConfig
from ...tune import sweep
from ...tune.results import with_tuned_lr
from ...zeroshot import evaluate as zeroshot
from ...zeroshot.config import ZeroShotConfig
from ...zeroshot.items import scored
from .. import context, lr_band, runner, runs, trained_gate
from ..analyses import analyze, stability_settings
from .candidates import OWN, Candidate


@dataclass(kw_only=True)
class Context(context.RunContext):
    """The run context (``context.RunContext``; ``budget`` is the baseline's), with the candidates
    (baseline first), the tune's LR grid and budget, the seed plan and the clipping of every run."""

    candidates: list[Candidate]
    lrs: tuple[float, ...]
    tune_budget: str
    seed_counts: dict[str, int] = field(default_factory=dict)  # name -> seeds, where more than ``seeds``
    clip_grad: float = 0.0  # gradient-norm clipping of every tune point and run (0: none)
    # (zero-shot data folder, tasks): each run at its tuned LR is scored as soon as it has trained
    zeroshot: tuple[str, list[str]] | None = None

    @property
    def baseline(self) -> Candidate:
        return self.candidates[0]

    def seeds_of(self, c: Candidate) -> list[int]:
        """Returns the seeds ``c`` trains: ``seed_values``, or more where the seed plan gave it more."""
        return list(range(1, max(self.seeds, self.seed_counts.get(c.name, 0)) + 1))


log = functools.partial(context.log, Context.pipeline)


def tune_file(ctx: Context, c: Candidate) -> str:
    return os.path.join(ctx.out, "tune", c.name, "tune.json")


def run_dir(ctx: Context, c: Candidate, seed: int, lr: float | None = None) -> str:
    """Returns the folder of ``c``'s run at ``seed``: at its tuned LR, or at ``lr`` of its band."""
    return context.run_dir(ctx.out, c.name, seed, lr)


def tune_entry(ctx: Context, c: Candidate) -> dict[str, Any]:
    """Returns ``c``'s tune (tune.json's entry of its preset)."""
    return load_json(tune_file(ctx, c))["presets"][c.preset(ctx.scale.size)]


def band_lrs(ctx: Context, c: Candidate) -> list[float]:
    """Returns the other LRs of ``c``'s band (``lr_band.entry_band``): its runs also train at these, on
    the judged seeds."""
    return lr_band.entry_band(tune_entry(ctx, c), ctx.unigram_ppl)


def band_outside(ctx: Context, c: Candidate) -> dict[float, str]:
    """Returns the neighbours of ``c``'s best LR not in its band, and why (``lr_band.failed_neighbours``)."""
    return lr_band.failed_neighbours(tune_entry(ctx, c), ctx.unigram_ppl)


def run_budget(ctx: Context, c: Candidate) -> dict[str, float]:
    """Returns the candidate's budget: the baseline's S steps ÷ its paired step-time ratio once measured
    (equal time, each on its complete schedule), else the folder's budget as it is."""
    return runs.equal_time_budget(ctx.budget, ctx.step_ratios.get(c.name))


def train_config(
    ctx: Context, c: Candidate, seed: int, tuned: bool = True, lr: float | None = None
) -> TrainConfig:
    """Returns the TrainConfig of ``c`` at ``seed``: the recipe, the candidate's overrides, its
    equal-time budget, and its tuned LR when ``tuned`` (its tune.json must exist then), or ``lr``, another
    LR of its tune's band."""
    s = ctx.scale
    cfg = context.scale_train_config(  # the scale's grad_stats too: the report's gradient ratio by depth
        ctx,
        preset=c.preset(s.size),
        model={**s.model, **c.overrides},
        objective="clm",
        warmup=s.warmup,
        seed=seed,
        budget=run_budget(ctx, c),
        clip_grad=ctx.clip_grad,
    )
    cfg = leave_to_scheme(cfg)  # a scheme's own recipe fields (nGPT: no weight decay, no warm-up)
    if c.own_recipe:  # its paper's init, warm-up, clipping and optimizer (engine.training.own_recipes)
        cfg = own_recipe(cfg)
    if not tuned:
        return cfg

    return context.at_band_lr(with_tuned_lr(cfg, tune_file(ctx, c)), lr)


EXTENSIONS = 3  # LRs a candidate's tune may add past an edge of the grid before it stops (and warns)


def run_tunes(ctx: Context) -> None:
    """Tunes each candidate's LR over ``ctx.lrs`` at ``ctx.tune_budget`` (``nfeval tune``, one folder per
    candidate, since candidates sharing a preset differ in their overrides); resumes point by point.

    A best LR on an edge of the grid is not bracketed: that candidate's grid grows one LR past that edge
    (``lr_past_edge``), up to ``EXTENSIONS`` times, so every best LR has a worse one on both sides. A
    grid whose best LR did not train (``trained_gate.best_trained``) grows one LR below its bottom
    instead, within the same ``EXTENSIONS``: its "best" is noise among runs that all learned nothing, and
    a scheme that trains at no LR tried usually needs a lower one. One that trains at none of them is
    reported as such. Each best LR's band neighbours are tuned too (``lr_band.tune_band``); under
    ``--reread`` nothing is trained, the finished points are summarised."""
    for c in ctx.candidates:
        base = train_config(ctx, c, seed=lr_band.TUNE_SEED_BASE, tuned=False)  # seeds 101 …: never judged

        def tune_at(lrs: list[float], extra: dict[str, list[float]], base=base, c=c) -> dict[str, Any]:
            return sweep.tune(
                base,
                [base.preset],
                lrs,
                ctx.tune_budget,
                os.path.dirname(tune_file(ctx, c)),
                seeds=ctx.tune_seeds,
                jobs=ctx.jobs,
                progress=ctx.progress,
                launch=ctx.launch,
                extra=extra,
                report_only=ctx.reread,
            )

        lrs, tuned = list(ctx.lrs), []
        for _ in range(EXTENSIONS + 1):
            log(f"tuning {c.name} ({c.preset(ctx.scale.size)}) over {lrs}, {ctx.tune_budget}")
            summary, tuned = tune_at(lrs, {}), lrs
            if summary["missing"]:
                break
            entry = summary["presets"][base.preset]
            # nothing trained: look lower, where training is stabler (a "best" among untrained runs is noise)
            edge = entry["best_lr"] if trained_gate.best_trained(entry, ctx.unigram_ppl) else min(lrs)
            beyond = lr_past_edge(edge, lrs)
            if beyond is None:
                break
            lrs = sorted([*lrs, beyond])
        lr_band.tune_band(lambda extra, lrs=tuned, tune_at=tune_at: tune_at(lrs, extra), ctx.unigram_ppl)


def failed_lrs(ctx: Context, unigram: float, candidates: list | None = None) -> dict[str, list[float]]:
    """Returns {name: the LRs of its tune grid whose point did not end below the gate's threshold (a
    diverged or missing point included)}, for every candidate (of ``candidates`` when given)."""
    out = {}
    for c in ctx.candidates if candidates is None else candidates:
        entries = load_json(tune_file(ctx, c))["presets"].values()
        out[c.name] = sorted(lr for entry in entries for lr in trained_gate.failed_lrs(entry, unigram))
    return out


def untrainable(ctx: Context, failed: dict[str, list[float]]) -> frozenset[str]:
    """Returns the candidates for which every point of the tune grid failed the gate (``failed``:
    ``failed_lrs``'s answer): they did not train at any LR of their grid under this recipe."""
    grids = {c.name: load_json(tune_file(ctx, c))["grid"]["lrs"] for c in ctx.candidates if c.name in failed}
    return frozenset(name for name, lrs in failed.items() if len(lrs) >= len(grids[name]))


def add_own_recipes(ctx: Context) -> list[Candidate]:
    """Adds to ``ctx.candidates`` each candidate that trained at no LR of its grid (``untrainable``) and
    whose scheme has an own recipe (``engine.training.own_recipes``), under that recipe
    (``Candidate.under_own_recipe``), to be tuned, trained and ranked beside it with that qualifier;
    returns those added. A scheme is tried under its own paper's recipe before a report lists it as
    failing."""
    if ctx.unigram_ppl is None or ctx.reread:  # --reread trains nothing: the report says who waits
        return []
    names = {c.name for c in ctx.candidates}
    tried = [
        c for c in ctx.candidates if not c.own_recipe and c.arch in OWN_RECIPES and c.name + OWN not in names
    ]
    failing = untrainable(ctx, failed_lrs(ctx, ctx.unigram_ppl, tried))
    added = [c.under_own_recipe() for c in tried if c.name in failing]
    for c in added:
        log(f"{c.name.removesuffix(OWN)} trained at no LR of its grid: tuning it again under its own recipe")
    ctx.candidates.extend(added)
    return added


def lr_past_edge(best: float | None, lrs: list[float]) -> float | None:
    """Returns the LR one step past the grid's edge that ``best`` lies on (the step: the ratio of the
    two LRs at that edge), or None when ``best`` is inside the grid, missing, or the grid has one LR."""
    lrs = sorted(lrs)
    if best is None or len(lrs) < 2:
        return None
    if best == lrs[-1]:
        return float(f"{lrs[-1] * lrs[-1] / lrs[-2]:.3g}")
    if best == lrs[0]:
        return float(f"{lrs[0] * lrs[0] / lrs[1]:.3g}")
    return None


def _model_key(ctx: Context, c: Candidate) -> str:
    return json.dumps([c.preset(ctx.scale.size), c.overrides], sort_keys=True)


def measure_ratios(ctx: Context) -> dict[str, dict[str, Any]]:
    """Returns {name: paired step-time ratio record to the baseline}, measuring what
    ``<out>/step_ratios.json`` does not hold yet (stored after each, so budgets never change)."""
    s, by_name = ctx.scale, {c.name: c for c in ctx.candidates}
    return runs.measure_ratios(
        os.path.join(ctx.out, "step_ratios.json"),
        list(by_name),
        baseline_of=lambda name: ctx.baseline.name,
        model_of=lambda name: _model_key(ctx, by_name[name]),
        configs=lambda name, base: (
            train_config(ctx, by_name[base], 1, tuned=False),
            train_config(ctx, by_name[name], 1, tuned=False),
        ),
        timing={"pairs": s.ratio_pairs, "burst": s.ratio_burst, "warmup": s.ratio_warmup}
        | {"sharing": context.sharing(ctx)},
        log=log,
        measure=not ctx.reread,
    )


def run_spec(ctx: Context, c: Candidate, seed: int, lr: float | None = None) -> runner.RunSpec:
    """Returns the spec of ``c``'s run at ``seed`` (at ``lr`` of its band, or its tuned LR): its
    TrainConfig (``train_config``), folder, and the record's name, seed and budget."""
    return runner.RunSpec(
        name=c.name,
        seed=seed,
        config=train_config(ctx, c, seed, lr=lr),
        directory=run_dir(ctx, c, seed, lr),
        record={"name": c.name, "seed": seed, "budget": run_budget(ctx, c)},
        role=runner.JUDGED if lr is None else runner.BAND,
        lr=lr,
    )


def ensure_spec(ctx: Context, spec: runner.RunSpec) -> dict[str, Any]:
    """Returns the record of ``spec``'s run (``runner.ensure_in``: trained first unless finished); a
    judged run that trained is then read while its weights exist (``read_while_weights_exist``)."""
    done = runner.ensure_in(ctx, spec)
    if spec.role == runner.JUDGED and not ctx.reread:
        c = next(c for c in ctx.candidates if c.name == spec.name)
        read_while_weights_exist(ctx, c, spec.seed, done)
    return done


def ensure_run(ctx: Context, c: Candidate, seed: int, lr: float | None = None) -> dict[str, Any]:
    """Returns ``ensure_spec``'s record of ``c``'s run at ``seed`` (at ``lr`` of its band, or its tuned
    LR)."""
    return ensure_spec(ctx, run_spec(ctx, c, seed, lr))


def read_while_weights_exist(ctx: Context, c: Candidate, seed: int, record: dict[str, Any]) -> None:
    """Scores ``c``'s run at ``seed`` (its tuned LR) zero-shot and summarises its gradient ratio by depth
    as soon as it has trained, while its weights and gradient record lie in its folder: a committed
    bakeoff folder keeps only the runs' records, logs and these results (its ``.gitignore``), so a
    bakeoff lands run by run and is read again from a fresh clone without retraining."""
    if ctx.zeroshot is not None and trained_gate.is_trained(record):
        data, tasks = ctx.zeroshot
        zeroshot_files(ctx, c, seed, tasks, data)
    depth_ratio(ctx, c, seed)


DEPTH_FILE = "fc2_depth.json"  # a run's gradient ratio by depth, kept where its gradient record is not


def depth_ratio(ctx: Context, c: Candidate, seed: int) -> float | None:
    """Returns fc2's mean |gradient| of layer 0 ÷ the last layer's over the scale's Figure 3 window (the
    beginning of training) of ``c``'s run at ``seed``: from its ``DEPTH_FILE``, else computed from its
    gradient record and stored there; None when the run recorded no gradients."""
    directory = run_dir(ctx, c, seed)
    stored = os.path.join(directory, DEPTH_FILE)
    if os.path.isfile(stored):
        return load_json(stored)["ratio"]
    path = runs.grad_stats_path(directory)
    if path is None:
        return None
    total = int(load_json(os.path.join(directory, "config.json"))["train"]["total_steps"])
    start, end = clip_window(ctx.scale.fig3_window, total)
    fc2 = average_rows([r for r in read_grad_stats(path) if start <= r["update"] <= end])["fc2"]
    ratio = fc2[0] / fc2[-1]
    atomic_write_json(stored, {"ratio": ratio, "window": [start, end], "kind": "fc2 layer 0 / last"})
    return ratio


def train_all(ctx: Context) -> str | None:
    """Trains every candidate's unfinished seeds, at its tuned LR and at every other LR of its band,
    through the one runner (``runner.train_in``); returns None once every run is finished, else what to
    do."""
    specs = [
        run_spec(ctx, c, s, lr)
        for c in ctx.candidates
        for lr in (None, *band_lrs(ctx, c))
        for s in ctx.seeds_of(c)
    ]
    return runner.train_in(ctx, specs, functools.partial(ensure_spec, ctx))


def run_on_cluster(ctx: Context) -> str | None:
    """With ``--launcher slurm``: the tunes, one job measuring the step-time ratios (on the jobs'
    hardware) and the training runs, as Slurm jobs in turn; returns what to do while some are not
    finished (``--no-wait``, a failed job), else None (the later stages then read their results)."""
    run_tunes(ctx)
    if any(load_json(tune_file(ctx, c))["missing"] for c in ctx.candidates):
        return "the LR tunes' jobs are not all finished: rerun the same command to collect them"
    if add_own_recipes(ctx):
        run_tunes(ctx)
        if any(load_json(tune_file(ctx, c))["missing"] for c in ctx.candidates):
            return "the own-recipe tunes' jobs are not all finished: rerun the same command to collect them"
    path = os.path.join(ctx.out, "step_ratios.json")
    if not all(c.name in (load_json(path) if os.path.isfile(path) else {}) for c in ctx.candidates):
        job = LaunchPoint("step-ratios", measure_ratios, (dataclasses.replace(ctx, launch=None),), ctx.out)
        cluster.run_points([job], ctx.out, ctx.launch, "step-ratios", ctx.progress)
        if not all(c.name in (load_json(path) if os.path.isfile(path) else {}) for c in ctx.candidates):
            return "the step-time ratio job is not finished: rerun the same command to collect it"
    ctx.step_ratios = measure_ratios(ctx)
    return train_all(ctx)


def zeroshot_files(ctx: Context, c: Candidate, seed: int, tasks: list[str], data: str) -> list[str]:
    """Scores one finished run zero-shot (the corpus cloze task in full, the public tasks up to the
    recipe's limit), unless scored (a results file without its per-item sidecar, left by a kill between
    the two writes, is scored again); returns its results files (each with its per-item sidecar)."""
    stem = os.path.join(ctx.out, "zeroshot", f"{c.name}-seed{seed}")
    device = None if ctx.device == "auto" else ctx.device
    parts = [(f"{stem}_cloze.json", tasks[:1], None)]
    if len(tasks) > 1:
        parts.append((f"{stem}.json", tasks[1:], ctx.scale.zeroshot_limit))
    for path, names, limit in parts:
        if not scored(path):
            scoring = ScoringConfig(device=device, progress=ctx.progress)
            cfg = ZeroShotConfig(tasks=names, data_dir=data, limit=limit, output=path, scoring=scoring)
            zeroshot.evaluate(run_dir(ctx, c, seed), cfg)
    return [p for p, _, _ in parts]


def _with_scheme(settings: Any, c: Candidate, size: str) -> Any:
    """Returns the stability test's ``settings`` with the weight decay ``c``'s scheme carries (nGPT: 0)."""
    decay = preset(c.preset(size), **c.overrides).recipe_overrides.get("weight_decay")
    return settings if decay is None else dataclasses.replace(settings, weight_decay=decay)


def stability(ctx: Context, c: Candidate) -> dict[str, Any]:
    """Runs the rising-LR stability test (``nfeval analyze stability``) on ``c``'s initialisation at the
    runs' model config and tokenizer, in the device's lowest autocast precision, ``ctx.seeds`` seeds;
    returns its JSON (not redone once its PNG exists)."""
    s = ctx.scale
    options = StabilityOptions(
        presets=[c.preset(s.size)],
        seeds=ctx.seeds,
        model={**s.model, **c.overrides},
        settings=_with_scheme(stability_settings(s, ctx.device), c, s.size),
        data=ctx.train_data or None,
        tokenizer=ctx.tokenizer,
        progress=ctx.progress,
    )
    return analyze(options, os.path.join(ctx.out, "stability", f"{c.name}.png"), log)
