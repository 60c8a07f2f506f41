"""``nfeval demo``: the whole mission, offline, in minutes on a CPU, compared the way ``nfeval reproduce``
compares.

1. data: the task slices shipped in the package (``nfeval.embedded``: HellaSwag, PIQA, WinoGrande,
   OpenBookQA, STS-B; rows and licence files checked) and a held-out cloze task from the corpus;
2. a tokenizer trained on the embedded default corpus (CPython's own documentation text);
3. NormFormer's step time over Pre-LN's, measured paired before training (``training``);
4. Pre-LN trained S steps and NormFormer S ÷ that ratio, each to the end of its own schedule;
5. the two runs compared at equal time, each read at its end (``report``);
6. zero-shot through lm-eval on every slice and the cloze task (StoryCloze stays user-supplied);
7. a seven-learning-rate GLUE sweep on the STS-B slice;
8. a leaderboard beside the GPT-3 rows, with chance and majority-class yardsticks and the plots.

Each stage prints one line with an estimate of what is left (``progress``). Every stage calls the same
code as the command it stands for, and every stage resumes: a rerun with the same ``--out`` skips
finished runs, cached zero-shot results and finished GLUE points.
"""

from __future__ import annotations

import os
import textwrap
import time
from dataclasses import dataclass, replace
from typing import Any

from ... import embedded
from ...base.artifacts import atomic_write_json, atomic_write_text
from ...base.cli_args import DEVICE_HELP, count_or_all, device_name, limit_help, positive_int, run_folder_help
from ...base.config_flags import flag_field
from ...base.errors import DataError
from ...base.jsonio import load_json
from ...base.sweep_lock import folder_locked
from ...engine.checkpoints.checkpoint import read_config
from ...engine.model.config import SIZES
from ...glue.config import GlueConfig
from ...glue.recipe import Recipe
from ...glue.sweep import sweep
from ...model_adapters.config import ScoringConfig
from ...report.compare import compare
from ...report.leaderboard import build
from ...report.leaderboard_page import write
from ...report.leaderboard_read import CHANCE, TITLES, ZEROSHOT_TASKS
from ...report.leaderboard_render import format_compute
from ...tasks import LEADERBOARD_METRIC, canonical_name
from ...zeroshot.config import ZeroShotConfig
from ...zeroshot.evaluate import evaluate
from ..stages import shared_tokenizer, zeroshot_data
from . import report
from .progress import STAGES, StagePlan, minutes
from .training import (
    ARCHES,
    BASELINE,
    budgets,
    log_line,
    measure_ratio,
    run_dir,
    step_budget,
    train_runs,
)

GLUE_LRS = (1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 3e-3)  # small CPU models want more than the base grid


MINUTES = 7.0


@dataclass
class DemoConfig:
    """A demo: its folder, budget, model, data and how it runs; each field that is a flag of ``nfeval demo``
    declares it (``base.config_flags``)."""

    out: str = flag_field("demo_out", run_folder_help("demo_out"))
    minutes: float = flag_field(  # the time target; training gets its share of it unless ``steps`` is given
        MINUTES,
        f"time target for the whole demo (default {MINUTES:g}); sets Pre-LN's step budget from the step time "
        "measured before training, unless --steps does",
    )
    steps: int | None = flag_field(  # Pre-LN's step budget (None: what the time target buys)
        None,
        "Pre-LN's step budget (NormFormer's: this ÷ the paired step-time ratio); default: what "
        "--minutes buys",
        type=positive_int,
    )
    size: str = flag_field("tiny", "model size preset", choices=("tiny", "small"))
    seq_len: int = 128
    batch_size: int = 16
    lr: float = 3e-3  # both runs, untuned
    vocab_size: int = 2048
    eval_samples: int = 128
    data_dir: str | None = flag_field(  # zero-shot tasks: the shipped slices, or a folder of your own
        embedded.NAME,
        "zero-shot task files: 'embedded' (default: the 200-item slices shipped in the package) or a folder "
        "in the layout of ../shared/data/zeroshot",
    )
    glue_dir: str | None = flag_field(  # None: no GLUE stage
        embedded.NAME,
        "GLUE TSVs: 'embedded' (default: the STS-B slice shipped in the package), a folder in the layout of "
        "../shared/data/glue, or 'none' to skip the GLUE stage",
    )
    glue_tasks: tuple[str, ...] = flag_field(
        embedded.GLUE_TASKS, f"comma-separated GLUE tasks (default {','.join(embedded.GLUE_TASKS)})"
    )
    glue_epochs: int = 3
    glue_lrs: tuple[float, ...] = GLUE_LRS
    glue_limit: int | None = None  # train and dev rows of each GLUE task (None: all)
    zeroshot_limit: int | None = flag_field(  # items per public task (the shipped slices hold 200)
        200,
        limit_help("zero-shot items of each public task", 200),
        name="limit",
        type=count_or_all,
        metavar="N",
    )
    cloze_items: int = 500
    ratio_pairs: int = 16
    ratio_burst: int = 3
    ratio_warmup: int = 3
    # runs trained at a time. One by default: its step time, measured before training, predicts the
    # stage's time on a busy machine, where two processes slow each other more than the measurement shows
    # (2-core VM with other work on it: 2 × 262 steps took 238 s two at a time, 168 s would one by one)
    jobs: int = flag_field(
        1,
        "training runs at a time, one CPU thread each (default 1; 2 is faster on an idle machine with two "
        "cores, slower on a busy one)",
        type=positive_int,
    )
    device: str = flag_field("auto", DEVICE_HELP, type=device_name)
    seed: int = flag_field(1, None)
    progress: bool = flag_field(True, "no progress bars", name="no-progress", action="store_false")

    def train_seconds(self) -> float:
        """Returns the seconds of the time target that go to training (the training stage's share)."""
        return self.minutes * 60 * dict(STAGES)["training"]

    @classmethod
    def smallest(cls, out: str, **changes: Any) -> DemoConfig:
        """Returns the smallest demo that runs every stage, for tests and dry runs (seconds; never a
        result): a few dozen steps of short sequences, a few items per task, one GLUE epoch."""
        small = cls(
            out=out,
            steps=40,
            seq_len=32,
            batch_size=4,
            vocab_size=300,
            eval_samples=4,
            glue_epochs=1,
            glue_limit=16,
            zeroshot_limit=4,
            cloze_items=16,
            ratio_pairs=3,
            ratio_burst=1,
            ratio_warmup=1,
            jobs=1,
            device="cpu",
            progress=False,
        )
        return replace(small, **changes)


def check_data(cfg: DemoConfig) -> dict[str, dict[str, Any]]:
    """Returns {slice folder: what it holds} for the shipped slices the demo reads; a DataError when one
    lacks its documented rows or its licence file (a damaged install)."""
    used = []
    if cfg.data_dir == embedded.NAME:
        used += [s for s in embedded.SLICES if s.folder.startswith("zeroshot/")]
    if cfg.glue_dir == embedded.NAME:
        used += [s for s in embedded.SLICES if s.task in cfg.glue_tasks]
    out = {}
    for s in used:
        held = embedded.read_slice(s)
        if held["rows"] != held["documented_rows"] or not held["licence_file"]:
            raise DataError(
                f"{s.path}: {held['rows']} rows (documented {s.files}), licence file "
                f"{'present' if held['licence_file'] else 'missing'}; reinstall nfeval"
            )
        out[s.folder] = held
    return out


def run_zeroshot(cfg: DemoConfig, data_dir: str, tasks: list[str]) -> dict[str, list[str]]:
    """Scores each run zero-shot (cached by model fingerprint); returns {arch: results files}: the corpus
    cloze task whole, the public tasks up to ``cfg.zeroshot_limit`` items."""
    device = None if cfg.device == "auto" else cfg.device
    files: dict[str, list[str]] = {}
    for arch in ARCHES:
        common = {"data_dir": data_dir, "scoring": ScoringConfig(device=device, progress=cfg.progress)}
        parts = [(os.path.join(cfg.out, "zeroshot", f"{arch}_cloze.json"), tasks[:1], None)]
        if len(tasks) > 1:
            parts.append((os.path.join(cfg.out, "zeroshot", f"{arch}.json"), tasks[1:], cfg.zeroshot_limit))
        for out, names, limit in parts:
            evaluate(run_dir(cfg.out, arch), ZeroShotConfig(tasks=names, limit=limit, output=out, **common))
        files[arch] = [p for p, _, _ in parts]
    return files


def run_glue(cfg: DemoConfig) -> dict[str, str]:
    """Sweeps ``cfg.glue_lrs`` on ``cfg.glue_tasks`` for each run (resumable); returns {arch: glue.json}."""
    files = {}
    for arch in ARCHES:
        folder = run_dir(cfg.out, arch)
        # keyed by the weights: a retrained model starts a fresh sweep, never a mixed one
        out = os.path.join(cfg.out, "glue", f"{arch}-{read_config(folder)[1]['fingerprint'][:12]}")
        sweep(
            folder,
            GlueConfig(
                tasks=list(cfg.glue_tasks),
                lrs=list(cfg.glue_lrs),
                out_dir=out,
                glue_dir=embedded.glue_dir(cfg.glue_dir),
                recipe=Recipe(epochs=cfg.glue_epochs, max_len=cfg.seq_len),
                device=None if cfg.device == "auto" else cfg.device,
                progress=cfg.progress,
                limit=cfg.glue_limit,
            ),
        )
        files[arch] = os.path.join(out, "glue.json")
    return files


@folder_locked(lambda cfg: cfg.out)  # one writer per output folder
def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Runs every stage into ``cfg.out`` (on the caller's torch threads: ``nfeval demo`` sets one on a
    CPU); returns the summary (also written to ``summary.json``). A second demo into the same
    ``cfg.out`` is refused at once (``sweep_lock.folder_lock``), naming the holder."""
    start = time.time()
    os.makedirs(cfg.out, exist_ok=True)
    plan = StagePlan(cfg.minutes * 60, log_line)
    if not cfg.glue_dir:
        plan.plan("GLUE", 0.0)  # skipped
    log_line(f"output folder {os.path.abspath(cfg.out)}; time target {cfg.minutes:g} min")

    plan.begin("data", "checking the task slices shipped in the package and building the cloze task")
    slices = check_data(cfg)
    data_dir, tasks = zeroshot_data(
        cfg.out, embedded.zeroshot_dir(cfg.data_dir), cfg.cloze_items, cfg.seed, log_line
    )
    plan.begin("tokenizer", f"a {cfg.vocab_size}-token BPE on the embedded corpus")
    tokenizer = shared_tokenizer(cfg.out, cfg.vocab_size)
    plan.begin("step-time ratio", f"NormFormer against Pre-LN, {cfg.ratio_pairs} pairs of bursts")
    ratio, load = measure_ratio(cfg, tokenizer, log_line)
    budget = step_budget(cfg, ratio, load)
    steps = {arch: int(b["max_steps"]) for arch, b in budgets(budget["max_steps"], ratio).items()}
    plan.plan("training", budget["expected_s"])
    at_once = "two at a time" if cfg.jobs > 1 else "one after the other"
    plan.begin("training", f"Pre-LN {steps[BASELINE]} steps, NormFormer {steps[ARCHES[1]]} ({at_once})")
    records = train_runs(cfg, tokenizer, budget["max_steps"], ratio)

    plan.begin("comparison", "both runs at equal time, each at the end of its schedule")
    comparison = compare([run_dir(cfg.out, a) for a in ARCHES], names=list(ARCHES))
    text = report.equal_time_text(comparison, ratio, budget)
    atomic_write_json(os.path.join(cfg.out, "compare.json"), comparison)
    atomic_write_text(os.path.join(cfg.out, "equal_time.txt"), text + "\n")
    print(text, flush=True)

    plan.begin("zero-shot", f"{', '.join(tasks)} for both runs")
    zeroshot_files = run_zeroshot(cfg, data_dir, tasks)
    glue_files: dict[str, str] = {}
    if cfg.glue_dir:
        plan.begin("GLUE", f"{', '.join(cfg.glue_tasks)} × {len(cfg.glue_lrs)} learning rates for both runs")
        glue_files = run_glue(cfg)
    plan.begin("leaderboard", "tables beside the GPT-3 rows, yardsticks and plots")
    board_path, facts = write_board(cfg, comparison, ratio, budget, steps, zeroshot_files, glue_files, text)
    plan.end()

    summary = make_summary(cfg, records, comparison, zeroshot_files, glue_files, board_path)
    summary.update(data=slices, budget=budget, step_ratio=ratio, stage_s=plan.took)
    summary["caveat"] = report.cannot_show(facts)
    summary["wall_s"] = round(time.time() - start, 1)
    atomic_write_json(os.path.join(cfg.out, "summary.json"), summary)
    print(format_summary(summary), flush=True)
    return summary


def write_board(cfg, comparison, ratio, budget, steps, zeroshot_files, glue_files, text) -> tuple[str, dict]:
    """Writes ``leaderboard.md`` (and its plots); returns its path and the facts its paragraphs state
    (``report.about``)."""
    path = os.path.join(cfg.out, "leaderboard.md")
    files = [f for fs in zeroshot_files.values() for f in fs]
    board = build(files + list(glue_files.values()), reference="gpt3")
    ours = [r for r in board["zeroshot"]["rows"] if r["reference"] is None]
    parameters = ours[0]["parameters"]
    cells = [(t, r["scores"][t]) for r in ours for t in ZEROSHOT_TASKS if r["scores"].get(t)]
    near = [t for t, c in cells if abs(c["value"] - CHANCE[t]) <= (c.get("half_width") or 0.0)]
    public = [load_json(f)["n-samples"] for fs in zeroshot_files.values() for f in fs[1:]]
    glue = [t for f in glue_files.values() for t in load_json(f)["tasks"].values()]
    dev_rows = [sum((t.get("majority") or {}).get("rows", {}).values()) for t in glue]
    shape = SIZES[cfg.size]
    facts = {
        "parameters": parameters,
        "shape": f"{shape['n_layer']} layers × d {shape['d_model']}",
        "tokens": {r["name"]: format_compute(r["tokens"], "tokens") for r in comparison["runs"]},
        "glue_tasks": ", ".join(TITLES[t] for t in cfg.glue_tasks),
        "ratio": report.ratio_text(ratio),
        "steps": steps,
        "items": min((n["effective"] for counts in public for n in counts.values()), default=None),
        "glue_dev_rows": min(dev_rows, default=None),
        "glue_lrs": len(cfg.glue_lrs),
        "gpt3_ratio": 125e6 / parameters,
        "near_chance": (len(near), len(cells)),
    }
    write(
        board,
        path,
        title="nfeval demo",
        comparison=report.equal_time_curves(comparison, int(budget["max_steps"])),
        comparison_text=text,
        time_axis=report.TIME_AXIS,
        about=report.about(cfg, facts),
    )
    return path, facts


def make_summary(cfg, records, comparison, zeroshot_files, glue_files, board_path) -> dict[str, Any]:
    """Returns the demo's headline numbers and where each artifact is."""
    rows = {row["name"]: row for row in comparison["runs"]}
    out: dict[str, Any] = {
        "artifacts": {
            "runs": {a: run_dir(cfg.out, a) for a in ARCHES},
            "equal_time": os.path.join(cfg.out, "equal_time.txt"),
            "zeroshot": zeroshot_files,
            "glue": glue_files,
            "leaderboard": board_path,
            "plots": sorted(os.path.join(cfg.out, f) for f in os.listdir(cfg.out) if f.endswith(".png")),
        },
        "models": {},
    }
    for arch in ARCHES:
        row = rows[arch]
        model: dict[str, Any] = {
            "steps": row["steps"],
            "tokens": row["tokens"],
            "status": records[arch]["status"],
            "val_ppl_at_equal_time": row["final_val_ppl"],
            "best_val_ppl": row["best_val_ppl"],
            "val_points": len(row["val"]),
            "metrics": dict(LEADERBOARD_METRIC),
        }
        results = {  # keyed by the column each lm-eval task fills (piqa_local: piqa)
            canonical_name(t): r
            for f in zeroshot_files.get(arch, [])
            for t, r in load_json(f)["results"].items()
        }
        model["zeroshot"] = {
            t: {m.split(",")[0]: v for m, v in r.items() if m.endswith(",none") and "stderr" not in m}
            for t, r in results.items()
        }
        if arch in glue_files:
            glue = load_json(glue_files[arch])
            model["glue"] = {t: {"best_lr": r["best_lr"], **r["best"]} for t, r in glue["tasks"].items()}
        out["models"][arch] = model
    return out


def format_summary(summary: dict[str, Any]) -> str:
    """Returns the closing summary as text: artifact paths, the headline numbers, then the caveat they
    stand under (the leaderboard's ``report.cannot_show``)."""
    a = summary["artifacts"]
    lines = ["", f"nfeval demo finished in {minutes(summary['wall_s'])}", ""]
    lines += [f"  runs          {', '.join(a['runs'].values())}", f"  comparison    {a['equal_time']}"]
    lines += [
        f"  zero-shot     {', '.join(f for fs in a['zeroshot'].values() for f in fs)}",
        f"  GLUE          {', '.join(a['glue'].values()) or '– (no --glue-dir)'}",
        f"  leaderboard   {a['leaderboard']}",
        f"  plots         {', '.join(a['plots'])}",
        "",
    ]
    caveat = textwrap.fill(summary["caveat"], width=100, initial_indent="  ", subsequent_indent="  ")
    return "\n".join(lines + report.headline(summary) + ["", caveat])
