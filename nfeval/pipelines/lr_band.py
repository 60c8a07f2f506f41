"""Learning rates chosen on seeds they are not judged on, and verdicts checked across the tune's noise.

Tune seeds. Every LR of a pipeline's tune trains ``tune_seeds`` seeds numbered from ``TUNE_SEED_BASE``
(101, 102, …) and the best LR is chosen by their mean (``tune.results``); the runs a verdict is read on
use seeds 1 … N. A tune point and a judged run therefore never share an initialisation or a data order:
the LR is not picked on the noise it is then judged on.

The band, fixed before the runs. Each preset's band is its best LR and the two neighbours at ×√2 and ÷√2
(``tune.results.BAND_RULE``), tuned on the same tune seeds (``tune_band`` adds those points to the grid),
a neighbour counting only where every tune seed trained (below the trained-run gate) and none diverged;
a neighbour that failed is reported as unstable, never as near-best. Each primary verdict is re-read
with one side moved to each other LR of its band (the other at its best), on the same judged seeds:
``sensitivity`` returns those unadjusted verdicts, and ``report.verdict.adjust`` turns a claim whose
verdicts differ into "LR-sensitive".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..base.artifacts import atomic_write_json
from ..base.errors import ConfigError
from ..base.jsonio import load_json
from ..report import verdict
from ..tune import results
from . import trained_gate

TUNE_SEED_BASE = 101  # the first tune seed; judged seeds are 1 … N < TUNE_SEED_BASE
DEFAULT_TUNE_SEEDS = 3
RULE = (
    "the verdict re-read (unadjusted) with each side at the neighbours of its best LR (×√2, ÷√2; each where "
    "every tune seed trained and none diverged), the other side at its best, on the same judged seeds; "
    "LR-sensitive when these verdicts differ"
)
ROUNDS = 3  # times the band's neighbours are added to a tune whose best moved to a neighbour


def tune_seed_values(count: int) -> list[int]:
    """Returns the seeds a tune trains: ``count`` seeds from ``TUNE_SEED_BASE``."""
    return [TUNE_SEED_BASE + i for i in range(count)]


def check_seeds(eval_seeds: int, tune_seeds: int, flag: str = "--seeds") -> None:
    """Raises ConfigError unless the judged seeds 1 … ``eval_seeds`` and the ``tune_seeds`` tune seeds are
    positive and disjoint."""
    if tune_seeds < 1:
        raise ConfigError(f"--tune-seeds {tune_seeds}: expected at least 1")
    if eval_seeds >= TUNE_SEED_BASE:
        raise ConfigError(
            f"{flag} {eval_seeds}: the judged seeds 1 … {eval_seeds} would reach the tune's seeds "
            f"({TUNE_SEED_BASE} …); expected fewer than {TUNE_SEED_BASE}"
        )


def entry_band(entry: dict[str, Any], unigram: float | None = None) -> list[float]:
    """Returns the band of one preset's tune (``entry``: tune.json's ``presets[preset]``), the best LR
    excluded: its tuned neighbours whose every tune seed trained (a final loss below the trained-run
    gate's, ``trained_gate.threshold(unigram)``; every finished seed when ``unigram`` is None). Empty
    when the best LR itself did not train (``trained_gate.best_trained``): a "best" among runs that
    learned nothing is noise, and has no band."""
    if not trained_gate.best_trained(entry, unigram):
        return []
    return [
        lr for lr in entry.get("lr_band") or () if lr != entry["best_lr"] and _trained(entry, lr, unigram)
    ]


def _trained(entry: dict[str, Any], lr: float, unigram: float | None) -> bool:
    losses = (entry["per_lr"].get(results.lr_key(lr)) or {}).get("losses") or {}
    limit = math.inf if unigram is None else math.log(trained_gate.threshold(unigram))
    return bool(losses) and all(loss < limit for loss in losses.values())


def failed_neighbours(entry: dict[str, Any], unigram: float | None = None) -> dict[float, str]:
    """Returns {neighbour LR of the best: why it is not in the band} of one preset's tune: diverged on a
    tune seed (unstable), a tune seed that did not train, or not tuned yet; {} when the best LR itself did
    not train (it has no band to check)."""
    if not trained_gate.best_trained(entry, unigram):
        return {}
    out = {lr: "diverged on a tune seed: unstable" for lr in entry.get("band_unstable") or ()}
    out |= {lr: "not tuned" for lr in entry.get("band_untuned") or ()}
    for lr in entry.get("lr_band") or ():
        if lr != entry["best_lr"] and not _trained(entry, lr, unigram):
            out[lr] = "a tune seed did not train: unstable"
    return dict(sorted(out.items()))


def restate(tune_json: str) -> dict[str, Any]:
    """Rewrites a stored ``tune.json`` whose points are not kept (an older committed report kept only its
    summary) under today's band rule, from its per-LR rows; returns it. Its best LRs are unchanged; a
    neighbour its grid lacks is untuned (``--reread`` trains nothing)."""
    summary = load_json(tune_json)
    for entry in summary["presets"].values():
        best = entry["per_lr"].get(results.lr_key(entry["best_lr"])) if entry["best_lr"] is not None else None
        entry.update(results.band_fields(best, entry["per_lr"]))
    atomic_write_json(tune_json, summary)
    return summary


def tune_band(
    tune: Callable[[dict[str, list[float]]], dict[str, Any]], unigram: float | None = None
) -> dict[str, Any]:
    """Returns the summary of ``tune`` (a pipeline's tune call over its grid, given each preset's extra
    LRs) once every preset's best LR has its band's neighbours tuned: they are added and tuned (on the
    same tune seeds), and again when a neighbour became the best, up to ``ROUNDS`` times. A preset whose
    best did not train (``trained_gate.best_trained``) gets none: its "best" is noise. Stops when the
    tune leaves points missing (Slurm jobs not finished, or a tune that trains nothing)."""
    extra: dict[str, list[float]] = {}
    summary = tune(extra)
    for _ in range(ROUNDS):
        if summary["missing"]:
            break
        wanted = {
            preset: entry["band_untuned"]
            for preset, entry in summary["presets"].items()
            if entry.get("band_untuned") and trained_gate.best_trained(entry, unigram)
        }
        if not wanted:
            break
        extra = {p: sorted({*extra.get(p, ()), *wanted.get(p, ())}) for p in {*extra, *wanted}}
        summary = tune(extra)
    return summary


def sensitivity(
    best: tuple[float, float],
    bands: tuple[Sequence[float], Sequence[float]],
    diffs_at: Callable[[float, float], list[float]],
    margin: float | None = None,
    outside: tuple[dict[float, str], dict[float, str]] = ({}, {}),
) -> dict[str, Any]:
    """Returns {"rule", "rows", "sensitive", "outside"}: one row (base_lr, cand_lr, n, mean, p, verdict)
    for the best pair and for each side moved over its ``bands`` LR (the other at its best);
    ``diffs_at(base_lr, cand_lr)`` gives that pair's per-seed differences in the claim's direction (an
    empty list: a pair not trained yet, left out). ``sensitive``: the rows' unadjusted verdicts are not
    all one. ``outside``: each side's neighbours of its best that are not in its band, and why
    (``failed_neighbours``): the verdict is not checked there."""
    base_best, cand_best = best
    pairs = [best, *((lr, cand_best) for lr in bands[0]), *((base_best, lr) for lr in bands[1])]
    rows = []
    for base_lr, cand_lr in pairs:
        diffs = diffs_at(base_lr, cand_lr)
        if not diffs:
            continue
        d = verdict.decide(diffs, margin=margin)
        rows.append(
            {"base_lr": base_lr, "cand_lr": cand_lr, "n": d["n"], "mean": d["mean"], "p": d["p"]}
            | {"verdict": d["verdict"]}
        )
    out = [{str(lr): why for lr, why in side.items()} for side in outside]
    return {"rule": RULE, "rows": rows, "sensitive": len({r["verdict"] for r in rows}) > 1, "outside": out}


def describe(
    record: dict[str, Any] | None, names: Sequence[str] | None = None, words: dict[str, str] | None = None
) -> str | None:
    """Returns the LR-sensitivity line of a claim in words (None: no neighbour was in either band and none
    is said to be missing); ``names`` of the two sides (default: the record's), ``words`` renames verdicts
    (the bakeoff says "better" for "agrees")."""
    if not record:
        return None
    names = names or record.get("names") or ("baseline", "candidate")
    missing = [
        f"{name} {float(lr):g} ({why})"
        for name, side in zip(names, record.get("outside") or ())
        for lr, why in side.items()
    ]
    tail = f" Not checked at: {'; '.join(missing)}." if missing else ""
    if len(record["rows"]) < 2:
        return f"LR sensitivity: not checked at any neighbour of the best LRs.{tail}" if missing else None
    cells = []
    for r in record["rows"]:
        mean = "–" if r["mean"] is None else f"{r['mean']:+.3f}"
        p = "–" if r["p"] is None else f"{r['p']:.2g}"
        said = (words or {}).get(r["verdict"], r["verdict"])
        cells.append(f"{names[0]} {r['base_lr']:g} / {names[1]} {r['cand_lr']:g}: {said} ({mean}, p {p})")
    head = "**LR-sensitive**" if record["sensitive"] else "the same verdict at every LR of both bands"
    return f"LR sensitivity ({head}; unadjusted): " + "; ".join(cells) + ("." + tail if tail else "")


# The band's rule before it was the best and its ×√2 neighbours: what a report made then states.
NOISE_BAND_RULE = (
    "the best LR and every LR whose paired per-seed loss difference to it has a two-sided 95% Student-t "
    "interval reaching 0 (the tune cannot tell them apart); one seed: the best LR alone"
)


def tune_seed_lines(h: dict[str, Any]) -> list[str]:
    """Returns the sentence on the tune's seeds and band, under the band rule the report was read with
    (``band_rule`` in its header; a report made before the neighbour band has none); none for a report
    made before tune seeds."""
    if not h.get("tune_seeds"):
        return []
    seeds = ", ".join(map(str, h["tune_seeds"]))
    judged = ", ".join(map(str, h["eval_seeds"]))
    head = (
        f"Each LR was tuned on seeds {seeds}, the best chosen by their mean; no tune seed is among the "
        f"judged seeds ({judged})."
    )
    if h.get("band_rule"):
        marks = (
            f"≈ marks the other LRs of the best's band ({h['band_rule']}) and † a neighbour that diverged "
            f"(unstable); the primary verdicts are re-read there ({h['lr_band_rule']})."
        )
    else:
        marks = (
            f"≈ marks an LR within the tune's noise of the best ({NOISE_BAND_RULE}); the primary verdicts "
            f"are re-read there ({h['lr_band_rule']})."
        )
    return [f"{head} {marks}", ""]
