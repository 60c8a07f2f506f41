"""The 125M GPU script (``nfeval reproduce --scale 125M`` without a GPU): every line, run by bash with its
variables set, parses with the real ``nfeval train`` parser to the TrainConfig it was written from."""

import dataclasses
import os
import subprocess

from nfeval.cli import build_parser
from nfeval.engine.training.train_flags import config_from_args
from nfeval.pipelines.reproduce import commands
from nfeval.pipelines.reproduce.plan import EXPERIMENTS
from nfeval.pipelines.reproduce.run_specs import Context, run_dir, train_config
from nfeval.pipelines.scales import SCALES

# torchrun as a shell function that records its arguments, one file per call
FAKE_TORCHRUN = 'torchrun() { n=$(( ${n:-0} + 1 )); printf "%s\\0" "$@" > "$CALLS/$n"; }; export -f torchrun'


def script_calls(script: str, tmp_path, env: dict[str, str]) -> list[list[str]]:
    """Runs ``script`` with bash under a fake torchrun; returns each call's arguments."""
    calls = tmp_path / "calls"
    calls.mkdir()
    run = subprocess.run(
        ["bash", "-c", f'{FAKE_TORCHRUN}; bash "$0"', script],
        env={**os.environ, **env, "CALLS": str(calls)},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    names = sorted(os.listdir(calls), key=int)
    return [(calls / n).read_text().split("\0")[:-1] for n in names]


def parsed(argv: list[str]):
    assert argv[:5] == ["--nproc_per_node", "8", "-m", "nfeval", "train"]
    args = build_parser("train").parse_args(["train", *argv[5:]])
    return args.out, config_from_args(args)


def test_every_line_of_the_gpu_script_parses_to_its_config(tmp_path):
    scale = SCALES["125M"]
    ctx = Context(out=str(tmp_path / "o'ut"), scale=scale, budget=dict(scale.budget), seeds=2, tokenizer="")
    os.makedirs(ctx.out)
    script = commands.write_commands(ctx, only=None)
    data = {"CORPUS": "/data/my corpus.txt", "VALID": "/data/valid.txt", "GPT2_TOKENIZER": "/tok/gpt2"}
    calls = script_calls(script, tmp_path, data)
    keys = list(dict.fromkeys(k for e in EXPERIMENTS for k in e.runs))
    expected = [(key, seed) for key in keys for seed in ctx.seed_values]
    assert len(calls) == len(expected) > 2
    overrides = set()
    for argv, (key, seed) in zip(calls, expected):
        out, cfg = parsed(argv)
        written = train_config(ctx, key, seed)
        on_node = dataclasses.replace(
            written, train_data=data["CORPUS"], valid_data=data["VALID"], tokenizer=data["GPT2_TOKENIZER"]
        )
        assert (out, cfg) == (run_dir(ctx, key, seed), dataclasses.replace(on_node, device="auto")), key
        overrides |= {(k, type(v)) for k, v in cfg.model.items()}
    assert ("scale_attn", bool) in overrides  # Table 4's lines, which `--set scale_attn=False` broke


def test_a_config_that_names_its_data_keeps_it(tmp_path):
    scale = SCALES["125M"]
    ctx = Context(out=str(tmp_path), scale=scale, budget=dict(scale.budget), seeds=1, tokenizer="tok.json")
    cfg = dataclasses.replace(train_config(ctx, "clm-normformer", 1), train_data="c.txt", device="cpu")
    line = commands.train_command(cfg, str(tmp_path / "run"))
    assert "$CORPUS" not in line and "$GPT2_TOKENIZER" not in line
    (tmp_path / "one.sh").write_text(line + "\n")
    [argv] = script_calls(str(tmp_path / "one.sh"), tmp_path, {})
    assert parsed(argv)[1] == dataclasses.replace(cfg, device="auto")
