"""Strings from files reach tables escaped (``nfeval.base.escape``): a crafted results file still gives
well-formed markdown, CSV and text tables with one row per result."""

from __future__ import annotations

import csv
import io
import json

from test_leaderboard import FULL, GLUE_RESULTS, glue_file, zeroshot_file

from nfeval.base.escape import code_block, csv_text, markdown_row, markdown_text
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
