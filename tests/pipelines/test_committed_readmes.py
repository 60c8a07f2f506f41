"""What a committed report's README says it found comes from that report's own data: every number its
"What it says" section states appears in the report.json files of its folder (the report's and, for a
token-budget axis, each budget's) or in the report.md rendered from each, at the precision the README
gives it."""

from __future__ import annotations

import glob
import json
import math
import os
import re

import pytest

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs")
# the READMEs that state findings, each beside the report(s) it states them from
READMES = sorted(
    p
    for p in glob.glob(os.path.join(DOCS, "*", "README.md"))
    if glob.glob(os.path.join(os.path.dirname(p), "report.json"))
)
NUMBER = re.compile(r"(?<![\w.=/])([-+−]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:e[-+]?\d+)?)([KMB%×]?)(?![\w])")
SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "%": 0.01, "": 1.0, "×": 1.0}


def said_section(text: str) -> str:
    """Returns the README's "What it says" section (up to the next "## " heading), without inline code and
    link targets (commands and paths are not findings)."""
    match = re.search(r"^## What it says[^\n]*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    body = match.group(1) if match else ""
    return re.sub(r"`[^`]*`|\]\([^)]*\)", " ", body)


def numbers_in(value, out: list[float]) -> list[float]:
    """Collects every number of a JSON value: its numeric leaves and the numbers written in its strings."""
    if isinstance(value, bool):
        return out
    if isinstance(value, (int, float)):
        out.append(float(value))
    elif isinstance(value, str):
        out += [_value(m.group(1)) * SCALE[m.group(2)] for m in NUMBER.finditer(value)]
    elif isinstance(value, dict):
        for k, v in value.items():
            numbers_in(k, out)
            numbers_in(v, out)
    elif isinstance(value, list):
        for v in value:
            numbers_in(v, out)
    return out


def _value(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-"))


def _decimals(text: str) -> int:
    return len(text.split(".")[1].split("e")[0]) if "." in text else 0


def found(text: str, suffix: str, known: list[float]) -> bool:
    """Returns whether the README's number ``text`` (with its ``suffix``) is one of ``known`` at the
    precision it is written with (its last digit; a K/M/B or % suffix scales it)."""
    value = _value(text) * SCALE[suffix]
    half = 0.5 * 10 ** -_decimals(text) * SCALE[suffix] * (1 + 1e-9)
    if "e" in text.lower():  # half a unit in the mantissa's last place: 3.0e-04 ± 5e-06
        mantissa, exponent = text.lower().replace("−", "-").split("e")
        digits = len(mantissa.lstrip("+-").replace(".", "").lstrip("0")) or 1
        half = 0.5 * 10 ** (int(exponent) - digits + 1) * (1 + 1e-9)
    return any(abs(k - value) <= half or abs(abs(k) - abs(value)) <= half for k in known if math.isfinite(k))


@pytest.mark.parametrize("path", READMES, ids=[os.path.basename(os.path.dirname(p)) for p in READMES])
def test_every_number_a_readme_finds_is_in_its_reports(path):
    folder = os.path.dirname(path)
    known: list[float] = []
    for report in glob.glob(os.path.join(folder, "**", "report.json"), recursive=True):
        if "previous_run" not in report:
            numbers_in(json.load(open(report, encoding="utf-8")), known)
            numbers_in(open(report[: -len("json")] + "md", encoding="utf-8").read(), known)
    section = said_section(open(path, encoding="utf-8").read())
    missing = [
        m.group(0)
        for m in NUMBER.finditer(section)
        if not (m.group(2) == "" and "." not in m.group(1) and abs(_value(m.group(1))) < 10)  # small counts
        and not found(m.group(1), m.group(2), known)
    ]
    assert not missing, (
        f"{os.path.relpath(path, DOCS)}: 'What it says' states numbers its reports lack: {missing}"
    )


def test_the_section_reader_and_the_matcher():
    text = "## What it says\n\n- gain −0.034 [−0.052, −0.017] at 1.6M, p 0.0053, 15%, `--lrs 3e-3`\n## A\n9.9"
    section = said_section(text)
    assert "9.9" not in section and "3e-3" not in section
    known = numbers_in(
        {"gain": -0.0341, "low": -0.0522, "text": "ci -0.017", "tokens": 1600000, "p": 0.00531}, []
    )
    assert all(found(m.group(1), m.group(2), known + [0.15]) for m in NUMBER.finditer(section))
    assert not found("0.036", "", known)
