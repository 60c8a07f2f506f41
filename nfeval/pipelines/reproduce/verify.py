"""``nfeval reproduce --out DIR --verify``: re-trains one judged run of a committed reproduce folder from
what the folder keeps (its settings, its tune, its report; not its run folders) and says whether the
committed final perplexity reproduces here (``pipelines.verify``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ...base.errors import ConfigError, MissingDataError
from ...base.jsonio import load_json
from ..stages import shared_tokenizer
from ..verify import verify_run
from . import runner
from .plan import SCALES

KEY = "clm-prenorm"  # the baseline of Figure 2: every report that ran Figure 2 has it


def verify_committed(
    out: str, train_data: str | None = None, valid_data: str | None = None, seed: int = 1
) -> dict[str, Any]:
    """Re-trains Figure 2's Pre-LN run at ``seed`` as the folder ``out`` trained it (its settings, tuned
    LR and tokenizer; the corpus its settings name, or ``train_data``/``valid_data``) and returns
    ``verify_run``'s result with the run's key and seed."""
    settings_path, data_path = (
        os.path.join(out, f) for f in ("reproduce.json", "experiments/fig2-clm/data.json")
    )
    for path in (settings_path, data_path):
        if not os.path.isfile(path):
            raise MissingDataError(f"{path}: not found (--verify reads a reproduce folder that ran fig2-clm)")
    settings = load_json(settings_path)
    comparison = (load_json(data_path).get("comparisons") or {}).get(str(seed))
    if not comparison:
        raise ConfigError(f"{data_path}: no comparison for seed {seed} to verify")
    corpus = [train_data, valid_data] if train_data else settings.get("corpus") or [None, None]
    for path in corpus:
        if path and not os.path.exists(path):
            raise MissingDataError(
                f"{path}: the corpus {settings_path} names is not here; give --train-data and --valid-data"
            )
    scale = SCALES[settings["scale"]]
    scale = dataclasses.replace(
        scale, budget=settings["budget"], tune_lrs=tuple(settings.get("tune_lrs") or scale.tune_lrs)
    )
    ctx = runner.Context(
        out=out,
        scale=scale,
        budget=settings["budget"],
        seeds=seed,
        tokenizer=shared_tokenizer(out, scale.vocab_size, *corpus),
        train_data=corpus[0],
        valid_data=corpus[1],
        device="cpu",
        progress=False,
    )
    tune = os.path.join(out, "tune", "clm", "tune.json")
    if settings.get("tune"):
        ctx.tune_files = {"clm": tune}
    cfg = runner.train_config(ctx, KEY, seed)
    report = load_json(os.path.join(out, "report.json"))
    paths = report["header"].get("compute_paths") or []
    committed = {
        "ppl": comparison["runs"][0]["final_val_ppl"],
        "compute_path": paths[0] if len(paths) == 1 else None,
    }
    inputs = (load_json(tune).get("base_config") or {}).get("inputs") if settings.get("tune") else None
    return {"key": KEY, "seed": seed, **verify_run(cfg, committed, inputs)}
