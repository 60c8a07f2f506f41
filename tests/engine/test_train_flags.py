"""``nfeval train``'s flags come from TrainConfig's declarations, and a config written back as flags
(``to_flags``) parses, through the real command's parser, to the same config: every field, every type."""

import argparse
import dataclasses
import shlex

import pytest

from nfeval.cli import build_parser
from nfeval.commands.train import add_arguments
from nfeval.engine.training.train_config import TrainConfig, own_recipe, parse_set, set_item
from nfeval.engine.training.train_flags import FIELDS, config_from_args, flag_name, to_flags, value_type

RECORD = {"file": "/t/tune.json", "sha256": "a" * 64, "lr": 0.003, "grid": [0.001, 0.003], "points": 4}
# Each config sets every field it can to a value other than its default (train_data and hf_dataset
# exclude each other; tensorboard's "" is the flag without a value)
SAMPLES = [
    TrainConfig(
        preset="prenorm-small",
        model={
            "scale_attn": False,  # a bool the old script wrote as Python's False
            "scale_fc": True,
            "dropout": 0.1,
            "layer_norm_eps": 1e-06,
            "n_layer": 2,
            "norm": "rmsnorm",
            "normformer_norm": None,
            "init": "fairseq",
        },
        objective="mlm",
        train_data="my corpus/train.txt",
        valid_data="-valid.txt",  # a value starting with "-" stays a value
        tokenizer="tok/tokenizer.json",
        vocab_size=600,
        batch_size=3,
        seq_len=17,
        grad_accum=2,
        max_steps=11,
        max_tokens=2_000_000_000_000,
        max_flops=1.5e18,
        max_seconds=0.25,
        calibration_steps=3,
        lr=0.0006000000000000001,  # repr keeps every bit
        warmup=120.0,
        end_lr=1e-07,
        lr_power=0.5,
        beta1=0.8,
        beta2=0.95,
        eps=1e-08,
        weight_decay=0.0,
        clip_grad=1.0,
        dtype="bf16",
        compile=True,
        device="cuda:1",
        fsdp=True,
        log_interval=0,
        eval_interval=7,
        eval_samples=5,
        ckpt_interval=0,
        peak_flops=312e12,
        seed=4,
        progress=False,
        lr_from=RECORD,
        grad_stats="2:3",
        tensorboard="",
    ),
    TrainConfig(
        model={"positions": "sinusoidal", "scale_embedding": True},
        hf_dataset="wikitext",
        hf_config="wikitext-103-raw-v1",
        text_column="body",
        max_tokens=10_000,
        tensorboard="tb dir",
        grad_stats="950:1000",
        device="cpu",
    ),
    own_recipe(TrainConfig(preset="hybridnorm-tiny", max_steps=3)),  # --own-recipe and the fields it sets
]


def parsed(flags: list[str]) -> TrainConfig:
    return config_from_args(build_parser("train").parse_args(["train", "--out", "run", *flags]))


def test_the_samples_set_every_field_and_every_optional_field_defaults_to_none():
    default = TrainConfig()
    for f in FIELDS.values():
        assert any(getattr(c, f.name) != getattr(default, f.name) for c in SAMPLES), f.name
        if "None" in str(f.type):  # to_flags writes no None: it is every optional field's default
            assert getattr(default, f.name) is None, f.name


@pytest.mark.parametrize("cfg", SAMPLES)
def test_a_config_written_as_flags_parses_back_to_itself(cfg):
    flags = to_flags(cfg)
    assert parsed(flags) == cfg
    assert parsed(shlex.split(shlex.join(flags))) == cfg  # as a shell line, too
    back = parsed(flags)
    for f in FIELDS.values():  # the same types as well as equal values (1e9 is read as a float, kept as int)
        assert type(getattr(back, f.name)) is type(getattr(cfg, f.name)), f.name


def test_every_field_round_trips_alone():
    base, default = TrainConfig(max_steps=1), TrainConfig()
    for cfg in SAMPLES:
        for f in (f for f in FIELDS.values() if getattr(cfg, f.name) != getattr(default, f.name)):
            one = dataclasses.replace(base, **{f.name: getattr(cfg, f.name)})
            if one.valid_data and not one.train_data:
                one = dataclasses.replace(one, train_data="t.txt")
            if one.own_recipe:  # a run that names an own recipe follows it (TrainConfig.validate)
                one = own_recipe(dataclasses.replace(one, preset=cfg.preset))
            assert parsed(to_flags(one)) == one, f.name


def test_the_defaults_write_no_flag_and_bools_write_their_flag_or_its_negation():
    assert to_flags(TrainConfig()) == []
    assert to_flags(TrainConfig(compile=True, progress=False)) == ["--compile", "--no-progress"]
    assert parsed(["--max-steps", "1", "--no-compile", "--progress"]) == TrainConfig(max_steps=1)
    flags = to_flags(TrainConfig(max_steps=2, model={"scale_attn": False}, dtype="bf16"))
    assert flags == ["--set=scale_attn=false", "--max-steps=2", "--dtype=bf16"]


def test_set_values_are_json_and_strings_bare_unless_they_read_as_json():
    assert set_item("scale_attn", False) == "scale_attn=false"
    assert set_item("normformer_norm", None) == "normformer_norm=null"
    assert set_item("norm", "rmsnorm") == "norm=rmsnorm"
    assert set_item("norm", "true") == 'norm="true"'
    for name, value in (("dropout", 0.1), ("norm", "rmsnorm"), ("n_layer", 3), ("qk_norm", True)):
        assert parse_set([set_item(name, value)]) == {name: value}


def test_every_flag_keeps_its_name_type_and_help():
    parser = argparse.ArgumentParser()
    add_arguments(parser)  # nfeval train's
    actions = {a.dest: a for a in parser._actions}
    for f in FIELDS.values():
        action = actions[f.name]
        assert action.option_strings[0] == flag_name(f.name) and action.help, f.name
        if value_type(f.name) in (int, float) and f.name != "max_tokens":
            assert action.type is value_type(f.name), f.name
    assert actions["max_tokens"].type is float  # 1e9 on the command line, an integer in the config
    assert actions["model"].option_strings == ["--set"]
    # --lr-from reads a tune.json; --lr-record is lr_from's flag, the record itself
    assert actions["tune_json"].option_strings == ["--lr-from"]
    assert parsed(["--max-tokens", "1e9"]).max_tokens == 1_000_000_000
    assert parsed(["--max-steps", "1", "--grad-stats"]).grad_stats == "950:1000"
    assert parsed(["--max-steps", "1", "--tensorboard"]).tensorboard == ""


def test_a_bad_record_is_a_usage_error_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        build_parser("train").parse_args(["train", "--out", "r", "--lr-record", "[1]"])
    assert "--lr-record '[1]': expected a JSON object" in capsys.readouterr().err
