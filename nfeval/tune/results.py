"""Reading a learning-rate tune: the best LR per preset, the stability table and plot, and ``tuned_lr``
(what ``nfeval train --lr-from DIR/tune.json`` takes).

Kept apart from ``nfeval.tune.sweep`` (which runs the points) so that readers of ``tune.json`` (``nfeval
train``, ``nfeval compare``) import neither torch nor the training engine.

Selection. A point is one (preset, lr, seed) short run with status ``ok`` (a finite validation loss
at the end of the budget) or ``diverged`` (TrainingDiverged, a non-finite validation loss, or one above
``divergence_threshold``: worse than guessing uniformly over the vocabulary by DIVERGED_MARGIN nats); a
point of the grid with no result is ``missing``. An LR's value is the perplexity of its mean validation loss
over seeds (the geometric mean of the seeds' perplexities); an LR with a diverged seed is diverged and
one with a missing seed is incomplete: neither can be best. The best LR has the lowest value, the
smaller LR on ties.

The band. ``lr_band`` holds the best LR and its two neighbours at ×√2 and ÷√2 (``neighbours``: three
significant digits, as an LR is stored) where the tune trained them on every seed without a divergence
(``BAND_RULE``). It is fixed by the grid and the best LR alone, never by the tune's noise: a band read
from noise can hold an unstable LR far from the best and miss a stable one beside it. A verdict read at
the best LR is checked at its neighbours (``pipelines.lr_band``, which also asks that every neighbour's
seeds trained); a neighbour the grid lacks is listed in ``band_untuned`` (``pipelines.lr_band`` adds
those points) and one that diverged or is incomplete in ``band_unstable``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Sequence
from typing import Any

from ..base.errors import ConfigError, DataError, MissingDataError
from ..base.escape import text_cell
from ..base.jsonio import file_sha256, load_json
from ..base.sweep_points import lr_key
from ..engine.training import recipe
from ..engine.training.train_config import TrainConfig

OK, DIVERGED, MISSING = "ok", "diverged", "missing"
BUDGET_FIELDS = {"steps": "max_steps", "tokens": "max_tokens", "flops": "max_flops", "seconds": "max_seconds"}
# A final validation loss this many nats above ln(vocab_size) (a uniform guess) learned nothing: diverged.
DIVERGED_MARGIN = 1.0
# exp() of a larger loss overflows a float: the threshold when the vocabulary size is not recorded.
MAX_LOSS = 700.0


def divergence_threshold(vocab_size: int | None) -> float:
    """Returns the final validation loss above which a point counts as diverged: ln(vocab_size) +
    DIVERGED_MARGIN, or MAX_LOSS when the vocabulary size is unknown."""
    if isinstance(vocab_size, int) and vocab_size > 1:
        return min(math.log(vocab_size) + DIVERGED_MARGIN, MAX_LOSS)
    return MAX_LOSS


def point_status(point: dict[str, Any]) -> tuple[str, str | None]:
    """Returns (status, why) of a point result: ``diverged`` with the reason when it did not finish,
    its final validation loss is not a finite number, or it lies above ``divergence_threshold``."""
    loss = point.get("val_loss")
    if point.get("status") != OK:
        return DIVERGED, point.get("message")
    if not isinstance(loss, (int, float)) or not math.isfinite(loss):
        return DIVERGED, f"non-finite final validation loss {loss}"
    limit = divergence_threshold(point.get("vocab_size"))
    if loss > limit:
        return DIVERGED, f"final validation loss {loss:.4g} above the divergence threshold {limit:.4g}"
    return OK, None


def mark_diverged(points: Sequence[dict]) -> list[dict]:
    """Returns ``points`` with each point's status, message and val_ppl set by ``point_status`` (older
    point files may hold an ``ok`` point whose loss is above the threshold)."""
    out = []
    for p in points:
        status, why = point_status(p)
        if status != OK:
            p = {**p, "status": status, "message": p.get("message") or why, "val_ppl": None}
        out.append(p)
    return out


BAND_RULE = (
    "the best LR and its neighbours at ×√2 and ÷√2, each where every tune seed finished without diverging"
)
NEIGHBOUR = math.sqrt(2.0)


def neighbours(lr: float) -> tuple[float, float]:
    """Returns the band's neighbours of ``lr``: lr ÷ √2 and lr × √2, to three significant digits."""
    return float(f"{lr / NEIGHBOUR:.3g}"), float(f"{lr * NEIGHBOUR:.3g}")


def _lr_row(preset: str, lr: float, seeds: Sequence[int], by_point: dict) -> dict[str, Any]:
    runs = [by_point.get((preset, lr_key(lr), s)) for s in seeds]
    done = [r for r in runs if r is not None]
    diverged = [r for r in done if point_status(r)[0] != OK]
    missing = len(runs) - len(done)
    status = DIVERGED if diverged else MISSING if missing else OK
    loss = statistics.fmean(r["val_loss"] for r in done) if status == OK else None
    return {
        "lr": float(lr),
        "status": status,
        "val_loss": loss,
        "val_ppl": math.exp(loss) if loss is not None else None,
        "losses": {str(r["seed"]): r["val_loss"] for r in done} if status == OK else None,
        "seeds_ok": len(done) - len(diverged),
        "seeds_diverged": len(diverged),
        "seeds_missing": missing,
    }


def band_fields(best: dict[str, Any] | None, per_lr: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Returns one preset's band fields of tune.json (``lr_band``, ``band_untuned``, ``band_unstable``,
    ``band_rule``) for its best per-LR row and its rows (``lr_band``)."""
    band = lr_band(best, per_lr)
    return {
        "lr_band": band["lrs"],
        "band_untuned": band["untuned"],
        "band_unstable": band["unstable"],
        "band_rule": BAND_RULE,
    }


def summarize(
    points: Sequence[dict],
    presets: Sequence[str],
    lrs: Sequence[float],
    seeds: Sequence[int],
    extra: dict[str, Sequence[float]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Returns {preset: {"best_lr", "best_val_ppl", "lr_band", "band_untuned", "band_unstable", "per_lr",
    "stability"}} over presets × lrs × seeds, each preset's ``extra`` LRs added to its grid.

    ``points`` are point results (preset, lr, seed, status, val_loss); see the module docstring for the
    rule. ``best_lr`` is None when no LR finished without diverging. ``stability`` counts the LRs that
    diverged or are incomplete and gives the spread (max / min) of the finite perplexities.
    """
    by_point = {(p["preset"], lr_key(p["lr"]), p["seed"]): p for p in points}
    out = {}
    for preset in presets:
        grid = sorted(set(float(lr) for lr in [*lrs, *(extra or {}).get(preset, ())]))
        per_lr = {lr_key(lr): _lr_row(preset, lr, seeds, by_point) for lr in grid}
        ok = [row for row in per_lr.values() if row["status"] == OK]
        best = min(ok, key=lambda row: (row["val_ppl"], row["lr"]), default=None)
        ppls = [row["val_ppl"] for row in ok]
        out[preset] = {
            "best_lr": best["lr"] if best else None,
            "best_val_ppl": best["val_ppl"] if best else None,
            **band_fields(best, per_lr),
            "per_lr": per_lr,
            "stability": {
                "lrs": len(grid),
                "diverged": sum(row["status"] == DIVERGED for row in per_lr.values()),
                "incomplete": sum(row["status"] == MISSING for row in per_lr.values()),
                "ppl_min": min(ppls, default=None),
                "ppl_max": max(ppls, default=None),
                "ppl_spread": max(ppls) / min(ppls) if ppls else None,
            },
        }
    return out


def lr_band(best: dict[str, Any] | None, per_lr: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """Returns {"lrs": the band, ascending, ``best`` included; "untuned": neighbours the grid lacks or
    has not finished on every seed; "unstable": neighbours with a diverged seed} (``BAND_RULE``); all empty
    without a best."""
    out: dict[str, list[float]] = {"lrs": [], "untuned": [], "unstable": []}
    if best is None:
        return out
    out["lrs"].append(best["lr"])
    for lr in neighbours(best["lr"]):
        row = per_lr.get(lr_key(lr))
        status = MISSING if row is None else row["status"]
        where = {OK: "lrs", DIVERGED: "unstable", MISSING: "untuned"}[status]
        out[where].append(lr)
    return {k: sorted(v) for k, v in out.items()}


def tried(row: dict[str, Any]) -> bool:
    """Returns whether a per-LR row of a tune ran on any seed (a band neighbour not trained yet has not)."""
    return row["status"] != MISSING or row["seeds_ok"] + row["seeds_diverged"] > 0


def warnings_for(presets: dict[str, dict[str, Any]]) -> list[str]:
    """Returns warnings about a summary: no usable LR, or a best LR on the edge of the grid."""
    out = []
    for preset, s in presets.items():
        lrs = [row["lr"] for row in s["per_lr"].values() if tried(row)]
        if s["best_lr"] is None:
            out.append(f"{preset}: no learning rate finished without diverging; no best LR")
        elif len(lrs) > 1 and s["best_lr"] in (min(lrs), max(lrs)):
            edge = "smallest" if s["best_lr"] == min(lrs) else "largest"
            out.append(
                f"{preset}: the best LR {lr_key(s['best_lr'])} is the {edge} of the grid; "
                "the optimum may lie outside it (widen --lrs)"
            )
    return out


def grid_cells(entry: dict[str, Any]) -> str:
    """Returns one preset's tune in a cell: "LR: final PPL" per LR of the grid, ascending, the best
    marked *, the other LRs of its band ≈ and an unstable neighbour † (``BAND_RULE``)."""
    band = entry.get("lr_band") or ()
    cells = []
    for row in sorted(entry["per_lr"].values(), key=lambda r: r["lr"]):
        ppl = row["status"] if row["val_ppl"] is None else f"{row['val_ppl']:.2f}"
        unstable = entry.get("band_unstable") or ()
        mark = "*" if row["lr"] == entry["best_lr"] else "≈" if row["lr"] in band else ""
        mark += "†" if row["lr"] in unstable else ""
        cells.append(f"{lr_key(row['lr'])}: {ppl}{mark}")
    return "; ".join(cells)


def _cell(row: dict[str, Any], best: bool) -> str:
    if row["status"] == DIVERGED:
        return "diverged"
    if row["status"] == MISSING:
        return "missing" if row["seeds_ok"] == 0 else f"{row['seeds_ok']} seed(s)"
    return f"{row['val_ppl']:.2f}" + ("*" if best else "")


def format_table(summary: dict[str, Any]) -> str:
    """Returns tune.json's summary as a text table: final validation PPL per preset and LR (best marked *),
    the best LR, and the stability columns (diverged LRs out of the grid, PPL spread max/min). Names and
    messages are put on one line each (``escape.text_cell``): one line per preset, missing point and
    warning."""
    presets = summary["presets"]
    lrs = sorted({row["lr"] for s in presets.values() for row in s["per_lr"].values()})
    header = ["preset", *(lr_key(lr) for lr in lrs), "best lr", "diverged", "ppl spread"]
    rows = [header]
    for name, s in presets.items():
        st = s["stability"]
        cells = [_cell(s["per_lr"][lr_key(lr)], lr == s["best_lr"]) for lr in lrs]
        spread = "–" if st["ppl_spread"] is None else f"{st['ppl_spread']:.2f}x"
        best = "–" if s["best_lr"] is None else lr_key(s["best_lr"])
        rows.append([text_cell(name), *cells, best, f"{st['diverged']}/{st['lrs']}", spread])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    budget = summary["budget"]
    lines += [
        "",
        f"final validation perplexity after budget {budget['spec']}, "
        f"{len(summary['grid']['seeds'])} seed(s) per LR; * best LR",
        "diverged LRs are never best; ppl spread = max/min over the LRs that did not diverge",
    ]
    for name, s in presets.items():
        if len(s.get("lr_band") or ()) > 1:
            band = ", ".join(lr_key(lr) for lr in s["lr_band"])
            lines.append(text_cell(f"{name}: the band (the best and its stable ×√2 neighbours): {band}"))
    lines += [
        text_cell(f"missing: {m['preset']} lr={lr_key(m['lr'])} seed={m['seed']}") for m in summary["missing"]
    ]
    lines += [text_cell(f"warning: {w}") for w in summary["warnings"]]
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: str) -> str:
    """Draws final validation PPL vs LR (log-log), one line per preset, diverged LRs as x marks along the
    top edge; writes the PNG atomically to ``path`` and returns it."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FormatStrFormatter

    from ..base.plots import save_png

    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    top = ax.get_xaxis_transform()  # x in data, y in axes coordinates
    for i, (name, s) in enumerate(summary["presets"].items()):
        rows = sorted(s["per_lr"].values(), key=lambda row: row["lr"])
        ok = [row for row in rows if row["status"] == OK]
        (line,) = ax.plot([r["lr"] for r in ok], [r["val_ppl"] for r in ok], marker="o", label=name)
        diverged = [row["lr"] for row in rows if row["status"] == DIVERGED]
        if diverged:
            ax.plot(
                diverged,
                [0.96 - 0.04 * i] * len(diverged),
                "x",
                ms=9,
                mew=2,
                color=line.get_color(),
                transform=top,
            )
        if s["best_lr"] is not None:
            ax.plot([s["best_lr"]], [s["best_val_ppl"]], "*", ms=14, color=line.get_color())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))  # plain numbers on a narrow log range
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_xlabel("peak learning rate (log scale)")
    ax.set_ylabel("final validation perplexity (log scale)")
    ax.set_title(f"LR tune, budget {summary['budget']['spec']}  (x: diverged, *: best)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save_png(fig, path)


# ------------------------------------------------------------------ --lr-from and run descriptions


def tuned_lr(tune_json: str, preset: str) -> tuple[float, dict[str, Any]]:
    """Returns (best LR of ``preset`` in ``tune_json``, the record of where it came from: file and its
    sha256, preset, grid, points and seeds behind it, budget, the best point's validation PPL)."""
    if not os.path.isfile(tune_json):
        raise MissingDataError(f"{tune_json}: not found (expected the tune.json that nfeval tune writes)")
    data = load_json(tune_json)
    presets, budget = data.get("presets"), data.get("budget")
    if not isinstance(presets, dict) or not isinstance(budget, dict) or "spec" not in budget:
        raise DataError(f"{tune_json}: expected the keys 'presets' and 'budget.spec' of an nfeval tune.json")
    if preset not in presets:
        raise ConfigError(
            f"{tune_json}: preset {preset!r} was not tuned there (it has {sorted(presets)}); "
            f"run nfeval tune --preset {preset} or pass --lr"
        )
    entry = presets[preset]
    best = entry.get("best_lr") if isinstance(entry, dict) else None
    if best is None:
        raise DataError(
            f"{tune_json}: field 'presets.{preset}.best_lr' is empty (every LR diverged or is missing)"
        )
    if isinstance(best, bool) or not isinstance(best, (int, float)) or not 0 < best < math.inf:
        raise DataError(
            f"{tune_json}: field 'presets.{preset}.best_lr' is {best!r}; expected a positive finite number"
        )
    per_lr = entry.get("per_lr") or {}
    sha = file_sha256(tune_json)
    try:
        grid = sorted(float(row["lr"]) for row in per_lr.values())
        points = sum(int(row["seeds_ok"]) + int(row["seeds_diverged"]) for row in per_lr.values())
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise DataError(f"{tune_json}: field 'presets.{preset}.per_lr' is malformed ({e!r})") from None
    record = {
        "file": os.path.abspath(tune_json),
        "sha256": sha,
        "preset": preset,
        "lr": float(best),
        "grid": grid,
        "points": points,
        "seeds": len((data.get("grid") or {}).get("seeds") or []),
        "budget": budget["spec"],
        "best_val_ppl": entry.get("best_val_ppl"),
    }
    return float(best), record


def with_tuned_lr(
    cfg: TrainConfig, tune_json: str, lr_given: bool = False, deviations: Sequence[str] = ()
) -> TrainConfig:
    """Returns ``cfg`` with its lr taken from ``tune_json`` for its preset and ``lr_from`` set to the
    record of where it came from. ConfigError: ``lr_given`` (--lr on the same command line), or ``cfg``'s
    recipe differs from the one the tune trained under in a field other than ``deviations`` (dotted
    ``engine.training.recipe`` fields a caller changes on purpose, e.g. ``schedule.warmup``), or the
    tune's recipe
    cannot be told."""
    if lr_given:
        raise ConfigError("--lr and --lr-from both given: pass one")
    lr, record = tuned_lr(tune_json, cfg.preset)
    tuned = load_json(tune_json).get("recipe")
    if not isinstance(tuned, dict):
        raise ConfigError(
            f"{tune_json}: records no training recipe (written before nfeval recorded one, or its points "
            "differ): its LR cannot be trusted for this run's recipe; rerun nfeval tune"
        )
    differ = [
        d for d in recipe.differences(tuned, recipe.of_train_config(cfg)) if d.split(":")[0] not in deviations
    ]
    if differ:
        raise ConfigError(
            f"{tune_json}: tuned under another recipe than this run's ({'; '.join(differ)}); tune under "
            "this recipe, or pass --lr"
        )
    return dataclasses.replace(cfg, lr=lr, lr_from=record)


def describe_lr(train_config: dict[str, Any]) -> dict[str, Any]:
    """Returns {"lr", "tuned", "label"} for a run's ``config.json`` field ``train.config``; the label reads
    "lr X, tuned (N points, budget SPEC)" when the LR came from nfeval tune, else "lr X, untuned"."""
    lr, record = train_config.get("lr"), train_config.get("lr_from")
    if not isinstance(lr, (int, float)):
        return {"lr": None, "tuned": False, "label": "lr unknown"}
    if isinstance(record, dict):
        label = f"lr {lr:g}, tuned ({record.get('points')} points, budget {record.get('budget')})"
        return {"lr": lr, "tuned": True, "label": label}
    return {"lr": lr, "tuned": False, "label": f"lr {lr:g}, untuned"}
