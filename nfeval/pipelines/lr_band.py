"""Learning rates chosen on seeds they are not judged on, and verdicts checked across the tune's noise.

Tune seeds. Every LR of a pipeline's tune trains ``tune_seeds`` seeds numbered from ``TUNE_SEED_BASE``
(101, 102, …) and the best LR is chosen by their mean (``tune.results``); the runs a verdict is read on
use seeds 1 … N. A tune point and a judged run therefore never share an initialisation or a data order:
the LR is not picked on the noise it is then judged on.

The band. The tune's seeds also measure its noise: ``tune.json`` lists, per preset, the LRs it cannot
tell from the best (``tune.results.BAND_RULE``). Each primary verdict is re-read with one side moved to
each other LR of its band (the other at its best), on the same judged seeds: ``sensitivity`` returns
those unadjusted verdicts, and ``report.verdict.adjust`` turns a claim whose verdicts differ into
"LR-sensitive".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..base.errors import ConfigError
from ..base.jsonio import load_json
from ..report import verdict
from ..tune import results

TUNE_SEED_BASE = 101  # the first tune seed; judged seeds are 1 … N < TUNE_SEED_BASE
DEFAULT_TUNE_SEEDS = 3
RULE = (
    "the verdict re-read (unadjusted) with each side at every other LR its tune cannot tell from its best, "
    "the other side at its best, on the same judged seeds; LR-sensitive when these verdicts differ"
)


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


def band_of(tune_json: str, preset: str) -> list[float]:
    """Returns the LRs of ``preset`` that its tune cannot tell from its best, the best excluded (a
    tune.json written before bands were recorded has none)."""
    return entry_band(load_json(tune_json)["presets"][preset])


def entry_band(entry: dict[str, Any]) -> list[float]:
    """Returns the band of one preset's tune (``entry``: tune.json's ``presets[preset]``), the best LR
    excluded."""
    return [lr for lr in entry.get("lr_band") or () if lr != entry["best_lr"]]


def sensitivity(
    best: tuple[float, float],
    bands: tuple[Sequence[float], Sequence[float]],
    diffs_at: Callable[[float, float], list[float]],
    margin: float | None = None,
) -> dict[str, Any]:
    """Returns {"rule", "rows", "sensitive"}: one row (base_lr, cand_lr, n, mean, p, verdict) for the
    best pair and for each side moved over its ``bands`` LR (the other at its best); ``diffs_at(base_lr,
    cand_lr)`` gives that pair's per-seed differences in the claim's direction (an empty list: a pair
    not trained yet, left out). ``sensitive``: the rows' unadjusted verdicts are not all one."""
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
    return {"rule": RULE, "rows": rows, "sensitive": len({r["verdict"] for r in rows}) > 1}


def describe(
    record: dict[str, Any] | None, names: Sequence[str] | None = None, words: dict[str, str] | None = None
) -> str | None:
    """Returns the LR-sensitivity line of a claim in words (None: no other LR was in either band);
    ``names`` of the two sides (default: the record's), ``words`` renames verdicts (the bakeoff says
    "better" for "agrees")."""
    if not record or len(record["rows"]) < 2:
        return None
    names = names or record.get("names") or ("baseline", "candidate")
    cells = []
    for r in record["rows"]:
        mean = "–" if r["mean"] is None else f"{r['mean']:+.3f}"
        p = "–" if r["p"] is None else f"{r['p']:.2g}"
        said = (words or {}).get(r["verdict"], r["verdict"])
        cells.append(f"{names[0]} {r['base_lr']:g} / {names[1]} {r['cand_lr']:g}: {said} ({mean}, p {p})")
    head = "**LR-sensitive**" if record["sensitive"] else "the same verdict at every LR of both bands"
    return f"LR sensitivity ({head}; unadjusted): " + "; ".join(cells)


def tune_seed_lines(h: dict[str, Any]) -> list[str]:
    """Returns the sentence on the tune's seeds and band (a report written before them has none)."""
    if not h.get("tune_seeds"):
        return []
    seeds = ", ".join(map(str, h["tune_seeds"]))
    return [
        f"Each LR was tuned on seeds {seeds}, the best chosen by their mean; no tune seed is among the "
        f"judged seeds ({', '.join(map(str, h['eval_seeds']))}). ≈ marks an LR within the tune's noise of "
        f"the best ({results.BAND_RULE}); the primary verdicts are re-read there ({h['lr_band_rule']}).",
        "",
    ]
