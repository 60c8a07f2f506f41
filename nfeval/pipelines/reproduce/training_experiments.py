"""The experiments that read training curves: Figure 2 (CLM and MLM at equal compute) and Xiong
et al. 2020 (warm-up). Each returns the parts of its report section: tables,
claims with their verdicts, figures, notes; ``nfeval.pipelines.reproduce.sections`` adds the rest."""

from __future__ import annotations

import math
import os
from typing import Any

from ...base.artifacts import atomic_write_json, atomic_write_text
from ...base.plots import plot_bars, plot_curves
from ...report import verdict
from ...report.compare import MID_SCHEDULE, compare
from ...report.compare_table import format_comparison
from .. import judging, lr_band, realised_time
from ..perplexity import final_ppl, judged_ppl, log_ratio
from ..report_text import PAPER_OVERHEAD, ratio_text
from ..runs import finished
from ..trained_gate import NOT_READABLE, gated_decide, is_trained, mark, recipe_words
from .plan import LOG_PPL_MARGIN, LR_BAND_CLAIMS, RUNS
from .run_specs import Context, band_lrs, band_outside, log, run_budget, run_dir, table_section

AXIS_WORDS = {"wall_s": "equal wall-clock", "flops": "equal FLOPs"}


def _finite(diffs: list[float]) -> list[float]:
    return [d for d in diffs if not math.isnan(d)]  # nan: both sides diverged, no evidence either way


def compare_seed(ctx: Context, name: str, keys: tuple[str, ...], seed: int) -> dict[str, Any] | None:
    """Runs ``nfeval compare`` on the runs ``keys`` (first = baseline) of one seed and stores its JSON
    and text under ``<out>/experiments/<name>/``; returns the comparison, or None if it cannot be made
    (a run diverged before its first validation)."""
    dirs = [run_dir(ctx, k, seed) for k in keys]
    try:
        result = compare(dirs, names=[RUNS[k].label for k in keys])
    except (ValueError, FileNotFoundError) as e:
        log(f"{name}: no comparison for seed {seed}: {e}")
        return None
    folder = os.path.join(ctx.out, "experiments", name)
    atomic_write_json(os.path.join(folder, f"compare_seed{seed}.json"), result)
    atomic_write_text(os.path.join(folder, f"compare_seed{seed}.txt"), format_comparison(result) + "\n")
    return result


def _readings(ctx: Context, c: dict[str, Any], cand: str) -> dict[str, dict[str, Any]]:
    """Returns {axis: {base, cand, matched, fraction}}: both PPLs at equal compute, whether the reading
    is compute-matched, and the candidate's compute fraction to the baseline's best PPL.

    With paired step budgets (``equal_time``) both runs end in the same time on their decayed
    schedules: the equal-time PPLs are the final ones and time is steps × the run's step-time ratio.
    Otherwise (and always for FLOPs) they are ``compare``'s equal-budget readings, matched unless one
    falls mid-schedule."""
    b, n = c["runs"]
    out = {}
    for axis in AXIS_WORDS:
        out[axis] = {
            "base": b["at_equal"][axis]["val_ppl"],
            "cand": n["at_equal"][axis]["val_ppl"],
            "mid_schedule": [b["at_equal"][axis]["mid_schedule"], n["at_equal"][axis]["mid_schedule"]],
            "matched": not (b["at_equal"][axis]["mid_schedule"] or n["at_equal"][axis]["mid_schedule"]),
            "fraction": n["to_target"]["fraction"][axis] if n["to_target"]["reached"] else None,
        }
    record = ctx.step_ratios.get(cand)
    if record is not None and "max_steps" in ctx.budget:
        target_step = c["baseline_at_target"]["step"]
        reached = n["to_target"]["reached"] and target_step
        out["wall_s"] = {
            "base": b["final_val_ppl"],
            "cand": n["final_val_ppl"],
            "mid_schedule": [False, False],
            "matched": True,
            "fraction": n["to_target"]["step"] * record["ratio"] / target_step if reached else None,
        }
    return out


def realised_check(ctx: Context, base: str, cand: str) -> dict[str, Any] | None:
    """Returns ``realised_time.check`` of the candidate's seeds against its planned step-time ratio, or
    None when its budget was not fixed from one (a time budget, or no ratio record)."""
    record = ctx.step_ratios.get(cand)
    if record is None or "max_steps" not in ctx.budget:
        return None
    times = {
        s: tuple(realised_time.run_time(run_dir(ctx, key, s)) for key in (base, cand))
        for s in ctx.seed_values
    }
    return realised_time.check(record, times)


def equal_compute(
    ctx: Context, name: str, base: str, cand: str, paper_fraction: float, records: dict[str, list[dict]]
) -> dict[str, Any]:
    """Figure 2: the candidate vs the baseline at equal time and at equal FLOPs, per seed (``records``:
    the runs', by key); returns the section parts. A reading that is not compute-matched is shown,
    marked, and left out of the verdict; so is a seed where either run did not train (``trained_gate``).
    Every other seed is read: the realised step-time ratios (``realised_time``) flag the equal-time claim
    when they miss the plan as a whole, and drop no seed."""
    comparisons = {s: compare_seed(ctx, name, (base, cand), s) for s in ctx.seed_values}
    realised = realised_check(ctx, base, cand)
    pair = {k: records[k] for k in (base, cand)}
    rows, per_axis = _per_seed(ctx, cand, comparisons, pair, realised)
    columns = [
        "seed",
        f"{RUNS[base].label} PPL @ equal time",
        f"{RUNS[cand].label} PPL @ equal time",
        f"{RUNS[base].label} PPL @ equal FLOPs",
        f"{RUNS[cand].label} PPL @ equal FLOPs",
        "compute fraction (time)",
        "compute fraction (FLOPs)",
        "steps (cand vs base)",
        "realised wall-time ratio (step-time ratio, vs the planned interval widened by timing noise)",
    ]
    words = recipe_words(records[base])
    claims = [
        _equal_compute_claim(ctx, name, base, cand, a, acc, paper_fraction, words)
        for a, acc in per_axis.items()
    ]
    for claim in claims:
        if claim["id"] in LR_BAND_CLAIMS:
            claim["lr_sensitivity"] = final_ppl_sensitivity(ctx, *LR_BAND_CLAIMS[claim["id"]])
    claims = [
        with_realised(c, realised) if realised and a == "wall_s" and c["verdict"] != NOT_READABLE else c
        for a, c in zip(per_axis, claims)
    ]
    figures = []
    first = comparisons.get(ctx.seed_values[0])
    if first is not None:
        figures.append(plot_curves(first, os.path.join(ctx.out, f"{name}_curves.png")))
    return {
        "tables": [{"title": "per seed", "columns": columns, "rows": rows}],
        "claims": claims,
        "figures": figures,
        "notes": _equal_compute_notes(ctx, base, cand)
        + ([f"Realised equal time: {realised_time.summary_text(realised)}."] if realised else []),
        "data": {"comparisons": comparisons, "step_ratio": ctx.step_ratios.get(cand), "realised": realised},
    }


def _per_seed(
    ctx: Context,
    cand: str,
    comparisons: dict[int, dict[str, Any] | None],
    records: dict[str, list[dict]],
    realised: dict[str, Any] | None,
) -> tuple[list[list[str]], dict[str, dict[str, Any]]]:
    """Returns (the per-seed table's rows, {axis: the readings each claim tests: diffs, fractions, and
    counts of seeds not compute-matched and not trained}). ``records``: the two runs', by key."""
    untrained = {r["seed"] for rs in records.values() for r in rs if not is_trained(r)}
    by_seed = {r["seed"]: r for r in realised["seeds"]} if realised else {}
    rows = []
    per_axis = {
        axis: {"diffs": [], "fractions": [], "unmatched": 0, "untrained": 0, "no_logs": 0, "pairs": []}
        for axis in AXIS_WORDS
    }
    by_key = {key: {r["seed"]: r for r in rs} for key, rs in records.items()}
    for seed, c in comparisons.items():
        if seed in untrained:
            for acc in per_axis.values():
                acc["untrained"] += 1
            rows.append([str(seed), f"left out: a run did not train ({_outcomes(records, seed)})"] + [""] * 7)
            continue
        pair = tuple(by_key[key][seed] for key in records)
        if c is None and not _logs_gone(ctx, pair):
            rows.append([str(seed), "no comparison (a run diverged)"] + [""] * 7)
            continue
        readings = _readings(ctx, c, cand) if c is not None else _record_readings(pair)
        if readings["wall_s"]["matched"] and all(judging.judged(r) for r in pair):
            # equal time reads both runs at their ends: on the judging set, the whole validation split
            readings["wall_s"].update(base=judged_ppl(pair[0]), cand=judged_ppl(pair[1]), judged=True)
        for axis, acc in per_axis.items():
            r = readings[axis]
            if r is None:  # the runs' logs are not kept: nothing to read at equal FLOPs
                acc["no_logs"] += 1
                continue
            if r["matched"]:
                acc["diffs"].append(log_ratio(r["base"], r["cand"]))
                acc["pairs"].append(pair)
            acc["unmatched"] += not r["matched"]
            acc["fractions"].append(r["fraction"])
        rows.append(
            _seed_row(seed, c, readings, by_seed.get(seed)) if c else _record_row(seed, pair, readings)
        )
    return rows, per_axis


def _logs_gone(ctx: Context, pair: tuple[dict, ...]) -> bool:
    """Returns whether both runs of a seed finished but their logs are not in the folder (an older
    committed report kept only each run's record): the equal-time reading then comes from the records."""
    return ctx.reread and all(r["status"] == "finished" and not os.path.isfile(
        os.path.join(r["dir"], "metrics.jsonl")) for r in pair)  # fmt: skip


def _record_readings(pair: tuple[dict, ...]) -> dict[str, dict[str, Any] | None]:
    """Returns the readings of a seed whose runs' logs are gone: equal time from the records' final PPLs
    (both runs ended their own schedules), equal FLOPs None (it needs the curves)."""
    ppl = [judged_ppl(r) for r in pair]
    wall = {"base": ppl[0], "cand": ppl[1], "mid_schedule": [False, False], "matched": True, "fraction": None}
    return {"wall_s": wall, "flops": None}


def _record_row(seed: int, pair: tuple[dict, ...], readings: dict[str, Any]) -> list[str]:
    wall = readings["wall_s"]
    steps = f"{pair[1].get('steps')} vs {pair[0].get('steps')}"
    return [str(seed), _ppl(wall["base"]), _ppl(wall["cand"]), "run logs not kept", "–", "–", "–", steps, "–"]


def final_ppl_sensitivity(ctx: Context, base: str, cand: str) -> dict[str, Any] | None:
    """Returns ``lr_band.sensitivity`` of the final-PPL gain of run ``cand`` over ``base`` (the equal-time
    reading under paired step budgets) across both tunes' bands, or None when neither has one; a seed
    whose runs are not both finished and trained is left out of its pair, as the claim itself leaves it
    out, so the best LRs' row reads the claim's own seeds."""
    bands = (band_lrs(ctx, base), band_lrs(ctx, cand))
    outside = (band_outside(ctx, base), band_outside(ctx, cand))
    first = {k: finished(run_dir(ctx, k, ctx.seed_values[0])) for k in (base, cand)}
    if not (any(bands) or any(outside)) or None in first.values():
        return None
    best = (first[base]["lr"], first[cand]["lr"])

    def ppl_at(key: str, lr: float) -> dict[int, float]:  # the runs that trained (``trained_gate``)
        band = None if lr == first[key]["lr"] else lr
        done = [r for r in (finished(run_dir(ctx, key, s, band)) for s in ctx.seed_values) if r]
        return {r["seed"]: judged_ppl(r) for r in done if is_trained(mark(r, ctx.unigram_ppl))}

    def diffs_at(base_lr: float, cand_lr: float) -> list[float]:
        a, b = ppl_at(base, base_lr), ppl_at(cand, cand_lr)
        return [log_ratio(a[s], b[s]) for s in sorted(b) if s in a]

    record = lr_band.sensitivity(best, bands, diffs_at, margin=LOG_PPL_MARGIN, outside=outside)
    return {**record, "names": [RUNS[base].label, RUNS[cand].label]}


def _seed_row(seed: int, c: dict[str, Any], readings: dict[str, Any], realised: dict | None) -> list[str]:
    b, n = c["runs"]
    flops = readings["flops"]
    at_flops = [
        _ppl(ppl) + (" (mid-schedule)" if mid else "")
        for ppl, mid in zip((flops["base"], flops["cand"]), flops["mid_schedule"])
    ]
    return (
        [str(seed), _ppl(readings["wall_s"]["base"]), _ppl(readings["wall_s"]["cand"]), *at_flops]
        + [_cell(readings["wall_s"]["fraction"], n), _cell(flops["fraction"], n)]
        + [f"{n['steps']} vs {b['steps']}", realised_time.seed_text(realised) if realised else "–"]
    )


def _outcomes(records: dict[str, list[dict]], seed: int) -> str:
    """Returns each run's final PPL at ``seed`` (or "diverged"): "clm-prenorm 745.1, clm-normformer 180.2"."""
    return ", ".join(
        f"{key} " + (f"{r['val_ppl']:.1f}" if r["status"] == "finished" else "diverged")
        for key, rs in records.items()
        for r in rs
        if r["seed"] == seed
    )


def _equal_compute_claim(
    ctx: Context,
    name: str,
    base: str,
    cand: str,
    axis: str,
    acc: dict[str, Any],
    paper_fraction: float,
    recipe_words: str,
) -> dict[str, Any]:
    fractions = [f if f is not None else math.inf for f in acc["fractions"]]
    measured = (
        f"compute fraction to the baseline's best PPL {verdict.fmt_mean_std(fractions, 3, 'not reached')}; "
        f"log-PPL gain {verdict.fmt_mean_std(acc['diffs'], 4, 'out of range')}"
    )
    record = ctx.step_ratios.get(cand)
    if axis == "wall_s" and record is not None:
        measured += f"; paired step-time ratio {ratio_text(record)}, paper overhead {PAPER_OVERHEAD}"
    if acc["unmatched"]:
        measured += f"; {acc['unmatched']} seed(s) {MID_SCHEDULE}, left out"
    if acc["no_logs"]:
        measured += f"; {acc['no_logs']} seed(s) without their runs' logs (not kept), left out"
    error = judging.measurement_se(acc["pairs"]) if axis == "wall_s" else None
    if error is not None:
        measured += f"; judged on the whole validation split, its sequences' paired error {error:.4f}"
    decided = gated_decide(
        _finite(acc["diffs"]),
        acc["untrained"],
        recipe_words,
        margin=LOG_PPL_MARGIN,
        measurement_se=error or 0.0,
    )
    if not acc["diffs"] and acc["unmatched"] and not acc["untrained"]:
        decided["why"] = f"{MID_SCHEDULE} in every seed"
    if not acc["diffs"] and acc["no_logs"]:  # beside the seeds that did not train, if any
        logs = "the runs' logs were not kept: equal FLOPs cannot be read again"
        decided["why"] = f"{decided['why']}; {logs}" if acc["untrained"] and decided.get("why") else logs
    return {
        "id": f"{name}/{'equal-time' if axis == 'wall_s' else 'equal-flops'}",
        "claim": f"{RUNS[cand].label} has lower validation PPL than {RUNS[base].label} at "
        f"{AXIS_WORDS[axis]} (it reaches the baseline's best PPL with < 100% of the compute; "
        f"paper {paper_fraction:.0%})",
        "measured": measured,
        **decided,
        "measurement_se": error,
    }


def with_realised(claim: dict[str, Any], realised: dict[str, Any]) -> dict[str, Any]:
    """Returns the equal-time ``claim`` with its realised-time check (``realised_time.check``): every
    seed stays in it; a claim whose seeds' mean realised ratio misses the plan is flagged ``off_plan``
    (its verdict says so, ``verdict.adjust``)."""
    out = {**claim, "realised": realised, "off_plan": realised["off_plan"]}
    if realised["off_plan"]:
        out["measured"] += f"; realised time off plan: {realised_time.summary_text(realised)}"
    return out


def _equal_compute_notes(ctx: Context, base: str, cand: str) -> list[str]:
    notes = [
        "Equal FLOPs: read by nfeval compare at the smaller final FLOPs of the two runs; a reading before "
        f"the end of a run's LR schedule is {MID_SCHEDULE}, marked and left out of the verdict."
    ]
    record = ctx.step_ratios.get(cand)
    if record is None or "max_steps" not in ctx.budget:
        return [
            "Equal time: read by nfeval compare at the smaller measured training time (each run calibrated "
            "its own time budget, so machine load enters); mid-schedule readings are left out.",
            *notes,
        ]
    steps = {k: run_budget(ctx, k)["max_steps"] for k in (base, cand)}
    return [
        f"Equal time, fixed before training: {RUNS[base].label} trains {steps[base]} steps, "
        f"{RUNS[cand].label} {steps[base]} ÷ {record['ratio']:.3f} = {steps[cand]}, the ratio being its "
        f"paired step-time ratio to the baseline, {ratio_text(record)} (paper's overhead {PAPER_OVERHEAD}; "
        "step_ratios.json). Both end on their decayed schedules in the same time, so the equal-time "
        "PPLs are the final ones; compute fraction (time) = the step at which the candidate reaches the "
        "baseline's best PPL × the ratio ÷ the baseline's step there.",
        *notes,
    ]


def _cell(fraction: float | None, row: dict[str, Any]) -> str:
    if fraction is None:
        return "not reached"
    return ("≤" if row["to_target"]["bound"] == "at_most" else "") + f"{fraction:.3f}"


def _ppl(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _failure_decide(diffs: list[float], words: str) -> dict[str, Any]:
    """Returns the verdict on per-seed log ratios where a run that failed is inf (nan: both failed)."""
    return gated_decide(_finite(diffs), sum(map(math.isnan, diffs)), words, margin=LOG_PPL_MARGIN)


def warmup(ctx: Context, records: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Xiong et al. 2020: final PPL of Post-LN and Pre-LN with and without warm-up; divergences."""

    def outcome(r: dict[str, Any]) -> str:
        if r["status"] == "diverged":
            return f"diverged at step {r['diverged_at']}"
        return f"{r['val_ppl']:.2f}"

    rows = [
        [RUNS[k].label, f"{records[k][0]['warmup']:g}", *(outcome(r) for r in records[k])] for k in records
    ]
    columns = ["run", "warm-up", *(f"final PPL, seed {s}" for s in ctx.seed_values)]
    ppl = {k: final_ppl(rs) for k, rs in records.items()}
    # these claims are about failing to train: a run that did not train counts as failing, as a
    # diverged one does, and a pair where both failed is no evidence (left out)
    failed = {k: [p if is_trained(r) else math.inf for r, p in zip(rs, ppl[k])] for k, rs in records.items()}
    post_diffs = [log_ratio(a, b) for a, b in zip(failed["clm-postnorm-no-warmup"], failed["clm-postnorm"])]
    pre_vs_post = [
        log_ratio(a, b) for a, b in zip(failed["clm-postnorm-no-warmup"], failed["clm-prenorm-no-warmup"])
    ]
    diverged = {k: sum(r["status"] == "diverged" for r in rs) for k, rs in records.items()}
    words = recipe_words(records["clm-postnorm"])
    claims = [
        {
            "id": "xiong/postnorm-warmup",
            "claim": "Post-LN without warm-up ends worse than with it (or diverges)",
            "measured": f"PPL {verdict.fmt_mean_std(ppl['clm-postnorm-no-warmup'], 2, 'diverged')} without "
            "vs "
            f"{verdict.fmt_mean_std(ppl['clm-postnorm'], 2, 'diverged')} with warm-up",
            **_failure_decide(post_diffs, words),
        },
        {
            "id": "xiong/prenorm-without-warmup",
            "claim": "without warm-up Pre-LN ends better than Post-LN",
            "measured": f"PPL {verdict.fmt_mean_std(ppl['clm-prenorm-no-warmup'], 2, 'diverged')} (Pre-LN, "
            f"{diverged['clm-prenorm-no-warmup']} of {ctx.seeds} diverged) vs "
            f"{verdict.fmt_mean_std(ppl['clm-postnorm-no-warmup'], 2, 'diverged')} (Post-LN, "
            f"{diverged['clm-postnorm-no-warmup']} of {ctx.seeds} diverged)",
            **_failure_decide(pre_vs_post, words),
        },
    ]
    means = [verdict.mean_std(ppl[k])[0] for k in records]
    figures = [
        plot_bars(
            [RUNS[k].label for k in records],
            [("final val PPL (diverged: no bar)", means)],
            os.path.join(ctx.out, "xiong_ppl.png"),
            "Post-LN / Pre-LN with and without warm-up",
            "validation PPL",
        )
    ]
    notes = [
        f"warm-up with: {ctx.scale.warmup:g} (a fraction of the run if < 1, else steps); without: 0, "
        "so the first update already uses the peak learning rate."
    ]
    return table_section("final PPL", columns, rows, claims, figures, notes, {"records": records})
