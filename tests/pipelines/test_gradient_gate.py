"""The trained-run gate in Figures 3 and 7 reads each claim's own runs: a Post-LN that trained at no seed
leaves its own claim unreadable, not Pre-LN's or NormFormer's (the first `small` re-run read every
gradient claim as "did not train" because Post-LN, a run none of them reads, ended above the gate)."""

from __future__ import annotations

from types import SimpleNamespace

from nfeval.pipelines import trained_gate
from nfeval.pipelines.reproduce import gradient_experiment as ge
from nfeval.report import verdict

SEEDS = (1, 2, 3, 4, 5)
IDS = ("fig3/prenorm-early", "fig3/postnorm-reverse", "fig3/normformer-evens", "fig7/fc2")


def _gated(monkeypatch, untrained: dict[str, set[int]]) -> dict[str, dict]:
    """Returns the gated claims by id, with ``untrained`` {run key: seeds that did not train} and every
    claim's per-seed value 0.5 + seed / 100 over the seeds it is measured on."""

    def ensure_run(ctx, key, seed):
        return {"seed": seed, "status": "finished", "trained": seed not in untrained.get(key, set())}

    measured_on = []

    def measured(ctx, keys, seeds, folder):
        measured_on.append(list(seeds))
        claims = [
            {"id": i, "claim": i, "measured": "m", **verdict.decide([0.5 + s / 100 for s in seeds])}
            for i in IDS
        ]
        return {"claims": claims}

    monkeypatch.setattr(ge, "ensure_run", ensure_run)
    monkeypatch.setattr(ge, "_measured", measured)
    ctx = SimpleNamespace(seed_values=SEEDS)
    stated = measured(ctx, (), list(SEEDS), None)["claims"]
    out = ge._gated_claims(ctx, ("clm-prenorm", "clm-normformer", "clm-postnorm"), stated)
    assert [c["id"] for c in out] == list(IDS)  # the stated order
    return {c["id"]: c | {"remeasured": measured_on[1:]} for c in out}


def test_a_run_that_never_trained_leaves_only_its_own_claim_unreadable(monkeypatch):
    claims = _gated(monkeypatch, {"clm-postnorm": set(SEEDS)})
    assert claims["fig3/postnorm-reverse"]["verdict"] == trained_gate.NOT_READABLE
    assert claims["fig3/postnorm-reverse"]["p"] is None
    for claim_id in ("fig3/prenorm-early", "fig3/normformer-evens", "fig7/fc2"):
        assert claims[claim_id]["verdict"] == verdict.AGREES and claims[claim_id]["n"] == 5


def test_a_seed_is_left_out_of_the_claims_that_read_the_run_that_did_not_train_there(monkeypatch):
    claims = _gated(monkeypatch, {"clm-normformer": {2}})
    assert claims["fig3/prenorm-early"]["n"] == 5  # Pre-LN alone: every seed
    for claim_id in ("fig3/normformer-evens", "fig7/fc2"):
        c = claims[claim_id]
        assert c["n"] == 4 and "1 pair(s) left out: a run did not train" in c["why"]
    assert claims["fig7/fc2"]["remeasured"] == [[1, 3, 4, 5]]  # measured again on its own seeds
