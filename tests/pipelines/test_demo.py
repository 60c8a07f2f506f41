"""``nfeval demo`` end to end at a minimal size: every stage runs its real code and leaves its artifact."""

from __future__ import annotations

import json
import os
import random
import re
import time

import pytest

from nfeval.engine.checkpoints import checkpoint
from nfeval.pipelines.demo import DemoConfig, run_demo


def write_rte(root) -> str:
    """Writes a small RTE-format folder (label: does the hypothesis word occur in the premise)."""
    rng = random.Random(0)
    words = "cat dog tree house river sun moon car bird fish".split()
    folder = root / "RTE"
    folder.mkdir(parents=True)
    for split, n in (("train", 48), ("dev", 16)):
        rows = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(n):
            premise = rng.sample(words, 4)
            word = rng.choice(words)
            label = "entailment" if word in premise else "not_entailment"
            rows.append(f"{i}\tThe {' and the '.join(premise)}.\tA {word}.\t{label}")
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(root)


def write_piqa(root) -> str:
    folder = root / "piqa"
    folder.mkdir(parents=True)
    docs = [
        {
            "goal": "How do you open a door?",
            "sol1": "Turn the handle and push.",
            "sol2": "Paint the door blue.",
            "label": 0,
        },
        {
            "goal": "How do you boil water?",
            "sol1": "Put it in the freezer.",
            "sol2": "Heat it in a pot.",
            "label": 1,
        },
        {
            "goal": "How do you read a book?",
            "sol1": "Open it and look at the pages.",
            "sol2": "Bury it.",
            "label": 0,
        },
    ]
    (folder / "validation.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return str(root)


@pytest.fixture
def demo_cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    return DemoConfig(
        out=str(tmp_path / "demo"),
        minutes=0.05,
        size="tiny",
        seq_len=32,
        batch_size=4,
        vocab_size=300,
        data_dir=write_piqa(tmp_path / "zs"),
        glue_dir=write_rte(tmp_path / "glue"),
        glue_epochs=1,
        cloze_items=24,
        zeroshot_limit=2,
        device="cpu",
        progress=False,
    )


def test_demo_end_to_end_and_resume(demo_cfg, capsys):
    summary = run_demo(demo_cfg)
    out = demo_cfg.out

    runs = {arch: os.path.join(out, "runs", arch) for arch in ("prenorm", "normformer")}
    for arch, run in runs.items():
        ckpt = checkpoint.load(run)
        assert ckpt.config.architecture == arch
        assert os.path.isfile(os.path.join(run, "metrics.jsonl"))
    # The same wall-clock budget for both runs, decided by calibration (the compare table reads it).
    budgets = [
        json.load(open(os.path.join(r, "config.json")))["train"]["config"]["max_seconds"]
        for r in runs.values()
    ]
    assert budgets[0] == budgets[1] == pytest.approx(demo_cfg.seconds_per_model())

    comparison = json.load(open(os.path.join(out, "compare.json")))
    assert [r["name"] for r in comparison["runs"]] == ["prenorm", "normformer"] and comparison[
        "baseline"
    ] == "prenorm"

    for arch in runs:
        cloze = json.load(open(os.path.join(out, "zeroshot", f"{arch}_cloze.json")))
        zs = json.load(open(os.path.join(out, "zeroshot", f"{arch}.json")))
        assert set(cloze["results"]) == {"corpus_cloze"} and set(zs["results"]) == {"piqa"}
        assert (
            cloze["n-samples"]["corpus_cloze"]["effective"] == 24
            and zs["n-samples"]["piqa"]["effective"] == 2
        )
        assert (
            zs["nfeval"]["model"]["fingerprint"]
            == cloze["nfeval"]["model"]["fingerprint"]
            == checkpoint.load(runs[arch]).fingerprint
        )
        glue = json.load(open(summary["artifacts"]["glue"][arch]))
        assert os.path.basename(os.path.dirname(summary["artifacts"]["glue"][arch])).startswith(
            f"{arch}-{zs['nfeval']['model']['fingerprint'][:12]}"
        )
        assert len(glue["tasks"]["rte"]["per_lr"]) == 7  # the seven-learning-rate sweep
        assert 0.0 <= glue["tasks"]["rte"]["best"]["accuracy"] <= 1.0

    board = open(os.path.join(out, "leaderboard.md"), encoding="utf-8").read()
    for text in (
        "| prenorm |",
        "| normformer |",
        "Corpus cloze",
        "PIQA",
        "GPT-3 Small 125M",
        "RTE",
        "Training runs at equal compute",
    ):
        assert text in board
    for png in ("leaderboard_zeroshot.png", "leaderboard_curves.png"):
        assert os.path.getsize(os.path.join(out, png)) > 1000

    assert json.load(open(os.path.join(out, "summary.json")))["models"].keys() == {"prenorm", "normformer"}
    printed = capsys.readouterr().out
    assert "nfeval demo finished" in printed and "cloze acc_per_token" in printed and "leaderboard" in printed
    # the announced budget is what it is (training steps), and the whole run's wall-clock is reported
    seconds = f"{demo_cfg.seconds_per_model():.0f} s of training steps"
    assert all(f"training {arch}: {seconds}" in printed for arch in runs)
    assert all(re.search(f"{arch}: \\d+ steps, \\d+ s of wall-clock in all", printed) for arch in runs)
    assert summary["models"]["normformer"]["zeroshot"]["corpus_cloze"]["acc"] >= 0.0

    # Rerun: every stage resumes from its artifacts; nothing is retrained.
    before = {arch: os.path.getmtime(os.path.join(r, "model.safetensors")) for arch, r in runs.items()}
    again = run_demo(demo_cfg)
    assert {
        arch: os.path.getmtime(os.path.join(r, "model.safetensors")) for arch, r in runs.items()
    } == before
    assert again["models"]["prenorm"]["best_val_ppl"] == summary["models"]["prenorm"]["best_val_ppl"]
    assert "0 to run" in capsys.readouterr().out  # the GLUE sweep found every point finished

    # A run killed before its first checkpoint (config.json and metrics.jsonl written, no weights) restarts.
    import shutil

    os.remove(os.path.join(runs["prenorm"], "model.safetensors"))
    shutil.rmtree(os.path.join(runs["prenorm"], "checkpoints"), ignore_errors=True)
    run_demo(demo_cfg)
    assert checkpoint.load(runs["prenorm"]).config.architecture == "prenorm"


def test_demo_cli_rejects_bad_folders(tmp_path, capsys):
    from nfeval.cli import main

    assert main(["demo", "--out", str(tmp_path / "d"), "--glue-dir", str(tmp_path / "nowhere")]) == 2
    assert "--glue-dir" in capsys.readouterr().err
    assert main(["demo", "--minutes", "0"]) == 2


def test_a_second_demo_into_one_folder_is_refused_at_once(tmp_path, capsys):
    from conftest import held_elsewhere

    from nfeval.cli import main

    out = tmp_path / "demo"
    with held_elsewhere(out) as pid:
        start = time.monotonic()
        assert main(["demo", "--out", str(out), "--minutes", "0.1", "--no-progress"]) == 2
        assert time.monotonic() - start < 30  # before the tokenizer or any training
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written beside the holder
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out}: in use by another nfeval process (pid {pid} on " in err, err
