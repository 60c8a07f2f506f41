"""Yardsticks wherever a score is shown: intervals, chance and majority-class rows, Holm-adjusted marks,
clean CSV numbers, sources relative to the page, and plots that label what is missing and what is log."""

from __future__ import annotations

import csv
import io
import json

import pytest
from matplotlib.container import ErrorbarContainer
from test_leaderboard import FULL, GLUE_RESULTS, glue_file, zeroshot_file
from test_paired import synthetic  # noqa: F401  (the fixture: base, strong and null zero-shot results)

from nfeval.base import plots
from nfeval.cli import main
from nfeval.report import paired
from nfeval.report.leaderboard import build
from nfeval.report.leaderboard_render import render_csv, render_markdown


def test_zeroshot_cells_carry_a_95_interval_and_the_table_a_chance_row(tmp_path):
    path = zeroshot_file(tmp_path / "z.json", "a" * 64, "run", 1_000_000, FULL)
    data = json.loads(open(path).read())
    data["results"]["piqa"]["acc_per_token_stderr,none"] = 0.05
    data["n-samples"] = {"hellaswag": {"effective": 50, "original": 50}}
    open(path, "w").write(json.dumps(data))
    board = build([path])
    row, chance = (r for r in board["zeroshot"]["rows"] if r["reference"] != "GPT-3")
    assert row["scores"]["piqa"]["half_width"] == pytest.approx(1.96 * 0.05, rel=1e-3)  # lm-eval's SE
    hellaswag = row["scores"]["hellaswag"]  # no stderr: binomial over the 50 items
    assert hellaswag["half_width"] == pytest.approx(1.96 * (0.3125 * 0.6875 / 50) ** 0.5, rel=1e-3)
    assert row["scores"]["winogrande"]["half_width"] is None  # neither known: no interval claimed
    assert chance["name"] == "chance" and chance["reference"] == "yardstick"
    assert {t: c["value"] for t, c in chance["scores"].items()} == {
        "hellaswag": 0.25,
        "piqa": 0.5,
        "winogrande": 0.5,
        "storycloze_2016": 0.5,
        "openbookqa": 0.25,
    }
    text = render_markdown(board)
    assert "| 31.2 ±12.8 | 62.5 ±9.8 | 51.0 |" in text and "| chance |" in text
    assert "±: half-width of the 95% interval" in text


def test_glue_table_shows_the_majority_class_and_says_who_does_not_beat_it(tmp_path):
    majority = {"metrics": {"accuracy": 0.68, "f1": 0.81}, "rows": {"dev": 408}}
    tasks = {**GLUE_RESULTS, "mrpc": {**GLUE_RESULTS["mrpc"], "majority": majority}}
    board = build([glue_file(tmp_path / "g.json", "c" * 64, "mlm", tasks)])
    row, floor = board["glue"]["rows"]
    assert floor["name"] == "majority class" and floor["scores"]["mrpc"]["value"] == 0.81
    assert floor["scores"]["cola"] is None  # that summary recorded no majority class for CoLA
    assert board["glue"]["below_majority"] == []
    text = render_markdown(board)
    assert "| majority class |" in text and "majority class: the most frequent training label" in text

    weak = {**tasks, "mrpc": {**tasks["mrpc"], "best": {"accuracy": 0.6, "f1": 0.7}}}
    board = build([glue_file(tmp_path / "w.json", "d" * 64, "weak", weak)])
    assert board["glue"]["below_majority"] == ["weak on MRPC"]
    assert "Not above the majority class: weak on MRPC." in render_markdown(board)


def test_glue_accuracy_columns_carry_a_binomial_interval(tmp_path):
    tasks = {
        "rte": {
            "metric": "accuracy",
            "best": {"accuracy": 0.5},
            "majority": {"metrics": {"accuracy": 0.527}, "rows": {"dev": 50}},
        }
    }
    board = build([glue_file(tmp_path / "g.json", "c" * 64, "mlm", tasks)])
    cell = board["glue"]["rows"][0]["scores"]["rte"]
    assert cell["half_width"] == pytest.approx(1.96 * (0.25 / 50) ** 0.5, rel=1e-3)  # ±14 points at n = 50
    assert "| 50.0 ±13.9 |" in render_markdown(board)


def test_a_diverged_glue_task_is_shown_missing_with_a_warning(tmp_path):
    tasks = {"rte": {"metric": "accuracy", "best_lr": None, "best": {}, "score": None}}
    board = build([glue_file(tmp_path / "g.json", "c" * 64, "mlm", {**GLUE_RESULTS, **tasks})])
    assert [c["task"] for c in board["glue"]["columns"]] == ["cola", "mrpc"]
    assert any("every learning rate diverged" in w for w in board["warnings"])


def test_csv_numbers_are_clean(tmp_path):
    path = zeroshot_file(tmp_path / "z.json", "a" * 64, "run", 1_000_000, FULL)
    data = json.loads(open(path).read())
    data["results"]["piqa"]["acc_per_token,none"] = 0.6459999999999999
    open(path, "w").write(json.dumps(data))
    row = next(csv.DictReader(io.StringIO(render_csv(build([path])))))
    assert row["piqa/acc_per_token"] == "0.646" and row["flops"] == "" and row["zeroshot_average"]
    assert len(row["zeroshot_average"]) <= 14


def test_sources_are_relative_to_the_page_that_prints_them(tmp_path, monkeypatch):
    path = zeroshot_file(tmp_path / "z.json", "a" * 64, "run", 1_000_000, FULL)
    (tmp_path / "pages").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    page = tmp_path / "pages" / "board.md"
    assert main(["leaderboard", path, "--output", str(page)]) == 0
    sources = page.read_text().split("## Sources\n\n")[1]
    assert sources.strip().endswith("; ../z.json")


def test_several_paired_differences_are_holm_adjusted():
    rows = [{"p": p} for p in (0.01, 0.02, 0.03, 0.5)]
    paired.adjust(rows, confidence=0.95)
    assert [r["p_holm"] for r in rows] == pytest.approx([0.04, 0.06, 0.06, 0.5])
    assert [r["significant"] for r in rows] == [True, False, False, False]  # 0.02 alone would have been


def test_the_board_marks_differences_by_holm_and_says_so(synthetic, tmp_path, capsys):  # noqa: F811
    paths = [synthetic[n] for n in ("base", "strong", "null")]
    board = build(paths, metric=["acc"])
    paired.add_to_board(board, "base", n_resamples=1000)
    cells = {r["name"]: r["scores"]["piqa"] for r in board["zeroshot"]["rows"] if r["reference"] is None}
    strong, null = cells["strong"]["paired"], cells["null"]["paired"]
    assert strong["p"] < 0.01 and strong["p_holm"] == pytest.approx(min(1, 2 * strong["p"]))
    assert strong["significant"] and not null["significant"] and board["paired"]["comparisons"] == 2
    text = render_markdown(board)
    assert "Holm-adjusted over the 2 differences here" in text and "p (Holm)" in text
    assert main(["compare-scores", paths[1], paths[0], "--resamples", "1000"]) == 0
    assert "Holm-adjusted over the 1 rows" in capsys.readouterr().out


@pytest.fixture()
def figures(monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.append(fig) or path)
    return drawn


def test_bars_show_intervals_chance_and_label_a_missing_bar(figures, tmp_path):
    plots.plot_bars(
        ["A", "B"], [("m", [60.0, None])], str(tmp_path / "x.png"), "t", "accuracy (%)",
        errors=[[7.0, None]], chance=[50.0, 25.0],
    )  # fmt: skip
    (ax,) = figures[0].axes
    assert [t.get_text() for t in ax.texts] == ["n/a"]  # a missing bar is not a bar of height 0
    assert len(ax.patches) == 1 and any(isinstance(c, ErrorbarContainer) for c in ax.containers)
    dashes = [c for c in ax.collections if c.get_linestyle()[0][1]]
    assert len(dashes) == 2  # one chance line per column
    assert "chance" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_curves_name_the_flops_unit_and_the_log_scale(figures, tmp_path):
    runs = [
        {"name": n, "val": [{"flops": f * 1e15, "wall_s": f * 10, "val_ppl": 50 / f} for f in (1, 2, 3)]}
        for n in ("a", "b")
    ]
    comparison = {
        "runs": runs,
        "baseline": "a",
        "target_val_ppl": 20.0,
        "budget": {"flops": 2e15, "wall_s": 20},
    }
    plots.plot_curves(comparison, str(tmp_path / "c.png"))
    flops_axis, time_axis = figures[0].axes
    assert flops_axis.get_xlabel() == "training FLOPs (×10^15)"
    assert max(flops_axis.lines[0].get_xdata()) == pytest.approx(3.0)
    assert flops_axis.get_ylabel() == "validation perplexity (log scale)"
