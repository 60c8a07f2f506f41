"""What a bakeoff measures from its runs, each candidate against the baseline, seeds paired by number:

- the ranking: final validation perplexity per candidate, mean with a Student-t interval over seeds;
- perplexity significance: a seed-paired t-test on log PPL(baseline) − log PPL(candidate) (positive:
  the candidate is better) on the judging set (``judging``: the whole validation split, its sequences'
  paired error as the per-measurement error), with ``reproduce``'s verdict rule and minimum detectable
  effect, over every seed whose runs both trained; flagged off plan when the seeds' realised step-time
  ratios miss the planned one as a whole (``realised_time``; no seed is left out for its time);
- zero-shot significance: per seed, ``compare-scores``' paired bootstrap over items and McNemar's test
  (candidate − baseline); over seeds, the verdict rule on the per-seed differences with the items' mean
  standard error as the per-measurement error;
- the compute fraction to reach the baseline's best perplexity (``nfeval compare``), in FLOPs and in
  time (steps × the paired step-time ratio, as ``reproduce``'s equal-time protocol);
- the rising-LR stability test: updates survived, candidate − baseline per seed;
- the gradient mismatch by depth (Shleifer et al. 2021, Figure 3): fc2's mean |gradient| of layer 0 ÷
  the last layer's over the beginning of training, from the gradients every run records.

Every test gets a raw p; ``settle`` takes the verdicts from Holm-adjusted p (``report.verdict``): the
perplexity tests against the baseline are the primary family (the ranking's claims, declared by the
protocol before any run), the zero-shot and stability tests the secondary one.
"""

from __future__ import annotations

import math
from typing import Any

from ...base.jsonio import load_json
from ...report import significance as sig
from ...report import verdict
from ...report.compare import compare
from ...report.paired import compare_zeroshot
from ...tasks import judged_metric
from .. import judging, lr_band, realised_time, trained_gate
from ..perplexity import final_ppl, judged_ppl, log_ratio
from ..runs import finished
from ..trained_gate import gated_decide, is_trained, recipe_words
from .runs import Context, band_lrs, band_outside, depth_ratio, log, run_dir

NORMAL_Z = 1.959964  # the 95% normal quantile: a bootstrap half-width ÷ it estimates the item SE


VERDICTS = {verdict.AGREES: "better", verdict.DISAGREES: "worse"}  # than the baseline


def judge(diffs: list[float], measurement_se: float = 0.0, family: str = verdict.SECONDARY) -> dict:
    """Returns ``verdict.decide`` on differences oriented so that positive favours the candidate, in
    ``family`` (its verdict is settled by ``settle``)."""
    return {**verdict.decide(diffs, measurement_se=measurement_se), "family": family}


def settle(*groups: list[dict[str, Any]]) -> None:
    """Takes each test's verdict of ``groups`` (lists of test rows, in place) from its family's
    Holm-adjusted p, said as "better" / "worse" (than the baseline) / "inconclusive at this scale"."""
    tested = [t for group in groups for t in group if "family" in t]
    for t, adjusted in zip(tested, verdict.adjust(tested)):
        t.update(adjusted, verdict=VERDICTS.get(adjusted["verdict"], adjusted["verdict"]))


def _interval(values: list[float]) -> dict[str, Any] | None:
    finite = [v for v in values if math.isfinite(v)]
    return sig.t_interval(finite) if finite else None


def ranking(
    ctx: Context, records: dict[str, list[dict]], untrainable: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """Returns one row per candidate, best mean final PPL of the seeds that trained first (a candidate
    with a seed that diverged or did not train after every one without, and the ``untrainable`` ones,
    which trained at no LR of their grid, last and not ranked): name, per-seed PPLs (None: diverged),
    their t-interval, diverged count, per-seed ``trained``, ``ranked``."""
    rows = []
    for c in ctx.candidates:
        ppl = final_ppl(records[c.name])
        trained = [is_trained(r) for r in records[c.name]]
        rows.append(
            {
                "name": c.name,
                "spec": c.spec(),
                "ppl": [p if math.isfinite(p) else None for p in ppl],
                "interval": _interval([p for p, ok in zip(ppl, trained) if ok]),
                "diverged": sum(not math.isfinite(p) for p in ppl),
                "trained": trained,
                "ranked": c.name not in untrainable,
                "lr": records[c.name][0]["lr"],
                "steps": [r.get("steps") for r in records[c.name]],
            }
        )
    rows.sort(
        key=lambda r: (
            not r["ranked"],
            r["diverged"] > 0 or not all(r["trained"]),
            math.inf if r["interval"] is None else r["interval"]["mean"],
        )
    )
    return rows


def realised_checks(ctx: Context, records: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    """Returns {candidate: ``realised_time.check`` of its seeds} for the candidates whose step budget a
    paired step-time ratio fixed (none under a time budget)."""
    if "max_steps" not in ctx.budget:
        return {}
    base = {r["seed"]: realised_time.run_time(r["dir"]) for r in records[ctx.baseline.name]}
    out = {}
    for c in ctx.candidates[1:]:
        if c.name in ctx.step_ratios:
            times = {
                r["seed"]: (base.get(r["seed"]), realised_time.run_time(r["dir"])) for r in records[c.name]
            }
            out[c.name] = realised_time.check(ctx.step_ratios[c.name], times)
    return out


def ppl_tests(
    ctx: Context, records: dict[str, list[dict]], realised: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Returns, per candidate but the baseline, the seed-paired test of the log-PPL gain over the
    baseline: per-seed gains, t-interval, two-sided p, verdict and MDE (``verdict.decide``), over the
    seeds where both runs trained (``trained_gate.gated_decide``: not readable with fewer than two);
    flagged off plan when ``realised`` (``realised_checks``) says the seeds' realised time missed the plan
    as a whole. No seed is left out for its time."""
    base = _by_seed(records[ctx.baseline.name])
    words = recipe_words(r for rs in records.values() for r in rs)
    rows = []
    for c in ctx.candidates[1:]:
        cand = _by_seed(records[c.name])
        check = (realised or {}).get(c.name)
        pairs = {seed: (base[seed], cand[seed]) for seed in sorted(cand) if seed in base}
        trained = {seed: p for seed, p in pairs.items() if is_trained(p[0]) and is_trained(p[1])}
        gains = {seed: log_ratio(judged_ppl(b), judged_ppl(n)) for seed, (b, n) in trained.items()}
        untrained = sum(seed not in trained for seed in pairs)
        error = judging.measurement_se(list(trained.values()))
        row = {
            "name": c.name,
            "gains": list(gains.values()),
            "interval": _interval(list(gains.values())),
            **gated_decide(list(gains.values()), untrained, words, measurement_se=error or 0.0),
            "family": verdict.PRIMARY,
            "measurement_se": error,
        }
        if check is not None:
            row["off_plan"] = check["off_plan"]
            row["why"] += f"; {realised_time.summary_text(check)}"
        rows.append(row)
    return rows


def _by_seed(records: list[dict]) -> dict[int, dict]:
    return {r["seed"]: r for r in records}


def _gains(base: dict[int, float], cand: dict[int, float]) -> list[float]:
    """Returns log PPL(baseline) − log PPL(candidate) for each seed both have, in seed order."""
    return [log_ratio(base[seed], cand[seed]) for seed in sorted(cand) if seed in base]


def add_lr_sensitivity(ctx: Context, records: dict[str, list[dict]], tests: list[dict[str, Any]]) -> None:
    """Adds ``lr_sensitivity`` to each perplexity test of ``tests`` (``ppl_tests``', in place): the test
    re-read across both tunes' LR bands, before ``settle`` takes the verdicts."""
    by_name = {c.name: c for c in ctx.candidates}
    for t in tests:
        t["lr_sensitivity"] = _lr_sensitivity(ctx, records, by_name[t["name"]])


def _lr_sensitivity(ctx: Context, records: dict[str, list[dict]], c) -> dict[str, Any] | None:
    """Returns ``lr_band.sensitivity`` of ``c``'s perplexity test (None when neither side's tune has a
    band): the pairs' runs at a band LR are read from their folders (a missing one is left out)."""
    base = ctx.baseline
    bands = (band_lrs(ctx, base), band_lrs(ctx, c))
    outside = (band_outside(ctx, base), band_outside(ctx, c))
    if not (any(bands) or any(outside)):
        return None
    best = (records[base.name][0]["lr"], records[c.name][0]["lr"])

    def ppl_at(who, lr: float) -> dict[int, float]:
        if lr == records[who.name][0]["lr"]:
            return _trained_ppl(records[who.name])
        done = [r for r in (finished(run_dir(ctx, who, s, lr)) for s in ctx.seeds_of(who)) if r]
        return _trained_ppl([trained_gate.mark(r, ctx.unigram_ppl) for r in done])

    def diffs_at(base_lr: float, cand_lr: float) -> list[float]:
        gains = _gains(ppl_at(base, base_lr), ppl_at(c, cand_lr))
        return [g for g in gains if not math.isnan(g)]

    return lr_band.sensitivity(best, bands, diffs_at, outside=outside)


def _trained_ppl(records: list[dict]) -> dict[int, float]:
    """Returns {seed: final PPL} of the runs of ``records`` that trained (the gate's pairs)."""
    return {r["seed"]: judged_ppl(r) for r in records if is_trained(r)}


def plan_seeds(ctx: Context, records: dict[str, list[dict]], close_seeds: int) -> dict[str, Any]:
    """Returns the seed plan decided from every candidate's first ``ctx.seeds`` seeds: the candidates
    whose mean log PPL lies within one MDE (the median of the perplexity tests' MDEs) of the best
    candidate's get ``close_seeds`` seeds, and the baseline with them (its tests pair seeds).

    Returned as {"rule", "from_seeds", "close_seeds", "best", "mde", "gaps": {name: log-PPL gap to the
    best}, "counts": {name: seeds}} (counts only where more than ``ctx.seeds``)."""
    first = {name: [r for r in rs if r["seed"] <= ctx.seeds] for name, rs in records.items()}
    means = {}
    for c in ctx.candidates:
        ppl = final_ppl(first[c.name])
        if all(map(is_trained, first[c.name])):  # a seed that did not train is not close to anything
            means[c.name] = sum(math.log(p) for p in ppl) / len(ppl)
    mdes = sorted(t["mde"] for t in ppl_tests(ctx, first) if t["mde"] is not None)
    plan = {
        "rule": f"{close_seeds} seeds for the candidates within one MDE (the median MDE of the perplexity "
        f"tests at {ctx.seeds} seeds) of the best mean log PPL, and for the baseline with them",
        "from_seeds": ctx.seeds,
        "close_seeds": close_seeds,
        "best": min(means, key=means.get) if means else None,
        "mde": mdes[len(mdes) // 2] if mdes else None,
        "gaps": {},
        "counts": {},
    }
    if plan["best"] is None or plan["mde"] is None or close_seeds <= ctx.seeds:
        return plan
    plan["gaps"] = {name: m - means[plan["best"]] for name, m in means.items()}
    close = [c.name for c in ctx.candidates if plan["gaps"].get(c.name, math.inf) < plan["mde"]]
    if any(name != ctx.baseline.name for name in close):
        names = [ctx.baseline.name, *(n for n in close if n != ctx.baseline.name)]
        plan["counts"] = {name: close_seeds for name in names}
    return plan


def depth_ratios(ctx: Context) -> list[dict[str, Any]]:
    """Returns, per candidate, fc2's mean |gradient| of layer 0 ÷ the last layer's over the scale's
    Figure 3 window (the beginning of training), per seed and as mean ± std: the gradient mismatch by
    depth that NormFormer targets (None: the run recorded no gradients; ``runs.depth_ratio``)."""
    out = []
    for c in ctx.candidates:
        per_seed = [depth_ratio(ctx, c, seed) for seed in ctx.seeds_of(c)]
        mean, std = verdict.mean_std(per_seed)
        out.append({"name": c.name, "per_seed": per_seed, "mean": mean, "std": std})
    return out


def zeroshot_tests(ctx: Context, files: dict[str, dict[int, list[str]]]) -> list[dict[str, Any]]:
    """Returns, per candidate and task, the per-seed paired item tests against the baseline's same seed
    (``report.paired.compare_zeroshot``) and the verdict over seeds (percentage points)."""
    out = []
    base = files.get(ctx.baseline.name, {})
    for c in ctx.candidates[1:]:
        per_task: dict[str, list[dict[str, Any]]] = {}
        for seed, paths in files.get(c.name, {}).items():
            for path, ref in zip(paths, base.get(seed, [])):
                tasks = _tasks_in(path)
                for row in compare_zeroshot(path, ref, {t: judged_metric(t) for t in tasks}):
                    per_task.setdefault(row["task"], []).append({**row, "seed": seed})
        for task, rows in per_task.items():
            diffs = [100 * r["difference"] for r in rows]
            item_se = 100 * sum((r["high"] - r["low"]) / 2 / NORMAL_Z for r in rows) / len(rows)
            out.append(
                {
                    "name": c.name,
                    "task": task,
                    "metric": rows[0]["metric"],
                    "per_seed": rows,
                    "significant_seeds": sum(r["significant"] for r in rows),
                    "item_se_points": item_se,
                    **judge(diffs, measurement_se=item_se),
                }
            )
    return out


def _tasks_in(path: str) -> list[str]:
    return list(load_json(path).get("results", {}))


def compute_fractions(ctx: Context, records: dict[str, list[dict]]) -> list[dict[str, Any]]:
    """Returns, per candidate but the baseline and per seed, the fraction of the baseline's compute the
    candidate needs to reach the baseline's best validation PPL (None: not reached), in FLOPs and in time
    (the step it reaches it × its paired step-time ratio ÷ the baseline's step there)."""
    out = []
    for c in ctx.candidates[1:]:
        ratio = (ctx.step_ratios.get(c.name) or {}).get("ratio")
        per_seed = []
        for seed in ctx.seeds_of(c):
            dirs = [run_dir(ctx, ctx.baseline, seed), run_dir(ctx, c, seed)]
            if any(
                r["seed"] == seed and not is_trained(r) for r in records[c.name] + records[ctx.baseline.name]
            ):
                why = "a run diverged or did not train"
                per_seed.append({"seed": seed, "flops": None, "time": None, "why": why})
                continue
            try:
                # recipes checked once for the whole bakeoff (a scheme's own fields allowed and shown)
                result = compare(dirs, names=[ctx.baseline.name, c.name], mixed_recipes=True)
            except (ValueError, FileNotFoundError) as e:
                log(f"compute fraction {c.name} seed {seed}: {e}")
                per_seed.append({"seed": seed, "flops": None, "time": None, "why": str(e)})
                continue
            cand, target = result["runs"][1]["to_target"], result["baseline_at_target"]
            time_fraction = None
            if cand["reached"] and ratio and target["step"]:
                time_fraction = cand["step"] * ratio / target["step"]
            per_seed.append({"seed": seed, "flops": cand["fraction"]["flops"], "time": time_fraction})
        out.append({"name": c.name, "per_seed": per_seed, **_fraction_summary(per_seed)})
    return out


def curves(ctx: Context, records: dict[str, list[dict]]) -> dict[str, Any] | None:
    """Returns ``nfeval compare`` over the first seed's finished runs of every candidate (the baseline
    first), for the perplexity-vs-compute plot; None when the baseline's first seed did not finish."""
    seed = ctx.seed_values[0]
    done = [c for c in ctx.candidates if records[c.name][0]["status"] == "finished"]
    if not done or done[0] is not ctx.baseline:
        return None
    return compare([run_dir(ctx, c, seed) for c in done], names=[c.name for c in done], mixed_recipes=True)


def _fraction_summary(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    summary = {}
    for axis in ("flops", "time"):
        values = [s[axis] for s in per_seed]
        reached = [v for v in values if v is not None]
        summary[axis] = {
            "reached": len(reached),
            "n": len(values),
            "interval": sig.t_interval(reached) if len(reached) == len(values) and reached else None,
        }
    return summary


def stability_tests(ctx: Context, results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Returns, per candidate, the stability summary (updates survived, LR at divergence, largest
    attention logit) and, but for the baseline, the verdict on survived(candidate) − survived(baseline)."""
    survived = {
        name: [run["survived"] for runs in r["runs"].values() for run in runs] for name, r in results.items()
    }
    base = survived[ctx.baseline.name]
    rows = []
    for c in ctx.candidates:
        summary = results[c.name]["summary"][0]
        row = {
            "name": c.name,
            "survived": survived[c.name],
            "updates": results[c.name]["settings"]["updates"],
        }
        row.update(
            {k: summary[k] for k in ("lr_at_divergence_mean", "attn_logit_max", "fp16_overflow_seeds")}
        )
        if c.name != ctx.baseline.name:
            row.update(judge([a - b for a, b in zip(survived[c.name], base)]))
        rows.append(row)
    return rows
