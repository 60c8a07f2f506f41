"""Flags derived both ways from a config dataclass (``nfeval.base.config_flags``): every field type a
command's config uses round-trips through ``to_flags`` and the parser ``add_config_flags`` builds."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from dataclasses import dataclass

import pytest

from nfeval.base.config_flags import add_config_flags, config_from_args, flag_field, to_flags


@dataclass(frozen=True)
class Sample:
    on: bool = flag_field(False, "a switch")
    off: bool = flag_field(True, "a switch on by default")
    count: int = flag_field(3, "an int")
    scale: float = flag_field(0.5, "a float")
    name: str = flag_field("x", "a str", choices=("x", "y", "-z"))
    renamed: str = flag_field("a", "a str under another flag", name="other-name", metavar="TEXT")
    words: tuple[str, ...] = flag_field(("a", "b"), "comma-separated strs")
    rates: list[float] = flag_field(None, "comma-separated floats", factory=lambda: [1e-5, 0.1])
    maybe: int | None = flag_field(None, "an optional int")
    maybe_text: str | None = flag_field(None, "an optional str, valueless: its const", const="")
    record: dict | None = flag_field(None, "a JSON object")
    bare: int = flag_field(2, None)  # a flag without help text
    repeated: list[str] = flag_field(help="a repeatable str", factory=list, action="append")
    internal: int = 0  # no help: no flag


def parser(defaults: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_config_flags(p, Sample, defaults=defaults)
    return p


def parsed(argv: list[str], defaults: bool = True) -> Sample:
    return config_from_args(parser(defaults).parse_args(argv), Sample)


CHANGED = dict(
    on=True,
    off=False,
    count=-4,
    scale=0.30000000000000004,  # repr keeps every bit
    name="-z",  # a value starting with "-" stays a value
    renamed="with space",
    words=("c",),
    rates=[3e-05, 2.0],
    maybe=7,
    maybe_text="",
    record={"a": [1, 2], "b": None},
    bare=5,
    repeated=["-a b"],
)


def test_the_defaults_parse_to_the_default_and_write_no_flag():
    assert parsed([]) == Sample() and parsed([], defaults=False) == Sample()
    assert to_flags(Sample()) == []


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_every_field_type_round_trips_alone(name):
    cfg = dataclasses.replace(Sample(), **{name: CHANGED[name]})
    flags = to_flags(cfg)
    assert len(flags) == 1
    for argv in (flags, shlex.split(shlex.join(flags))):
        back = parsed(argv)
        assert back == cfg and type(getattr(back, name)) is type(getattr(cfg, name))


def test_all_fields_round_trip_together_and_bools_write_their_flag_or_its_negation():
    cfg = Sample(**CHANGED)
    flags = to_flags(cfg)
    assert "--on" in flags and "--no-off" in flags and "--other-name=with space" in flags
    assert parsed(flags) == cfg
    assert parsed(["--no-on", "--off"]) == Sample()


def test_the_flags_keep_names_metavars_help_and_choices(capsys):
    actions = {a.dest: a for a in parser()._actions}
    assert "internal" not in actions
    assert actions["renamed"].option_strings == ["--other-name"] and actions["renamed"].metavar == "TEXT"
    assert actions["name"].choices == ("x", "y", "-z") and actions["count"].help == "an int"
    assert actions["off"].option_strings == ["--off", "--no-off"]
    assert actions["bare"].help is None and actions["repeated"].default is None
    assert parsed(["--repeated", "x", "--repeated=y"]).repeated == ["x", "y"]
    assert parsed(["--maybe-text"]).maybe_text == ""
    for bad in (["--name", "w"], ["--rates", "1,x"], ["--record", "[1]"], ["--count", "1.5"]):
        with pytest.raises(SystemExit):
            parser().parse_args(bad)
    assert "--record '[1]': expected a JSON object" in capsys.readouterr().err


def test_writers_write_the_fields_they_name():
    flags = to_flags(Sample(words=("p", "q")), {"words": lambda v: [f"--words={w}" for w in v]})
    assert flags == ["--words=p", "--words=q"]


def test_nfeval_glue_flags_round_trip_through_its_parser():
    from nfeval.cli import build_parser
    from nfeval.commands.glue import glue_config
    from nfeval.glue.config import GlueConfig
    from nfeval.glue.recipe import Recipe

    recipe = Recipe(epochs=2, warmup_ratio=0.1, weight_decay=0.0, dropout=0.2, attn_dropout=0.2, batch_size=4)
    recipe = dataclasses.replace(recipe, eval_batch_size=8, max_len=64, select="last_epoch", dtype="fp32")
    cfg = GlueConfig(
        glue_dir="-glue dir", tasks=("sst2", "rte"), sweep=True, lrs=(1e-3, 2e-05), seeds=2, recipe=recipe,
        device="cuda:1", jobs=3, limit=5, out_dir="out dir", progress=False, trust_checkpoint=True,
    )  # fmt: skip
    argv = ["glue", "--ckpt", "c", *to_flags(cfg), *to_flags(recipe)]
    back = glue_config(build_parser("glue").parse_args(argv))
    assert dataclasses.replace(back, launch=None) == cfg
    default = glue_config(build_parser("glue").parse_args(["glue", "--ckpt", "c"]))
    assert default.recipe == Recipe() and default.lrs is None and not default.sweep and default.progress
    assert default.grids(["rte"]) == {"rte": [2e-5]}  # fairseq's recipe learning rate without --sweep


def test_nfeval_bakeoff_flags_round_trip_through_its_parser():
    from nfeval.cli import build_parser
    from nfeval.commands.bakeoff import bakeoff_config
    from nfeval.pipelines.bakeoff.config import BakeoffConfig

    cfg = BakeoffConfig(
        archs=("prenorm", "qk=olmo2norm:qk_norm=true,rmsnorm=true"), baseline="qk", size="small",
        out="-out dir", train_data="t", valid_data="v", minutes=1.5, seeds=2, close_seeds=4, clip_grad=1.0,
        lrs=(1e-3, 2e-05), tune_budget="steps=5", tune_seeds=2, jobs=3, data_dir="d", device="cuda:1",
        progress=False,
    )  # fmt: skip
    argv = ["bakeoff", *to_flags(cfg, writers={"archs": lambda archs: ["--archs", *archs]})]
    back = bakeoff_config(build_parser("bakeoff").parse_args(argv))
    assert dataclasses.replace(back, command=cfg.command, launch=None) == cfg
    default = bakeoff_config(build_parser("bakeoff").parse_args(["bakeoff"]))
    assert dataclasses.replace(default, command=cfg.command, launch=None) == BakeoffConfig()
    with pytest.raises(SystemExit):  # one budget: steps or minutes
        build_parser("bakeoff").parse_args(["bakeoff", "--steps", "5", "--minutes", "1"])


def test_nfeval_reproduce_flags_round_trip_through_its_parser():
    from nfeval.cli import build_parser
    from nfeval.commands.reproduce import reproduce_config
    from nfeval.pipelines.reproduce.config import ReproduceConfig

    cfg = ReproduceConfig(
        out="-out dir", scale="small", minutes=1.5, seeds=2, lrs=(1e-3, 2e-05), token_budgets=(128, 512),
        only=("fig2-clm", "fig3-5"), train_data="t", valid_data="v", jobs=3, data_dir="d", glue_dir="g",
        glue_tasks=("rte",), tune=False, tune_seeds=2, device="cuda:1", progress=False,
    )  # fmt: skip
    back = reproduce_config(build_parser("reproduce").parse_args(["reproduce", *to_flags(cfg)]))
    assert dataclasses.replace(back, command=cfg.command, launch=None) == cfg
    default = reproduce_config(build_parser("reproduce").parse_args(["reproduce", "--tune"]))
    assert dataclasses.replace(default, command=cfg.command, launch=None) == ReproduceConfig()
    steps = reproduce_config(build_parser("reproduce").parse_args(["reproduce", "--steps=7"]))
    assert steps.steps == 7 and steps.minutes is None


def test_nfeval_tune_flags_round_trip_through_its_parser():
    from nfeval.cli import build_parser
    from nfeval.commands.tune import tune_config
    from nfeval.tune.config import TuneConfig

    cfg = TuneConfig(
        preset=("prenorm-tiny", "-odd name"), lrs=(1e-3, 2e-05), budget="steps=5", seeds=2, jobs=3,
        out="-out dir", report_only=True,
    )  # fmt: skip
    flags = to_flags(cfg)
    assert flags[:2] == ["--preset=prenorm-tiny", "--preset=-odd name"]  # the repeatable flag once per item
    back = tune_config(build_parser("tune").parse_args(["tune", *flags]))
    assert dataclasses.replace(back, launch=None) == cfg
    required = ["tune", "--preset", "p", "--lrs", "1e-3", "--budget", "steps=1", "--out", "o"]
    default = tune_config(build_parser("tune").parse_args(required))
    assert (default.seeds, default.jobs, default.report_only) == (1, 1, False)
    for missing in ("--preset", "--lrs", "--budget", "--out"):
        at = required.index(missing)
        with pytest.raises(SystemExit):
            build_parser("tune").parse_args(required[:at] + required[at + 2 :])


def test_nfeval_zeroshot_flags_round_trip_through_its_parser():
    from nfeval.cli import build_parser
    from nfeval.commands.zeroshot import zeroshot_config
    from nfeval.model_adapters.config import ScoringConfig
    from nfeval.zeroshot.config import ZeroShotConfig

    scoring = ScoringConfig(
        device="cuda:1", dtype="bf16", batch_size="auto", max_batch_tokens=100, max_length=64,
        hf_forward="transformers", progress=False,
    )  # fmt: skip
    cfg = ZeroShotConfig(
        tasks=["piqa", "-odd task"], data_dir="-data dir", limit=5, output_path="od", log_samples=True,
        use_cache=False, trust_checkpoint=True, tokenizer="tk", fairseq_dict="d.txt",
        fairseq_head_scale_bug=True, scoring=scoring,
    )  # fmt: skip
    fairseq = ["--tokenizer=tk", "--fairseq-dict=d.txt", "--fairseq-head-scale-bug"]
    tasks = {"tasks": lambda names: ["--tasks", *names]}
    argv = ["zeroshot", "--ckpt", "c", *to_flags(cfg, tasks), *to_flags(scoring), *fairseq]
    assert zeroshot_config(build_parser("zeroshot").parse_args(argv)) == cfg
    default = zeroshot_config(build_parser("zeroshot").parse_args(["zeroshot", "--ckpt", "c"]))
    assert default == ZeroShotConfig(output="results/zeroshot.json")
    spellings = [
        "--ckpt",
        "c",
        "--tasks",
        "a,b",
        "c",
        "--output-path",
        "od",
        "--log-samples",
        "--device",
        "auto",
    ]
    spelled = zeroshot_config(build_parser("zeroshot").parse_args(["zeroshot", *spellings]))
    assert (spelled.tasks, spelled.output, spelled.output_path, spelled.log_samples) == (
        ["a", "b", "c"],
        None,
        "od",
        True,
    )
    assert spelled.scoring.device is None  # auto: CUDA when available


def test_nfeval_analyze_flags_round_trip_through_its_parsers():
    from nfeval.analysis.runs import GainsOptions, GradsOptions, StabilityOptions
    from nfeval.analysis.stability import StabilitySettings
    from nfeval.cli import build_parser
    from nfeval.commands.analyze import options
    from nfeval.engine.training.train_config import set_item

    def back(analysis: str, *flags: str):
        return options(build_parser("analyze").parse_args(["analyze", analysis, *flags]))

    grads = GradsOptions(
        runs=["r1", "r2"], ckpt=["preset:prenorm-tiny", "-c dir"], kind="fc1", baseline="b", data="-d",
        tokenizer="t", batch_size=3, seq_len=16, seed=4, batches=2, fairseq_dict="fd",
        fairseq_head_scale_bug=True,
    )  # fmt: skip
    assert back("grads", "r1", "r2", *to_flags(grads)) == grads
    assert back("grads") == GradsOptions()
    gains = GainsOptions(targets=["t1"], fairseq_head_scale_bug=True)
    assert back("gains", "t1", *to_flags(gains)) == gains
    settings = StabilitySettings(
        updates=20, lr_start=1e-4, lr_end=0.5, batch_size=2, seq_len=8, noise_updates=3, noise_multiple=2.5,
        smoothing=2, autocast="bf16", device="cuda:1",
    )  # fmt: skip
    stability = StabilityOptions(
        presets=["a", "b"], seeds=2, model={"qk_norm": True, "norm": "rmsnorm"}, settings=settings,
        data="d", tokenizer="t", seed=3,
    )  # fmt: skip
    model = {"model": lambda overrides: [f"--set={set_item(k, v)}" for k, v in overrides.items()]}
    assert back("stability", *to_flags(stability, model), *to_flags(settings)) == stability
    assert back("stability", "--preset", "a") == StabilityOptions(presets=["a"])


def test_nfeval_demo_flags_round_trip_through_its_parser():
    from nfeval.cli import build_parser
    from nfeval.commands.demo import demo_config
    from nfeval.pipelines.demo import DemoConfig

    def back(*flags: str) -> DemoConfig:
        return demo_config(build_parser("demo").parse_args(["demo", *flags]))

    cfg = DemoConfig(
        out="-out dir", minutes=2.5, steps=7, size="small", data_dir="d", glue_dir="g",
        glue_tasks=("stsb", "rte"), zeroshot_limit=5, jobs=2, device="cuda:1", seed=3, progress=False,
    )  # fmt: skip
    assert back(*to_flags(cfg)) == cfg
    assert back() == DemoConfig()
    everything = back("--glue-dir", "none", "--limit", "0")  # no GLUE stage; every zero-shot item
    assert everything == DemoConfig(glue_dir=None, zeroshot_limit=None)


def test_report_and_checkpoint_commands_flags_round_trip_through_their_parsers():
    """generate, export-hf, info, compare, compare-scores and leaderboard: every flag of each config
    changed from its default parses back to that config (and no flag gives the defaults)."""
    from nfeval.base.config_flags import config_from_args as back
    from nfeval.cli import build_parser
    from nfeval.commands.compare import CompareOptions
    from nfeval.commands.compare_scores import CompareScoresOptions
    from nfeval.commands.export_hf import ExportOptions
    from nfeval.commands.generate import GenerateOptions, options
    from nfeval.commands.info import InfoOptions
    from nfeval.commands.leaderboard import LeaderboardOptions
    from nfeval.engine.inference.generate import Sampling
    from nfeval.engine.text.fairseq_tokenizer import FairseqReading

    gen = GenerateOptions(
        ckpt="-c", prompt=["a b", "-x"], max_new_tokens=3, stop=["\n", "."], batch_size=2, output="o.jsonl",
        device="cuda:1", dtype="bf16",
    )  # fmt: skip
    sampling, reading = Sampling(temperature=0.7, top_k=5, top_p=0.9, seed=4), FairseqReading("t", "d", True)
    argv = ["generate", *to_flags(gen), *to_flags(sampling), *to_flags(reading), "--hf-forward=transformers"]
    assert options(build_parser("generate").parse_args(argv)) == (gen, sampling, reading, "transformers")
    plain = options(build_parser("generate").parse_args(["generate", "--ckpt", "c", "--prompts", "p.txt"]))
    assert plain == (GenerateOptions(ckpt="c", prompts="p.txt"), Sampling(), FairseqReading(), "engine")
    with pytest.raises(SystemExit):  # one of --prompt and --prompts, not both
        build_parser("generate").parse_args(["generate", "--ckpt", "c", "--prompt", "x", "--prompts", "p"])

    names = {"names": lambda v: ["--names", *v], "runs": lambda v: ["--runs", *v]}
    export = ExportOptions(out="o", tokenizer="t", overwrite=True, fairseq_head_scale_bug=True, json=True)
    info = InfoOptions(json=True, trust_checkpoint=True, fairseq_head_scale_bug=True)
    compare = CompareOptions(
        group=["a=r/*", "b=s/*"], baseline="b", names=["x", "y"], mixed_recipes=True, json=True,
        output="o.json", plot="p.png",
    )  # fmt: skip
    scores = CompareScoresOptions(resamples=7, seed=3, confidence=0.9, json=True, output="o.json")
    board = LeaderboardOptions(
        output="b.md", format="csv", names=["n"], reference="gpt3", metric=["acc", "piqa=acc"],
        group_by="flops", group_tolerance=0.2, runs=["r1", "r2"], title="T", baseline="n", resamples=9,
        bootstrap_seed=2, analysis=["g.json"],
    )  # fmt: skip
    cases = {
        "export-hf": (["src"], export, ExportOptions(out="o")),
        "info": (["t"], info, InfoOptions()),
        "compare": ([], compare, CompareOptions()),
        "compare-scores": (["a.json", "b.json"], scores, CompareScoresOptions()),
        "leaderboard": (["r.json"], board, LeaderboardOptions()),
    }
    for command, (positional, changed, default) in cases.items():
        cls = type(changed)
        required = ["--out=o"] if command == "export-hf" else []
        parsed = build_parser(command).parse_args([command, *positional, *to_flags(changed, names)])
        assert back(parsed, cls) == changed, command
        assert back(build_parser(command).parse_args([command, *positional, *required]), cls) == default, (
            command
        )
    old = build_parser("compare-scores").parse_args(["compare-scores", "a", "b", "--out", "o.json"])
    assert back(old, CompareScoresOptions).output == "o.json"  # the old spelling of --output


@pytest.mark.parametrize("command", ["train", "tune"])
def test_launcher_flags_round_trip_through_each_kind_of_command(command):
    """A run's launcher flags (train: --nodes, --gpus-per-node) and a sweep's (tune: --gpus-per-job,
    --array-parallelism) parse back to the LauncherFlags they were written from."""
    from nfeval.cli import build_parser
    from nfeval.launch.options import PER_KIND, POINTS, RUN, LauncherFlags

    own = (
        {"nodes": 2, "gpus_per_node": 4}
        if command == "train"
        else {"gpus_per_job": 2, "array_parallelism": 3}
    )
    flags = LauncherFlags(
        launcher="slurm", slurm_partition="gpu", slurm_time="1:00:00", cpus_per_job=8, slurm_max_requeues=0,
        slurm_option=["account=me", "exclusive="], no_wait=True, resubmit=True, **own,
    )  # fmt: skip
    required = (
        ["--out", "o", "--preset", "p"]
        if command == "train"
        else ["--preset", "p", "--budget", "steps=5", "--out", "o", "--lrs", "1e-3"]
    )
    parsed = build_parser(command).parse_args([command, *required, *to_flags(flags)])
    assert config_from_args(parsed, LauncherFlags) == flags
    other = PER_KIND[POINTS if command == "train" else RUN]
    assert not any(hasattr(parsed, name) for name in other)  # the other kind's flags are not this command's
