"""``nfeval analyze``'s three analyses as library calls: each one's options (``GradsOptions``,
``GainsOptions``, ``StabilityOptions``), and ``analyze(options, png)``, which runs one, writes its JSON
and PNG, and returns the result. The command and the pipelines (``reproduce``, ``bakeoff``) both call
it. Each option that is a flag of ``nfeval analyze`` declares it (``base.config_flags``); the runs and
targets are the command's positional arguments."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ..base.artifacts import provenance
from ..base.cli_args import positive_int
from ..base.config_flags import flag_field
from ..base.errors import ConfigError
from ..base.outputs import check_output_file
from ..base.sweep_lock import files_lock
from ..engine.model.config import MODEL_CHOICES, ModelConfig, check_fields, parse_preset, preset
from ..engine.text.fairseq_tokenizer import HEAD_SCALE_BUG_HELP
from ..engine.training.grad_stats import GAIN_KINDS, WEIGHT_KINDS
from .gains import read_gains
from .grads import grads_at, grads_result
from .inputs import (
    PRESET_PREFIX,
    batches,
    check_data_args,
    check_model_spec,
    check_vocab,
    load_target,
    token_data,
)
from .recorder import check_run, read_run
from .stability import StabilitySettings, stability_test

DATA_HELP = "text file or folder (default: the embedded corpus)"
TOKENIZER_HELP = (
    "tokenizer.json, or GPT-2's BPE folder for a fairseq .pt with a dict.txt (default: the checkpoint's, "
    "required for one without; a preset's: a BPE trained on the data)"
)
SEED_HELP = "data order, dropout masks and preset initialisation"


@dataclass(kw_only=True)
class GradsOptions:
    """Gradient norm by layer (Figures 3 and 7): of runs trained with ``--grad-stats`` and/or computed at
    checkpoints (``ckpt``: a run/checkpoint dir, a fairseq file, or ``preset:NAME`` at its initialisation)
    on ``batches`` batches of ``data`` (None: the embedded corpus)."""

    runs: list[str] = field(default_factory=list)
    ckpt: list[str] = flag_field(
        help="compute at a checkpoint (run/checkpoint dir, fairseq file) or at a preset's init, "
        "e.g. preset:postnorm-small (repeatable)",
        factory=list,
        action="append",
        metavar="PATH|preset:NAME",
    )
    kind: str = flag_field("fc2", "parameter kind to plot (default fc2, the paper's)")
    baseline: str | None = flag_field(
        None, "Figure 7's baseline (default: first Pre-LN model)", metavar="NAME"
    )
    data: str | None = flag_field(None, DATA_HELP, metavar="FILE")
    tokenizer: str | None = flag_field(None, TOKENIZER_HELP)
    batch_size: int = flag_field(8, None, type=positive_int)
    seq_len: int = flag_field(128, None)
    seed: int = flag_field(1, SEED_HELP)
    batches: int = flag_field(4, "batches to average over (default 4)")
    fairseq_dict: str | None = flag_field(
        None, "fairseq dict.txt of a .pt file (default: dict.txt beside it)", metavar="FILE"
    )
    fairseq_head_scale_bug: bool = flag_field(False, HEAD_SCALE_BUG_HELP, action="store_true")


@dataclass(kw_only=True)
class GainsOptions:
    """Learned NormFormer gains by layer (Figures 4 and 6) of nfeval run/checkpoint dirs or fairseq files."""

    targets: list[str]
    fairseq_head_scale_bug: bool = flag_field(False, HEAD_SCALE_BUG_HELP, action="store_true")


@dataclass(kw_only=True)
class StabilityOptions:
    """The increasing-LR stability test (Figure 5) of ``presets`` with the ModelConfig overrides ``model``,
    seeds 1..``seeds``, on ``data`` (None: the embedded corpus)."""

    presets: list[str] = flag_field(
        help="preset to test (repeatable)", name="preset", action="append", required=True, metavar="PRESET"
    )
    seeds: int = flag_field(3, "seeds 1..N (default 3)")
    model: dict[str, Any] = flag_field(  # the --set items as parse_set reads them
        help="model config override of every preset, as nfeval train --set (repeatable)",
        factory=dict,
        name="set",
        action="append",
        metavar="FIELD=VALUE",
    )
    settings: StabilitySettings = field(default_factory=StabilitySettings)
    data: str | None = flag_field(None, DATA_HELP, metavar="FILE")
    tokenizer: str | None = flag_field(None, TOKENIZER_HELP)
    seed: int = flag_field(1, SEED_HELP)  # data order and initialisation
    progress: bool = True  # a bar per run (not part of the result)


Options = GradsOptions | GainsOptions | StabilityOptions


def analyze(options: Options, png: str) -> dict[str, Any]:
    """Runs the analysis ``options`` describe; writes its JSON beside ``png`` and the PNG as one
    (``plots.write_json_and_png``: both land or neither, the PNG last, so a finished analysis has its
    PNG); returns the result. One writer per ``png`` and its JSON (``sweep_lock.files_lock``, held from
    the start): another analysis, or a ``compare --output`` of the JSON, writing either is refused at
    once, naming the holder, so the PNG and its JSON are one run's."""
    check_output_file(png, "--output")  # before any work
    if not png.endswith(".png"):
        raise ConfigError(f"--output {png}: expected a .png path (the JSON is written beside it)")
    check_output_file(json_path(png), "--output")  # the JSON's name is not a folder
    name, run = ANALYSES[type(options)]
    with files_lock(json_path(png), png):
        result = run(options)
        from ..base.plots import write_json_and_png  # matplotlib, once there is something to draw
        from . import figures

        write_json_and_png(json_path(png), result, png, figures.PLOTS[name])
    return result


def json_path(png: str) -> str:
    """Returns where the JSON of the analysis whose PNG is ``png`` is written."""
    return os.path.splitext(png)[0] + ".json"


def grads(options: GradsOptions) -> dict[str, Any]:
    """Returns the gradient-norm analysis ``options`` describe (``grads.grads_result`` with its settings
    and provenance)."""
    if not options.runs and not options.ckpt:
        raise ConfigError("analyze grads: give RUN dirs (trained with --grad-stats) and/or --ckpt PATH")
    for run_dir in options.runs:
        check_run(run_dir)
    for spec in options.ckpt:
        check_model_spec(spec)
    check_data_args(options.data, options.tokenizer)
    if options.batches < 1:
        raise ConfigError(f"--batches {options.batches}: expected a positive integer")
    if options.kind not in WEIGHT_KINDS + GAIN_KINDS:
        raise ConfigError(f"--kind {options.kind}: expected one of {WEIGHT_KINDS + GAIN_KINDS}")
    entries = [read_run(r) for r in options.runs]
    data_fingerprints = {}
    for spec in options.ckpt:
        target, batches, data_fp = _target_and_batches(spec, options)
        values = grads_at(target, batches, options.batches, options.batch_size, options.seed)
        info = {**target.info, "data_fingerprint": data_fp, "batches": options.batches}
        entries.append({"name": target.name, "info": info, "values": values})
        data_fingerprints[target.name] = data_fp
    result = grads_result(entries, options.kind, options.baseline)
    settings = {
        k: getattr(options, k) for k in ("batches", "batch_size", "seq_len", "seed", "data", "tokenizer")
    }
    result["settings"] = settings
    result["provenance"] = provenance(seed=options.seed, data_fingerprint=data_fingerprints or None)
    return result


def _target_and_batches(spec: str, options: GradsOptions) -> tuple[Any, Any, str]:
    """Returns (target, its batches, data fingerprint) for a --ckpt spec; raises ConfigError for a
    checkpoint that carries no tokenizer when ``--tokenizer`` names none (its token ids would be a
    stranger's)."""
    target = load_target(
        spec, options.seed, options.fairseq_head_scale_bug, options.tokenizer, options.fairseq_dict
    )
    if target.tokenizer is None and not spec.startswith(PRESET_PREFIX):
        raise ConfigError(
            f"{spec}: the checkpoint carries no tokenizer: pass --tokenizer with the one its model was "
            "trained with"
        )
    cfg = target.model.cfg
    tokens, tok = token_data(options.data, target.tokenizer or options.tokenizer, cfg.vocab_size)
    tok_vocab = tok.get_vocab_size()
    check_vocab(target.name, cfg.vocab_size, tok_vocab)
    seq_len = min(options.seq_len, cfg.max_seq_len)
    return target, batches(tokens, tok_vocab, seq_len, options.seed), tokens.fingerprint


def gains(options: GainsOptions) -> dict[str, Any]:
    """Returns the learned gains of ``options.targets``: {"analysis", "models", "provenance"}."""
    for spec in options.targets:
        check_model_spec(spec)
    models = []
    for spec in options.targets:
        target = load_target(spec, fairseq_head_scale_bug=options.fairseq_head_scale_bug)
        models.append({"name": target.name, "info": target.info, "gains": read_gains(target.model, spec)})
    return {"analysis": "gains", "models": models, "provenance": provenance()}


def stability(options: StabilityOptions) -> dict[str, Any]:
    """Returns the stability test ``options`` describe (``stability.stability_test``'s result with its data,
    model overrides and provenance)."""
    for name in options.presets:
        try:
            parse_preset(name)
        except ValueError as e:
            raise ConfigError(f"--preset: {e}") from None
    if options.seeds < 1:
        raise ConfigError(f"--seeds {options.seeds}: expected a positive integer")
    options.settings.validate()
    check_fields(ModelConfig, options.model, "--set", choices=MODEL_CHOICES)
    overrides = options.model
    check_data_args(options.data, options.tokenizer)
    vocab = min(preset(name).vocab_size for name in options.presets)
    tokens, tok = token_data(options.data, options.tokenizer, vocab)
    tok_vocab = tok.get_vocab_size()
    configs = {
        name: preset(
            name,
            **{
                **overrides,
                "vocab_size": max(-(-tok_vocab // 64) * 64, 64),
                "pad_token_id": tokens.specials.pad,
            },
        )
        for name in options.presets
    }
    seq_len = min([options.settings.seq_len] + [c.max_seq_len for c in configs.values()])
    settings = dataclasses.replace(options.settings, seq_len=seq_len)
    data = batches(tokens, tok_vocab, seq_len, options.seed)
    result = stability_test(configs, list(range(1, options.seeds + 1)), data, settings, options.progress)
    result["data"] = {"source": options.data or "embedded default corpus", "fingerprint": tokens.fingerprint}
    result["model_overrides"] = overrides
    result["provenance"] = provenance(seed=options.seed, data_fingerprint=tokens.fingerprint)
    return result


ANALYSES = {
    GradsOptions: ("grads", grads),
    GainsOptions: ("gains", gains),
    StabilityOptions: ("stability", stability),
}
