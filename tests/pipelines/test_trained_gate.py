"""The trained-run gate (``pipelines.trained_gate``): the unigram perplexity against a hand computation,
the gate's rule, and paired tests that drop the pairs with a run that did not train (a claim left with
fewer than two is not readable, never "worse")."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from nfeval.pipelines import trained_gate
from nfeval.report import verdict


def test_unigram_ppl_is_the_add_one_smoothed_hand_computation():
    train = np.array([0, 0, 1, 2], dtype=np.uint16)  # counts 2, 1, 1, 0 over a vocabulary of 4
    valid = np.array([0, 1, 3], dtype=np.uint16)  # token 3 unseen in training: (0 + 1) / (4 + 4)
    expected = math.exp(-(math.log(3 / 8) + math.log(2 / 8) + math.log(1 / 8)) / 3)
    assert trained_gate.unigram_ppl(train, valid, vocab_size=4) == pytest.approx(expected)
    assert expected == pytest.approx((512 / 6) ** (1 / 3))


def _run(ppl: float | None) -> dict:
    return {"status": "finished" if ppl is not None else "diverged", "val_ppl": ppl}


def test_a_run_above_unigram_over_the_factor_did_not_train():
    unigram = 677.0  # the committed small reports' corpus: threshold 677 / 1.5 ≈ 451
    assert trained_gate.trained(_run(230.0), unigram)
    assert not trained_gate.trained(_run(599.0), unigram)  # barely trained Post-LN
    assert not trained_gate.trained(_run(745.0), unigram)  # collapsed: worse than the unigram
    assert not trained_gate.trained(_run(None), unigram)  # diverged
    assert trained_gate.mark(_run(745.0), unigram)["trained"] is False
    assert "trained" not in trained_gate.mark(_run(745.0), None)  # no unigram: unmarked


def test_dropped_pairs_leave_a_claim_not_readable_below_two_pairs():
    words = "no clipping, warm-up 0.05 of the run"
    unreadable = trained_gate.gated_decide([-0.5], dropped=2, recipe_words=words)
    assert unreadable["verdict"] == trained_gate.NOT_READABLE and unreadable["p"] is None
    assert words in unreadable["why"] and unreadable["n"] == 1
    # Holm adjustment never turns it into a direction: it has no p
    (adjusted,) = verdict.adjust([{**unreadable, "family": verdict.PRIMARY}])
    assert adjusted["verdict"] == trained_gate.NOT_READABLE
    read = trained_gate.gated_decide([0.2, 0.21, 0.19], dropped=1, recipe_words=words)
    assert read["n"] == 3 and read["verdict"] == verdict.AGREES and "1 pair(s) left out" in read["why"]
    # nothing dropped: the ordinary rule (one seed is inconclusive, not "did not train")
    assert trained_gate.gated_decide([0.2], dropped=0, recipe_words=words)["verdict"] == verdict.INCONCLUSIVE


def test_a_reproduce_whose_runs_did_not_train_reads_no_claim_from_them(tmp_path):
    from nfeval.pipelines.reproduce import ReproduceConfig, run_reproduce
    from nfeval.pipelines.reproduce.report import render

    out = str(tmp_path / "o")  # the smoke scale's 8-step runs end far above its unigram PPL (about 71)
    cfg = ReproduceConfig(out=out, scale="smoke", seeds=2, only=("fig2-clm",), tune=False, progress=False)
    result = run_reproduce(cfg)
    report = json.load(open(os.path.join(out, "report.json")))
    header = report["header"]
    assert header["unigram_ppl"] > 1 and header["trained_factor"] == trained_gate.FACTOR
    assert header["trained"] == {f"clm-{a}/seed{s}": False for a in ("prenorm", "normformer") for s in (1, 2)}
    (fig2,) = [s for s in report["sections"] if s["name"] == "fig2-clm"]
    assert [c["verdict"] for c in fig2["claims"]] == [f"{trained_gate.NOT_READABLE} (untuned)"] * 2
    assert all("no clipping, warm-up 0.05 of the run" in c["why"] for c in fig2["claims"])
    assert all("left out: a run did not train" in row[1] for row in fig2["tables"][0]["rows"])
    text = open(result["report"], encoding="utf-8").read()
    assert f"it ÷ {trained_gate.FACTOR:g} = " in text and text == render(report) + "\n"


def test_a_preset_that_trains_at_no_lr_of_its_tune_is_said_so_in_reproduce(tmp_path):
    import json

    from nfeval.pipelines.reproduce.run_specs import Context
    from nfeval.pipelines.reproduce.tuning import tuning_rows
    from nfeval.pipelines.scales import SCALES

    def entry(ppls):
        rows = {str(lr): {"lr": lr, "status": "ok", "val_ppl": p} for lr, p in ppls.items()}
        best = min(ppls, key=ppls.get)
        return {"best_lr": best, "best_val_ppl": ppls[best], "per_lr": rows}

    tune = {
        "budget": {"spec": "steps=1000"},
        "presets": {
            "prenorm-small": entry({1e-3: 300.0, 1e-2: 140.0, 4e-2: 700.0}),
            "postnorm-small": entry({1e-4: 720.0, 3e-4: 599.0, 1e-3: 748.0}),  # 599: above 677 / 1.5
        },
    }
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(tune))
    ctx = Context(out=str(tmp_path), scale=SCALES["small"], budget={"max_steps": 1000}, seeds=5, tokenizer="")
    ctx.tune_files, ctx.unigram_ppl = {"clm": str(path)}, 677.0
    _, warnings = tuning_rows(ctx)
    said = [w for w in warnings if "did not train at any LR of its grid" in w]
    assert len(said) == 1 and "postnorm-small" in said[0] and "451.3" in said[0]
