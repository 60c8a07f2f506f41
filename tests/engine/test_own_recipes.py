"""Each scheme's own recipe: the records (every field a TrainConfig or ModelConfig field, each with its
source), ``own_recipe`` applying one, the check that a run naming one follows it, and the run's recipe
record naming it."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch
from conftest import tiny_train_config

from nfeval.base.errors import ConfigError
from nfeval.engine.model.config import ARCHITECTURES, INIT_SCHEMES, ModelConfig, preset
from nfeval.engine.model.initialisation import megatron_std
from nfeval.engine.model.model import Transformer
from nfeval.engine.training import recipe
from nfeval.engine.training.own_recipes import OWN_RECIPES, own_recipe_for
from nfeval.engine.training.train import train
from nfeval.engine.training.train_config import RECIPE_TRAIN_FIELDS, TrainConfig, own_recipe


@pytest.mark.parametrize("name", OWN_RECIPES)
def test_each_record_names_real_fields_and_where_each_comes_from(name):
    record = OWN_RECIPES[name]
    assert record.scheme == name and name in ARCHITECTURES
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    assert set(record.train) <= train_fields and set(record.model) <= model_fields
    assert set(record.train) <= {*RECIPE_TRAIN_FIELDS, "clip_grad"}  # the recipe, never an LR or a budget
    assert record.model["init"] in INIT_SCHEMES
    for field in record.fields():
        assert record.sources[field].strip(), field


def test_hybridnorms_recipe_is_its_authors_config():
    for name in ("hybridnorm", "hybridnormstar"):
        record = OWN_RECIPES[name]
        assert record.model == {"init": "megatron"}
        assert record.train == dict(
            warmup=8388608000 / 1e12, clip_grad=1.0, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1
        )
    assert megatron_std(2048) == pytest.approx(0.013975424859373685, rel=1e-12)  # the config's init_std
    assert OWN_RECIPES["postnorm"].model == {"init": "gpt2"} and OWN_RECIPES["postnorm"].train == {
        "warmup": 4000.0
    }


def test_own_recipe_sets_the_fields_and_names_the_scheme():
    cfg = TrainConfig(preset="hybridnormstar-small", model={"max_seq_len": 1024}, max_steps=10, warmup=0.05)
    mine = own_recipe(cfg)
    assert mine.own_recipe == "hybridnormstar" and mine.model == {"max_seq_len": 1024, "init": "megatron"}
    assert (mine.warmup, mine.clip_grad, mine.beta2, mine.weight_decay) == (0.008388608, 1.0, 0.95, 0.1)
    mine.validate()
    record = recipe.of_train_config(mine)
    assert record["own_recipe"] == "hybridnormstar" and record["init"] == "megatron"
    assert record["optimizer"]["clip_grad"] == 1.0 and record["schedule"]["warmup"] == 0.008388608
    assert recipe.describe(record).endswith("hybridnormstar's own recipe")
    assert "own_recipe" not in recipe.of_train_config(cfg)
    assert recipe.differences(recipe.of_train_config(cfg), record)  # never put beside the common recipe


def test_a_run_that_departs_from_the_recipe_it_names_is_refused():
    mine = own_recipe(TrainConfig(preset="hybridnorm-tiny", max_steps=10))
    with pytest.raises(ConfigError, match=r"own_recipe='hybridnorm' but clip_grad=0.0, its own recipe's 1.0"):
        dataclasses.replace(mine, clip_grad=0.0).validate()
    with pytest.raises(ConfigError, match=r"but model init='fairseq', its own recipe's 'megatron'"):
        dataclasses.replace(mine, model={"init": "fairseq"}).validate()
    with pytest.raises(ConfigError, match="'prenorm' has no own recipe; the schemes that have one"):
        own_recipe(TrainConfig(preset="prenorm-tiny", max_steps=10))
    with pytest.raises(ConfigError, match="'nope' has no own recipe"):
        own_recipe_for("nope")


def test_the_megatron_init_builds_the_model_the_record_names():
    torch.manual_seed(0)
    model = Transformer(preset("hybridnorm-small", init="megatron"))
    std = megatron_std(128)
    fc1 = model.blocks[0].fc1.weight.detach()
    assert float(fc1.abs().max()) <= 3 * std and float(fc1.std()) == pytest.approx(0.9866 * std, rel=0.02)
    assert float(model.blocks[0].fc2.weight.detach().abs().max()) <= 3 * std / 24**0.5


def test_a_run_under_its_own_recipe_records_it(small_corpus, tmp_path):
    cfg = own_recipe(tiny_train_config(small_corpus, preset="hybridnorm-tiny", max_steps=2))
    train(cfg, str(tmp_path / "run"))
    config = json.load(open(os.path.join(tmp_path, "run", "config.json"), encoding="utf-8"))
    assert config["recipe"]["own_recipe"] == "hybridnorm" and config["model"]["init"] == "megatron"
    assert config["recipe"]["optimizer"]["clip_grad"] == 1.0
    assert recipe.of_config(config) == config["recipe"]
