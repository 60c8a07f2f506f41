"""``nfeval demo``: the whole pipeline, offline, on the embedded default corpus.

1. a tokenizer trained on the embedded default corpus (CPython's own documentation text);
2. a Pre-LN baseline and a NormFormer trained under the same wall-clock budget;
3. ``nfeval compare`` of the two (validation perplexity at equal compute; compute to reach the
   baseline's best perplexity);
4. zero-shot through lm-eval: a held-out cloze task built from the corpus's validation split (always),
   and the five public tasks on whatever local data ``--data-dir`` holds;
5. a GLUE sweep when ``--glue-dir`` is given;
6. a leaderboard (markdown, GPT-3 reference rows, plots);
7. a closing summary.

Every stage calls the same code as the command it stands for, and every stage resumes: a rerun with
the same ``--out`` skips finished training runs, cached zero-shot results and finished GLUE points.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ..base.artifacts import atomic_write_json, atomic_write_text
from ..base.escape import text_cell
from ..base.jsonio import load_json
from ..base.sweep_lock import folder_locked
from .stages import CLOZE_CHOICES, shared_tokenizer, zeroshot_data

ARCHES = ("prenorm", "normformer")  # baseline first: compare and leaderboard take it as the baseline


@dataclass
class DemoConfig:
    out: str = "demo_out"
    minutes: float = 10.0  # target for the whole demo; training gets TRAIN_SHARE of it
    size: str = "tiny"
    seq_len: int = 128
    batch_size: int = 16
    lr: float = 3e-3
    vocab_size: int = 2048
    data_dir: str | None = None
    glue_dir: str | None = None
    glue_tasks: tuple[str, ...] = ("rte",)
    glue_epochs: int = 3
    zeroshot_limit: int | None = 500
    cloze_items: int = 500
    device: str = "auto"
    seed: int = 1
    progress: bool = True

    TRAIN_SHARE = 0.6

    def seconds_per_model(self) -> float:
        """Returns each model's training budget in seconds (the two runs share TRAIN_SHARE of the demo)."""
        return self.minutes * 60 * self.TRAIN_SHARE / len(ARCHES)


def log(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


def train_models(cfg: DemoConfig, tokenizer: str) -> dict[str, str]:
    """Trains Pre-LN and NormFormer under the same wall-clock budget (resuming); returns {arch: run dir}."""
    from ..engine.training.train import train
    from ..engine.training.train_config import TrainConfig

    runs = {}
    for arch in ARCHES:
        run_dir = os.path.join(cfg.out, "runs", arch)
        tcfg = TrainConfig(
            preset=f"{arch}-{cfg.size}",
            tokenizer=tokenizer,
            # fairseq's transformer_lm positions (sinusoidal, sqrt(d) embedding scale): defined at every
            # position, so zero-shot items longer than the training blocks still fit the window.
            model={"positions": "sinusoidal", "scale_embedding": True, "max_seq_len": max(cfg.seq_len, 1024)},
            batch_size=cfg.batch_size,
            seq_len=cfg.seq_len,
            max_seconds=cfg.seconds_per_model(),
            lr=cfg.lr,
            warmup=0.05,
            log_interval=25,
            eval_interval=100,
            eval_samples=128,
            ckpt_interval=200,
            device=cfg.device,
            seed=cfg.seed,
            progress=cfg.progress,
        )
        log(
            f"training {arch}: {tcfg.max_seconds:.0f} s of training steps (the budget both models get; "
            f"the step-time calibration, validation and checkpoints add to it) → {run_dir}"
        )
        start = time.time()
        summary = train(tcfg, run_dir, resume=True)  # a finished run is kept, a killed one continues
        log(f"{arch}: {summary['step']} steps, {time.time() - start:.0f} s of wall-clock in all")
        runs[arch] = run_dir
    return runs


def run_zeroshot(cfg: DemoConfig, runs: dict[str, str]) -> dict[str, list[str]]:
    """Scores each run zero-shot (cached by model fingerprint); returns {arch: results files}.

    The corpus cloze task is always scored whole; ``cfg.zeroshot_limit`` applies to the public tasks.
    """
    from ..model_adapters.config import ScoringConfig
    from ..zeroshot.config import ZeroShotConfig
    from ..zeroshot.evaluate import evaluate

    data_dir, tasks = zeroshot_data(cfg.out, cfg.data_dir, cfg.cloze_items, cfg.seed, log)
    device = None if cfg.device == "auto" else cfg.device
    files: dict[str, list[str]] = {}
    for arch, run_dir in runs.items():
        log(f"zero-shot {arch}: {', '.join(tasks)}")
        out = os.path.join(cfg.out, "zeroshot", f"{arch}_cloze.json")
        common = {"data_dir": data_dir, "scoring": ScoringConfig(device=device, progress=cfg.progress)}
        evaluate(run_dir, ZeroShotConfig(tasks=["corpus_cloze"], output=out, **common))
        files[arch] = [out]
        if len(tasks) > 1:
            out = os.path.join(cfg.out, "zeroshot", f"{arch}.json")
            evaluate(run_dir, ZeroShotConfig(tasks=tasks[1:], limit=cfg.zeroshot_limit, output=out, **common))
            files[arch].append(out)
    return files


def run_glue(cfg: DemoConfig, runs: dict[str, str]) -> dict[str, str]:
    """Sweeps seven learning rates on ``cfg.glue_tasks`` for each run (resumable); returns {arch:
    glue.json}."""
    from ..engine.checkpoints.checkpoint import read_config
    from ..glue.sweep import Recipe, sweep

    if not cfg.glue_dir:
        log("GLUE: skipped (pass --glue-dir DIR with the GLUE TSVs, e.g. ../shared/data/glue)")
        return {}
    files = {}
    # Small CPU models want larger learning rates than the base-model default grid.
    lrs = [1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 3e-3]
    for arch, run_dir in runs.items():
        # Keyed by the weights: a retrained model (say, after a kill) starts a fresh sweep, never a mixed one.
        fingerprint = read_config(run_dir)[1]["fingerprint"]
        out = os.path.join(cfg.out, "glue", f"{arch}-{fingerprint[:12]}")
        log(f"GLUE {arch}: {', '.join(cfg.glue_tasks)} × {len(lrs)} learning rates")
        sweep(
            run_dir,
            tasks=list(cfg.glue_tasks),
            lrs=lrs,
            out_dir=out,
            glue_dir=cfg.glue_dir,
            recipe=Recipe(epochs=cfg.glue_epochs, max_len=cfg.seq_len),
            device=None if cfg.device == "auto" else cfg.device,
            progress=cfg.progress,
        )
        files[arch] = os.path.join(out, "glue.json")
    return files


@folder_locked(lambda cfg: cfg.out)  # one writer per output folder
def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Runs every stage into ``cfg.out``; returns the summary (also written to ``summary.json``). A second
    demo into the same ``cfg.out`` is refused at once (``sweep_lock.folder_lock``), naming the holder."""
    from ..report.compare import compare
    from ..report.compare_table import format_comparison
    from ..report.leaderboard import build
    from ..report.leaderboard_render import write

    start = time.time()
    os.makedirs(cfg.out, exist_ok=True)
    log(f"output folder {os.path.abspath(cfg.out)}; target {cfg.minutes:g} min")
    tokenizer = shared_tokenizer(cfg.out, cfg.vocab_size)
    runs = train_models(cfg, tokenizer)

    comparison = compare([runs[a] for a in ARCHES], names=list(ARCHES))
    compare_text = format_comparison(comparison)
    atomic_write_json(os.path.join(cfg.out, "compare.json"), comparison)
    atomic_write_text(os.path.join(cfg.out, "compare.txt"), compare_text + "\n")
    print(compare_text, flush=True)

    zeroshot_files = run_zeroshot(cfg, runs)
    glue_files = run_glue(cfg, runs)

    board_path = os.path.join(cfg.out, "leaderboard.md")
    board = build(
        [f for fs in zeroshot_files.values() for f in fs] + list(glue_files.values()), reference="gpt3"
    )
    write(board, board_path, "md", title="nfeval demo", comparison=comparison)

    summary = headline(cfg, runs, comparison, zeroshot_files, glue_files, board_path)
    summary["wall_s"] = round(time.time() - start, 1)
    atomic_write_json(os.path.join(cfg.out, "summary.json"), summary)
    print(format_summary(summary), flush=True)
    return summary


def headline(cfg, runs, comparison, zeroshot_files, glue_files, board_path) -> dict[str, Any]:
    """Returns the demo's headline numbers and where each artifact is."""
    rows = {row["name"]: row for row in comparison["runs"]}
    out: dict[str, Any] = {
        "artifacts": {
            "runs": runs,
            "compare": os.path.join(cfg.out, "compare.txt"),
            "zeroshot": zeroshot_files,
            "glue": glue_files,
            "leaderboard": board_path,
            "plots": sorted(os.path.join(cfg.out, f) for f in os.listdir(cfg.out) if f.endswith(".png")),
        },
        "models": {},
    }
    for arch in ARCHES:
        row = rows.get(arch, {})
        model: dict[str, Any] = {
            "best_val_ppl": row.get("best_val_ppl"),
            "steps": row.get("steps"),
            "tokens": row.get("tokens"),
            "fraction_of_baseline_compute_to_its_best_ppl": (row.get("to_target") or {}).get("fraction"),
        }
        if arch in zeroshot_files:
            results = {t: r for f in zeroshot_files[arch] for t, r in load_json(f)["results"].items()}
            model["zeroshot"] = {
                t: {
                    m.split(",")[0]: v
                    for m, v in r.items()
                    if m.split(",")[0] in ("acc", "acc_norm", "acc_per_token", "acc_uncond")
                }
                for t, r in results.items()
            }
        if arch in glue_files:
            glue = load_json(glue_files[arch])
            model["glue"] = {t: {"best_lr": r["best_lr"], **r["best"]} for t, r in glue["tasks"].items()}
        out["models"][arch] = model
    return out


def format_summary(summary: dict[str, Any]) -> str:
    """Returns the closing summary as text: artifact paths, then the headline numbers."""
    a = summary["artifacts"]
    lines = [
        "",
        "nfeval demo finished" + (f" in {summary['wall_s'] / 60:.1f} min" if "wall_s" in summary else ""),
        "",
    ]
    lines += [f"  runs          {', '.join(a['runs'].values())}", f"  comparison    {a['compare']}"]
    lines += [
        f"  zero-shot     {', '.join(f for fs in a['zeroshot'].values() for f in fs) or '–'}",
        f"  GLUE          {', '.join(a['glue'].values()) or '– (no --glue-dir)'}",
    ]
    lines += [f"  leaderboard   {a['leaderboard']}", f"  plots         {', '.join(a['plots']) or '–'}", ""]
    for arch, m in summary["models"].items():
        ppl = m.get("best_val_ppl")
        parts = [f"{arch:<11} best val ppl {ppl:.2f}" if ppl is not None else f"{arch:<11} best val ppl –"]
        cloze = m.get("zeroshot", {}).get("corpus_cloze", {})
        if "acc_per_token" in cloze:
            parts.append(
                f"cloze acc_per_token {100 * cloze['acc_per_token']:.1f}% (acc {100 * cloze['acc']:.1f}%, "
                f"chance {100 / CLOZE_CHOICES:.0f}%)"
            )
        for task, g in m.get("glue", {}).items():
            best = {k: v for k, v in g.items() if k != "best_lr"}
            parts.append(
                f"{task} "
                + ", ".join(f"{k} {v:.3f}" for k, v in best.items() if isinstance(v, float))
                + f" @ lr {g['best_lr']:g}"
            )
        lines.append("  " + " | ".join(parts))
    return "\n".join(text_cell(line) for line in lines)  # paths and task names: one line each
