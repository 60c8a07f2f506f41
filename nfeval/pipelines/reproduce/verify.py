"""``nfeval reproduce --out DIR --verify``: re-trains one judged run of a committed reproduce folder from
what the folder keeps (its settings, its tune, its report; not its run folders) and says whether the
committed final perplexity reproduces here (``pipelines.verify``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ...base.errors import ConfigError, DataError, MissingDataError
from ...base.jsonio import load_json, reading
from .. import archive
from ..scales import SCALES
from ..stages import shared_tokenizer
from ..verify import verify_run
from . import run_specs

KEY = "clm-prenorm"  # the baseline of Figure 2: every report that ran Figure 2 has it


def verify_committed(
    out: str, train_data: str | None = None, valid_data: str | None = None, seed: int = 1
) -> dict[str, Any]:
    """Re-trains Figure 2's Pre-LN run at ``seed`` as the folder ``out`` trained it (its settings, tuned
    LR and tokenizer; the corpus its settings name, or ``train_data``/``valid_data``) and returns
    ``verify_run``'s result with the run's key and seed. What the folder keeps is read before any work:
    a file without what it should hold is a one-line DataError naming it (``jsonio.reading``)."""
    archive.unpack(out)  # a committed folder keeps its records in records.tar.xz
    settings_path, data_path = (
        os.path.join(out, f) for f in ("reproduce.json", "experiments/fig2-clm/data.json")
    )
    for path in (settings_path, data_path):
        if not os.path.isfile(path):
            raise MissingDataError(f"{path}: not found (--verify reads a reproduce folder that ran fig2-clm)")
    settings = load_json(settings_path)
    committed = _committed(out, data_path, seed)
    with reading(settings_path, "the reproduce.json that nfeval reproduce writes"):
        train, valid = [train_data, valid_data] if train_data else settings.get("corpus") or [None, None]
        if settings.get("scale") not in SCALES:
            raise DataError(
                f"{settings_path}: key 'scale' is {settings.get('scale')!r}; expected one of {sorted(SCALES)}"
            )
        scale = SCALES[settings["scale"]]
        tune_lrs = tuple(float(lr) for lr in settings.get("tune_lrs") or scale.tune_lrs)
        scale = dataclasses.replace(scale, budget=dict(settings["budget"]), tune_lrs=tune_lrs)
    for flag, path in (("--train-data", train), ("--valid-data", valid)):
        if path and not os.path.exists(path) and train_data:
            raise MissingDataError(f"{flag} {path}: no such file or folder")
        if path and not os.path.exists(path):
            raise MissingDataError(
                f"{path}: the corpus {settings_path} names is not here; give --train-data and --valid-data"
            )
    ctx = run_specs.Context(
        out=out,
        scale=scale,
        budget=scale.budget,
        seeds=seed,
        tokenizer=shared_tokenizer(out, scale.vocab_size, train, valid),
        train_data=train,
        valid_data=valid,
        device="cpu",
        progress=False,
    )
    tune = os.path.join(out, "tune", "clm", "tune.json")
    inputs = None
    if settings.get("tune"):
        ctx.tune_files = {"clm": tune}
        with reading(tune, "the tune.json that nfeval tune writes"):
            inputs = (load_json(tune).get("base_config") or {}).get("inputs")
    cfg = run_specs.train_config(ctx, KEY, seed)
    return {"key": KEY, "seed": seed, **verify_run(cfg, committed, inputs)}


def _committed(out: str, data_path: str, seed: int) -> dict[str, Any]:
    """Returns what the folder says the run at ``seed`` reached: {"ppl": its final validation PPL (Figure
    2's data.json), "compute_path": the report's one compute path, or None when it names several}."""
    with reading(data_path, "the data.json that nfeval reproduce writes for fig2-clm"):
        comparison = (load_json(data_path).get("comparisons") or {}).get(str(seed))
        if not comparison:
            raise ConfigError(f"{data_path}: no comparison for seed {seed} to verify")
        ppl = comparison["runs"][0]["final_val_ppl"]
        if isinstance(ppl, bool) or not isinstance(ppl, (int, float)) or not ppl > 0:
            raise DataError(
                f"{data_path}: key 'comparisons.{seed}.runs.0.final_val_ppl' is {ppl!r}; expected a "
                "positive number"
            )
    report_path = os.path.join(out, "report.json")
    with reading(report_path, "the report.json that nfeval reproduce writes"):
        paths = list(load_json(report_path)["header"].get("compute_paths") or [])
    return {"ppl": ppl, "compute_path": paths[0] if len(paths) == 1 else None}
