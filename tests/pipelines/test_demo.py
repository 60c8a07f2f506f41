"""``nfeval demo`` end to end at its smallest setting (``DemoConfig.smallest``; about 30-40 s on one
core): every stage runs its real code on the task slices shipped in the package, the two runs are
compared as ``nfeval reproduce`` compares them (paired step-time ratio measured before training,
Pre-LN's S steps and NormFormer's S ÷ ratio, each to the end of its schedule), and the leaderboard has
every cell filled (issue 40)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import time

import pytest

from nfeval import embedded
from nfeval.engine.checkpoints import checkpoint
from nfeval.pipelines.demo import DemoConfig, run_demo
from nfeval.pipelines.demo.training import VAL_POINTS

ARCHES = ("prenorm", "normformer")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """Runs the smallest demo once; returns (config, summary, what it printed)."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("demo")
    cache = os.environ.get("NFEVAL_CACHE")
    os.environ["NFEVAL_CACHE"] = str(root / "cache")
    cfg = DemoConfig.smallest(str(root / "out"))
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            summary = run_demo(cfg)
    finally:
        os.environ.pop("NFEVAL_CACHE") if cache is None else os.environ.update(NFEVAL_CACHE=cache)
    return cfg, summary, printed.getvalue()


def table_rows(markdown: str, name: str) -> dict[str, dict[str, str]]:
    """Returns {table heading: {column: cell}} of the row named ``name`` in each table of ``markdown``."""
    out, heading, header = {}, None, None
    for line in markdown.splitlines():
        if line.startswith("## "):
            heading, header = line[3:], None
        elif line.startswith("| ") and header is None:
            header = [c.strip() for c in line.strip("|").split(" | ")]
        elif line.startswith(f"| {name} |") and header:
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out[heading] = dict(zip(header, cells))
    return out


def test_demo_compares_at_equal_time_with_complete_schedules(demo):
    cfg, summary, printed = demo
    ratios = json.load(open(os.path.join(cfg.out, "step_ratios.json")))
    budget = json.load(open(os.path.join(cfg.out, "budget.json")))
    ratio = ratios["normformer"]
    assert ratio["pairs"] == cfg.ratio_pairs and ratios["prenorm"]["ratio"] == 1.0
    assert budget["max_steps"] == cfg.steps
    steps = {"prenorm": cfg.steps, "normformer": max(1, round(cfg.steps / ratio["ratio"]))}
    for arch in ARCHES:
        run = os.path.join(cfg.out, "runs", arch)
        record = json.load(open(run + ".json"))  # runs.ensure_run's marker: the run finished
        assert record["status"] == "finished" and record["budget"] == {"max_steps": steps[arch]}
        # the schedule was fixed from the ratio before the first step: its length is S ÷ ratio
        config = json.load(open(os.path.join(run, "config.json")))
        assert config["train"]["total_steps"] == steps[arch]
        assert checkpoint.load(run).config.architecture == arch
        model = summary["models"][arch]
        assert model["steps"] == steps[arch]  # each run ends its own schedule
        # every run validates VAL_POINTS times, or at every step of a shorter one (a loaded machine can time
        # NormFormer so slow that its equal-time run is a few steps long)
        assert model["val_points"] >= min(VAL_POINTS, steps[arch])
    assert record["step_ratio"]["ratio"] == ratio["ratio"]
    text = open(os.path.join(cfg.out, "equal_time.txt"), encoding="utf-8").read()
    assert "measured paired" in text and f"= {steps['normformer']} steps" in text


def test_demo_leaderboard_has_every_cell_filled_and_no_mid_schedule_label(demo):
    cfg, summary, printed = demo
    board = open(os.path.join(cfg.out, "leaderboard.md"), encoding="utf-8").read()
    for text in (board, printed, open(os.path.join(cfg.out, "equal_time.txt"), encoding="utf-8").read()):
        assert "mid-schedule" not in text and "not compute-matched" not in text
    for arch in ARCHES:
        rows = table_rows(board, arch)
        assert set(rows) == {"Zero-shot", "GLUE"}
        zeroshot, glue = rows["Zero-shot"], rows["GLUE"]
        assert zeroshot["StoryCloze (acc_per_token)"] == "user-supplied"
        assert zeroshot["Avg"] == "needs StoryCloze"
        assert re.fullmatch(r"\d+\.\d", zeroshot["Avg w/o StoryCloze"])
        for column in ("HellaSwag (acc_per_token)", "PIQA (acc_per_token)", "WinoGrande (acc)"):
            assert zeroshot[column].endswith("*")  # a slice: part of the task
        empty = [c for c, v in {**zeroshot, **glue}.items() if v in ("", "–")]
        assert empty == [], (arch, empty)
        assert re.match(r"-?\d+\.\d", glue["STS-B (pearson)"])  # the best of seven learning rates
    for text in ("| GPT-3 Small 125M |", "| chance |", "| majority class |", "user-supplied (StoryCloze)"):
        assert text in board
    assert "untuned" in board and "What it cannot show" in board and "nfeval reproduce" in board
    for png in ("leaderboard_zeroshot.png", "leaderboard_curves.png"):
        assert os.path.getsize(os.path.join(cfg.out, png)) > 1000
    for arch in ARCHES:
        glue = json.load(open(summary["artifacts"]["glue"][arch]))
        assert len(glue["tasks"]["stsb"]["per_lr"]) == len(cfg.glue_lrs) == 7


def test_demo_reads_every_slice_with_its_rows_and_licence(demo):
    cfg, summary, printed = demo
    zeroshot_slices = [s for s in embedded.SLICES if s.folder.startswith("zeroshot/")]
    assert set(summary["data"]) == {s.folder for s in embedded.SLICES}
    for s in embedded.SLICES:
        held = summary["data"][s.folder]
        assert held["rows"] == held["documented_rows"] == s.files and held["licence_file"]
        assert os.path.isfile(os.path.join(s.path, "LICENSE"))
    for arch in ARCHES:
        results = json.load(open(os.path.join(cfg.out, "zeroshot", f"{arch}.json")))
        for s in zeroshot_slices:  # lm-eval read the whole slice, then scored the first items
            name = f"{s.task}_local"  # keyed by the task that ran, as stock lm-eval keys it
            assert results["n-samples"][name]["original"] == sum(s.files.values())
            assert results["n-samples"][name]["effective"] == cfg.zeroshot_limit
            assert results["nfeval"]["task_data"][name]["embedded"]["rows"] == sum(s.files.values())
        assert "storycloze_2016_local" not in results["results"]
    # one progress line per stage, each once, with an estimate of what is left
    stages = re.findall(r"stage (\d)/8 .*\[.* so far, about .* left\]", printed)
    assert stages == [str(i) for i in range(1, 9)] and printed.count("stage 8/8 leaderboard") == 1
    assert "nfeval demo finished" in printed
    # no lock file left behind: the demo's folder, the runs', the GLUE points'
    assert [p for p in pathlib.Path(cfg.out).rglob(".lock")] == []


def test_demo_resumes_without_retraining(demo, monkeypatch, capsys):
    cfg, summary, _ = demo
    monkeypatch.setenv("NFEVAL_CACHE", os.path.join(os.path.dirname(cfg.out), "cache"))
    runs = {arch: os.path.join(cfg.out, "runs", arch, "model.safetensors") for arch in ARCHES}
    before = {arch: os.path.getmtime(path) for arch, path in runs.items()}
    again = run_demo(cfg)
    assert {arch: os.path.getmtime(path) for arch, path in runs.items()} == before
    assert (
        again["models"]["prenorm"]["val_ppl_at_equal_time"]
        == summary["models"]["prenorm"]["val_ppl_at_equal_time"]
    )
    out = capsys.readouterr().out
    assert "timing normformer" not in out and "0 to run" in out  # nothing re-timed, no GLUE point redone


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


def cells(text: str, run: str) -> list[str]:
    """Returns the cells of ``run``'s row in a text table (cells apart by two or more spaces)."""
    row = next(line for line in text.splitlines() if line.startswith(f"{run}  "))
    return re.split(r"\s{2,}", row.strip())


def test_the_demo_and_leaderboard_runs_give_one_time_to_pre_ln_s_best(demo, tmp_path, capsys):
    """equal_time.txt said 0.853 (paired step-time ratio) and ``leaderboard --runs`` on the same runs
    0.866 (measured seconds): one definition now, named on both pages (issue 51 §2)."""
    from nfeval.cli import main
    from nfeval.report import time_clock

    cfg, summary, printed = demo
    results = [f for files in summary["artifacts"]["zeroshot"].values() for f in files]
    page = tmp_path / "runs.md"
    runs = [os.path.join(cfg.out, "runs", arch) for arch in ARCHES]
    assert main(["leaderboard", *results, "--runs", *runs, "--output", str(page)]) == 0
    board = page.read_text(encoding="utf-8")
    equal_time = open(os.path.join(cfg.out, "equal_time.txt"), encoding="utf-8").read()
    for arch in ARCHES:
        # equal_time.txt: "time to Pre-LN's best" before "FLOPs to…"; compare's table: "time to target" last
        assert cells(equal_time, arch)[-2] == cells(board, arch)[-1], arch
    assert cells(board, "prenorm")[-1] == "1.000"
    definition = time_clock.DEFINITIONS[time_clock.PAIRED]
    assert definition in equal_time and definition in board
    assert json.load(open(os.path.join(cfg.out, "compare.json")))["time_clock"] == time_clock.PAIRED


def test_the_closing_summary_ends_in_the_leaderboard_s_caveat(demo):
    cfg, summary, printed = demo
    board = open(os.path.join(cfg.out, "leaderboard.md"), encoding="utf-8").read()
    caveat = next(line for line in board.splitlines() if line.startswith("What it cannot show"))
    closing = printed.split("nfeval demo finished", 1)[1]
    assert summary["caveat"] == caveat  # one text: the leaderboard's paragraph is the summary's
    assert " ".join(caveat.split()) in " ".join(closing.split())
    assert closing.index("normformer ") < closing.index("What it cannot show")  # under the numbers
