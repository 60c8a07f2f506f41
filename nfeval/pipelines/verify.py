"""Re-running one committed run to see whether its number reproduces here (``reproduce --verify``).

Training is deterministic on one compute path: the same config, inputs, kernel and library builds give
the same final perplexity bit for bit (``benchmarks/RESULTS.md``, "Re-run tolerance"). On another path
(the other CPU linear kernel, another CPU vendor's instruction set, another torch build) rounding
differences grow through training and the final perplexity can differ far beyond rounding: 0.16
log-PPL between the two kernels after 300 updates of the `small` shape, as much as a change of seed.
So a re-run either reproduces exactly, or differs on the same path (a real discrepancy: changed code or
inputs), or differs on another path (expected, and said with the two paths).
"""

from __future__ import annotations

import math
import tempfile
from typing import Any

from ..engine.training.input_fingerprints import input_fingerprints
from ..engine.training.train import train
from ..engine.training.train_config import TrainConfig
from . import runs

EXACT, SAME_PATH, OTHER_PATH, OTHER_INPUTS = (
    "reproduced exactly",
    "NOT reproduced on the same compute path",
    "differs on another compute path",
    "not comparable: other inputs",
)


def verify_run(
    cfg: TrainConfig, committed: dict[str, Any], inputs: dict[str, str | None] | None = None
) -> dict[str, Any]:
    """Trains ``cfg`` in a scratch folder and sets its final validation PPL beside ``committed`` ({"ppl",
    "compute_path" (None: not recorded)}); ``inputs``: the committed run's input fingerprints (corpus,
    tokenizer), checked first. Returns {"outcome" (one of the module's four), "ppl", "committed_ppl",
    "delta_log_ppl", "compute_path", "committed_path", "text"}."""
    here = input_fingerprints(cfg)
    differ = [k for k, v in (inputs or {}).items() if v is not None and here.get(k) != v]
    if differ:
        text = f"{OTHER_INPUTS}: this machine's {' and '.join(differ)} differ from the committed run's"
        return {"outcome": OTHER_INPUTS, "differ": differ, "text": text}
    with tempfile.TemporaryDirectory(prefix="nfeval-verify-") as scratch:
        ppl = train(cfg, scratch)["val_ppl"]
        path = runs.compute_path(scratch)
    return judge(ppl, path, committed)


def judge(ppl: float, path: str | None, committed: dict[str, Any]) -> dict[str, Any]:
    """Returns the outcome of a re-run's final ``ppl`` on compute ``path`` against ``committed``."""
    old, old_path = committed["ppl"], committed.get("compute_path")
    delta = math.log(ppl / old)
    if ppl == old:
        outcome, why = EXACT, f"final PPL {ppl:.6g}, bit for bit"
    elif old_path is not None and old_path == path:
        outcome, why = SAME_PATH, "same kernel and builds: a changed code or input, not rounding"
    else:
        outcome = OTHER_PATH
        why = (
            f"committed on {old_path or 'an unrecorded path'}, re-run on {path}; runs on different kernels "
            "or builds differ beyond rounding (benchmarks/RESULTS.md, Re-run tolerance)"
        )
    text = f"{outcome}: {ppl:.6g} against the committed {old:.6g} (Δ log PPL {delta:+.4f}); {why}"
    return {
        "outcome": outcome,
        "ppl": ppl,
        "committed_ppl": old,
        "delta_log_ppl": delta,
        "compute_path": path,
        "committed_path": old_path,
        "text": text,
    }
