"""The reports committed under docs/ are what the code renders from their own report.json: no sentence of
a committed report.md was written by hand or carried over from another run."""

from __future__ import annotations

import glob
import json
import os

import pytest

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs")
# every report, with the reproduce folders of a token-budget axis (docs/budget_*/tokens=N/)
REPORTS = sorted(
    glob.glob(os.path.join(DOCS, "*", "report.json")) + glob.glob(os.path.join(DOCS, "*", "*", "report.json"))
)


def _render(folder: str, report: dict) -> str:
    if "token_budgets" in report:  # nfeval reproduce --token-budgets
        from nfeval.pipelines.reproduce.budget_report import render

        return render(report) + "\n"
    if "sections" in report:  # nfeval reproduce
        from nfeval.pipelines.reproduce.report import render

        return render(report) + "\n"
    from nfeval.pipelines.bakeoff.report import render

    return render(report)


def test_there_are_committed_reports():
    # the `small` report (while its re-run lands in pieces, the first run's in reproduce_small/previous_run)
    assert any(os.path.relpath(p, DOCS).startswith("reproduce_small" + os.sep) for p in REPORTS)


@pytest.mark.parametrize("path", REPORTS, ids=[os.path.relpath(os.path.dirname(p), DOCS) for p in REPORTS])
def test_committed_report_md_is_rendered_from_its_json(path):
    folder = os.path.dirname(path)
    report = json.load(open(path, encoding="utf-8"))
    assert open(os.path.join(folder, "report.md"), encoding="utf-8").read() == _render(folder, report)


@pytest.mark.parametrize("path", REPORTS, ids=[os.path.relpath(os.path.dirname(p), DOCS) for p in REPORTS])
def test_committed_report_states_scale_recipe_and_corrected_verdicts(path):
    report = json.load(open(path, encoding="utf-8"))
    header = report["header"]
    assert header["facts"]["parameters"] > 0 and header["facts"]["tokens"] > 0
    assert header.get("recipes") or header.get("recipe")
    tests = [c for s in report.get("sections", []) for c in s.get("claims", [])] + report.get("ppl_tests", [])
    assert all("p_holm" in t for t in tests if t.get("p") is not None)
