"""Resume rules come from each TrainConfig field's declaration: none can be forgotten."""

import dataclasses

import pytest

from nfeval.base.errors import ConfigError
from nfeval.engine.training import train as train_module
from nfeval.engine.training.train_config import RESUME_RULES, TrainConfig


def test_every_field_has_exactly_one_resume_rule():
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("resume") in RESUME_RULES, f.name
    ruled = [*train_module.FIXED, *train_module.OVERRIDABLE, *train_module.FREE]
    assert sorted(ruled) == sorted(names)


def _saved_run(tmp_path, cfg: TrainConfig):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"train": {"config": dataclasses.asdict(cfg)}}))
    return str(tmp_path)


def test_free_field_changed_on_resume_is_taken(tmp_path):
    saved = TrainConfig(max_steps=10)
    out = _saved_run(tmp_path, saved)
    requested = dataclasses.replace(saved, grad_stats="2:3", device="cpu")
    cfg = train_module.resumed_config(requested, out, override=False, given={"grad_stats", "device"})
    assert cfg.grad_stats == "2:3" and cfg.device == "cpu"


def test_fixed_field_changed_on_resume_is_refused_and_overridable_needs_the_flag(tmp_path):
    saved = TrainConfig(max_steps=10)
    out = _saved_run(tmp_path, saved)
    with pytest.raises(ConfigError, match="cannot change on resume.*seed"):
        train_module.resumed_config(dataclasses.replace(saved, seed=7), out, False, {"seed"})
    with pytest.raises(ConfigError, match="--override-resume"):
        train_module.resumed_config(dataclasses.replace(saved, lr=1e-3), out, False, {"lr"})
    assert train_module.resumed_config(dataclasses.replace(saved, lr=1e-3), out, True, {"lr"}).lr == 1e-3


def test_a_rewritten_tune_record_with_the_same_lr_resumes(tmp_path):
    # a rerun rewrites tune.json (a newer nfeval's provenance: another hash) without changing its LR
    saved = TrainConfig(max_steps=10, lr=3e-3, lr_from={"sha256": "a" * 64, "lr": 3e-3})
    out = _saved_run(tmp_path, saved)
    requested = dataclasses.replace(saved, lr_from={"sha256": "b" * 64, "lr": 3e-3})
    cfg = train_module.resumed_config(requested, out, override=False, given={"lr", "lr_from"})
    assert cfg.lr == 3e-3 and cfg.lr_from["sha256"] == "b" * 64
    with pytest.raises(ConfigError, match="--override-resume"):  # a tune that now gives another LR
        train_module.resumed_config(dataclasses.replace(requested, lr=1e-3), out, False, {"lr", "lr_from"})
