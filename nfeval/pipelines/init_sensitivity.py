"""Every report's look at its schemes before any training: each run's model as its init draws it, read on a
batch of the report's own corpus (``analysis.token_sensitivity``: the cosine of the last layer's states
across positions and how much a position's state moves when its own token is replaced), so that a stack
blind to its input is seen up front, not read later as a scheme that "did not train".

Measured once per output folder into ``token_sensitivity.json`` (keyed by the run names it covers; a
rerun adds what is missing), printed as each model is read, and stated in the report's header.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tokenizers import Tokenizer

from ..analysis.token_sensitivity import CHANGE_LIMIT, COSINE_LIMIT, sensitivity_at_init, token_batch
from ..base.artifacts import atomic_write_json
from ..base.jsonio import load_json
from ..engine.text.data import open_token_shards
from ..engine.text.tokenization import special_ids
from ..engine.training.run_inputs import build_inputs, inputs_key, model_config
from ..engine.training.train_config import TrainConfig

FILE = "token_sensitivity.json"
BATCH, SEQ_LEN, SAMPLES, SEED = 4, 128, 64, 0  # one batch of the corpus; positions whose token is replaced


def measure(out: str, configs: dict[str, TrainConfig], log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Returns the token sensitivity at initialisation of each run of ``configs`` ({name: the TrainConfig
    it trains under}: its model, init and seed-0 draw), on one batch of its training corpus; stored in
    ``out/token_sensitivity.json`` and read from there on a rerun."""
    path = os.path.join(out, FILE)
    stored: dict[str, Any] = load_json(path) if os.path.isfile(path) else {}
    inputs: dict[tuple, tuple] = {}  # a report's models share their corpus: it is read once
    for name, cfg in configs.items():
        if name in stored:
            continue
        key = inputs_key(cfg)
        if key not in inputs:
            _, tok_json, folder = build_inputs(cfg)
            tok = Tokenizer.from_str(tok_json)
            inputs[key] = (tok, open_token_shards(folder, special_ids(tok)))
        tok, data = inputs[key]
        mcfg = model_config(cfg, tok.get_vocab_size(), data.specials.pad)
        seq_len = min(SEQ_LEN, mcfg.max_seq_len)
        idx = token_batch(data.train, BATCH, seq_len, seed=SEED)
        result = sensitivity_at_init(mcfg, idx, seed=SEED, samples=SAMPLES, name=name)
        log(f"token sensitivity at initialisation: {result.text()}")
        stored[name] = {**result.to_dict(), "init": mcfg.init, "batch": [BATCH, seq_len]}
        atomic_write_json(path, stored)
    return [stored[name] for name in configs]


def lines(records: list[dict[str, Any]] | None) -> list[str]:
    """Returns the report header's paragraph on ``records`` (``measure``'s), or none for a report made
    before it was measured."""
    if not records:
        return []

    cells = []
    for r in records:
        cell = (
            f"{r['name']} {r['position_cosine']:.3f} / {100 * r['own_token_change']:.1f}% ({r['init']} init)"
        )
        cells.append(f"**{cell}: FLAGGED**" if r["flagged"] else cell)
    batch, seq_len = records[0]["batch"]
    flagged = [r["name"] for r in records if r["flagged"]]
    verdict = (
        f"{', '.join(flagged)}: the last layer barely depends on its input before any training"
        if flagged
        else "none is flagged"
    )
    return [
        f"**Token sensitivity at initialisation** (before any training; {batch} × {seq_len} tokens of the "
        "training corpus; the mean cosine of the last layer's states across positions / the relative change "
        "of a position's last-layer state when its own token is replaced; flagged above "
        f"{COSINE_LIMIT:g} cosine or below {CHANGE_LIMIT:.0%} change): {'; '.join(cells)}. {verdict}.",
        "",
    ]
