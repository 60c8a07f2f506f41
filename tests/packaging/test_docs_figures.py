"""The figures and install steps the README and docs state are today's."""

from __future__ import annotations

import re
from pathlib import Path

from nfeval import cli

REPO = Path(__file__).resolve().parents[2]
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
QUICK_START = (
    f"python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 {CPU_INDEX} && "
    "pip install -e . && nfeval demo --out demo_out",
    f"python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 {CPU_INDEX} && "
    'pip install -e ".[test]" && python -m pytest',
)


def test_the_info_example_is_todays_output(capsys):
    page = (REPO / "docs" / "train.md").read_text(encoding="utf-8")
    block = re.search(r"\$ nfeval info normformer-125M\n(.*?)```", page, re.S).group(1)
    assert cli.main(["info", "normformer-125M"]) == 0
    assert block.split() == capsys.readouterr().out.split()


def test_the_quick_start_takes_torchs_cpu_wheel_and_says_how_to_swap_it():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert all(f"\n{line}\n" in readme for line in QUICK_START)  # the two command lines, verbatim
    after = readme.split(QUICK_START[1], 1)[1].split("## ", 1)[0]
    assert "on\na GPU machine, replace `--index-url" in after and "first takes the CPU wheel" not in readme
    assert CPU_INDEX in (REPO / "docs" / "cpu.md").read_text(encoding="utf-8")
