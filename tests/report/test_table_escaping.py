"""Strings from files reach tables escaped (``nfeval.base.escape``): a crafted results file still gives
well-formed markdown, CSV and text tables with one row per result."""

from __future__ import annotations

import csv
import io
import json

from test_leaderboard import FULL, GLUE_RESULTS, glue_file, zeroshot_file

from nfeval.base.escape import code_block, csv_text, markdown_row, markdown_text, text_cell
from nfeval.report.compare_table import table
from nfeval.report.leaderboard import build
from nfeval.report.leaderboard_render import render_csv, render_markdown

FORGED = "evil | 99.9 | 99.9 |\n| forged row | 1 |\r\n<!-- the rest is hidden"


def cells(row: str) -> list[str]:
    """Returns the cells of a markdown table row as GitHub reads it: ``\\`` escapes the next character."""
    out, cell, chars = [], "", iter(row.strip()[1:])
    for ch in chars:
        if ch == "\\":
            cell += ch + next(chars, "")
        elif ch == "|":
            out.append(cell)
            cell = ""
        else:
            cell += ch
    return out


def tables(markdown: str) -> list[list[str]]:
    """Returns the markdown's tables, each as its lines (consecutive lines starting with ``|``)."""
    found, current = [], []
    for line in markdown.split("\n"):
        if line.startswith("|"):
            current.append(line)
        elif current:
            found, current = found + [current], []
    return found + ([current] if current else [])


def crafted_files(tmp_path):
    zeroshot = tmp_path / "z.json"
    zeroshot_file(zeroshot, "a" * 64, "run", 124_000_000, FULL)
    data = json.loads(zeroshot.read_text())
    data["nfeval"]["model"]["path"] = "/runs/" + FORGED
    data["nfeval"]["model"]["architecture"] = "<!-- arch |"
    zeroshot.write_text(json.dumps(data))
    glue = {**GLUE_RESULTS, "mrpc": {"metric": "f1|\nx", "best": {"f1|\nx": 0.85}}}
    return str(zeroshot), glue_file(tmp_path / "g.json", "=cmd|' /C calc'!A0", "=1+1", glue)


def test_a_crafted_results_file_gives_well_formed_tables_with_one_row_per_result(tmp_path):
    z, g = crafted_files(tmp_path)
    text = render_markdown(build([z, g], names=None))
    assert "<!--" not in text and "forged row" in text
    zeroshot, glue = tables(text)
    for lines in (zeroshot, glue):
        assert len({len(cells(line)) for line in lines}) == 1, lines  # every row has the header's cells
    # header, delimiter, one row per results file (+ the zero-shot table's yardstick label and chance row)
    assert len(zeroshot) == 5 and len(glue) == 3
    assert cells(zeroshot[2])[0].strip() == markdown_text(
        "evil | 99.9 | 99.9 | | forged row | 1 | <!-- the rest is hidden"
    )
    sources = text.split("## Sources\n\n")[1].strip().split("\n")
    assert len(sources) == 2 and all(line.startswith("- ") for line in sources)


def test_a_crafted_results_file_gives_one_csv_row_per_model_and_no_formula(tmp_path):
    z, g = crafted_files(tmp_path)
    text = render_csv(build([z, g]))
    assert len(text.splitlines()) == 4  # header, two models and the chance row, each on one line
    rows = list(csv.reader(io.StringIO(text)))
    assert all(not cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row if cell)
    assert rows[3][0] == "'=1+1"


def test_text_tables_keep_one_line_per_row():
    lines = table([["run", "ppl"], ["a\nb\rc\td", "1.0"], ["x", "2.0"]], right={1})
    assert len(lines) == 3 and lines[1].startswith("a b c d")


def test_the_escapes():
    assert markdown_text("a|b\\|c\n<b>&") == "a\\|b\\\\\\|c &lt;b&gt;&amp;"
    assert markdown_row(["x|y", 3]) == "| x\\|y | 3 |"
    assert csv_text("-2+3") == "'-2+3" and csv_text(-2.5) == "-2.5" and csv_text("a\nb") == "a b"
    assert csv_text(0.6459999999999999) == "0.646" and csv_text(3) == 3
    assert code_block("a ``` b ````") == ["`````text", "a ``` b ````", "`````"]


# ---------------------------------------------------------------- tune, GLUE and the other tables (issue 39)

# a name that would forge a row of a text table and of a markdown table, and open a code span
CRAFTED = "evil `x` | 9.99 |\nrte        accuracy  0.9999*\r\n| forged row | `1` | <!-- hide"


def test_a_crafted_preset_name_gives_one_line_per_preset_in_tune_s_table():
    from nfeval.tune import results as tune_results

    points = [
        {"preset": name, "lr": 1e-3, "seed": 0, "status": "ok", "val_loss": loss, "vocab_size": 300}
        for name, loss in ((CRAFTED, 3.0), ("prenorm-tiny", 3.5))
    ]
    presets = tune_results.summarize(points, [CRAFTED, "prenorm-tiny"], [1e-3, 2e-3], [0])
    summary = {
        "presets": presets,
        "budget": {"spec": "steps=2"},
        "grid": {"seeds": [0]},
        "missing": [{"preset": CRAFTED, "lr": 2e-3, "seed": 0}],
        "warnings": tune_results.warnings_for(presets),
    }
    lines = tune_results.format_table(summary).split("\n")
    rows = lines[2 : lines.index("")]
    assert len(rows) == 2  # one per preset
    assert rows[0].startswith(text_cell(CRAFTED)) and rows[1].startswith("prenorm-tiny")
    missing = [line for line in lines if line.startswith("missing: ")]
    assert len(missing) == 1 and "forged row" in missing[0]
    assert not any(line.startswith(("rte", "| forged")) for line in lines)


def test_crafted_task_and_metric_names_give_one_line_per_task_in_glue_s_table():
    from nfeval.glue.summary import format_table, summarize_task

    points = [{"lr": 1e-5, "seed": 0, "metrics": {"accuracy": 0.6}}]
    rte = summarize_task("rte", points, {"metrics": {"accuracy": 0.5}})
    metric, other = "acc|\nuracy`", "f1\nmnli  accuracy  0.9"
    crafted = {
        "metric": metric,
        "best_lr": 1e-5,
        "best": {metric: 0.6, other: 0.5},
        "score": 0.55,
        "per_lr": {"1e-05": {metric: 0.6, other: 0.5, "seeds": 1}},
        "majority": {"metrics": {metric: 0.7}},
        "beats_majority": False,  # a note names the task and metric
    }
    summary = {
        "tasks": {CRAFTED: crafted, "rte": rte},
        "glue_average": None,
        "nfeval": {"data": {CRAFTED: {"limit": 8}}},  # a note names the task
    }
    lines = format_table(summary).split("\n")
    assert lines[2].startswith(text_cell(CRAFTED) + " " + text_cell(metric))
    assert lines[3] == "       at best lr: " + text_cell(other) + "=0.5000"
    assert lines[4].startswith("rte    accuracy")
    assert [line for line in lines if line.startswith("rte")] == [lines[4]]
    assert not any(line.startswith(("mnli", "| forged", "uracy")) for line in lines)
    notes = [line for line in lines[5:] if "forged row" in line]
    assert len(notes) == 2 and all(line.startswith(text_cell(CRAFTED)) for line in notes)
    assert (
        len(lines) == 10
    )  # header, rule, two lines of the crafted task, rte, *, two notes, majority, average


def test_the_reproduce_and_bakeoff_markdown_tables_escape_names():
    from nfeval.pipelines.report_text import markdown_table

    lines = markdown_table(["arch", "ppl"], [[CRAFTED, "1.0"], ["prenorm", "2.0"]])
    assert len(lines) == 4 and len({len(cells(line)) for line in lines}) == 1, lines
    assert "<!--" not in "\n".join(lines) and "`" not in lines[2].replace("\\`", "")
    assert cells(lines[2])[0].strip() == markdown_text(CRAFTED)


def test_crafted_task_names_give_one_line_per_result_in_the_zeroshot_table():
    from nfeval.zeroshot.evaluate import make_table

    result = {"acc,none": 0.5, "acc_stderr,none": 0.1}
    out = {"results": {CRAFTED: result, "piqa": result}, "n-samples": {"piqa": {"effective": 6}}}
    lines = make_table(out).split("\n")
    assert len(lines) == 3 and lines[1].startswith(text_cell(CRAFTED)) and lines[2].startswith("piqa ")


def test_crafted_paths_and_names_keep_compare_scores_lines_whole():
    from nfeval.report.compare_scores import format_rows

    row = {"task": CRAFTED, "metric": "acc", "n": 10, "value": 0.6, "baseline": 0.5, "difference": 0.1}
    row |= {"low": -0.1, "high": 0.3, "p_holm": 0.4, "mcnemar_p": None, "significant": False}
    row |= {"confidence": 0.95, "n_resamples": 1000, "seed": 0}
    lines = format_rows({"a": "runs/a\nB: forged.json", "b": "b.json", "rows": [row]}).split("\n")
    assert lines[0] == "A: runs/a B: forged.json" and lines[1] == "B: b.json"
    # A, B, blank, header, the row, blank, the note
    assert len(lines) == 7 and lines[4].startswith(text_cell(CRAFTED))


def test_markdown_text_escapes_backticks():
    assert markdown_text("a `b` c") == "a \\`b\\` c"
