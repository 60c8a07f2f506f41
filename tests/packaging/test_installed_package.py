"""A non-editable install works from any folder (issue 22 item 2): reference rows, task YAMLs and the
export template ship inside the package, and ``nfeval leaderboard --reference gpt3`` (the demo's last
stage) runs from a temporary folder on a ``pip install .`` into a fresh virtual environment.

The install is offline: ``--no-index --no-build-isolation`` builds with the setuptools of the running
environment (the test extra pins one that reads this pyproject), and the fresh venv sees the running
environment's dependencies through a ``.pth`` file, so nothing is downloaded.
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "nfeval", "tasks", "model_adapters", "leaderboards")
SHIPPED = (
    "leaderboards/reference/gpt3.json",
    "tasks/piqa/piqa_local.yaml",
    "tasks/hellaswag/_hellaswag.yaml",
    "engine/hf_template/modeling_nfeval.py",
)


def _fresh_venv(where: Path) -> Path:
    """Returns the python of a new venv under ``where`` that also sees this environment's packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")] + site.getsitepackages()
    ours.append(sysconfig.get_paths()["purelib"])
    Path(purelib, "outer_env.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    return python


@pytest.mark.timeout(180)
def test_non_editable_install_finds_references_from_any_folder(tmp_path):
    from test_leaderboard import FULL, zeroshot_file

    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        kw = {"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}
        copy(ROOT / name, src / name, **kw)
    python = _fresh_venv(tmp_path / "venv")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    subprocess.run([*pip, "--no-index", "--no-build-isolation", str(src)], check=True, cwd=tmp_path)
    shutil.rmtree(src)  # the installed package must not lean on the source tree

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import nfeval, os; print(os.path.dirname(nfeval.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=elsewhere,
    ).stdout.strip()
    assert where.startswith(str(tmp_path / "venv")), where
    for rel in SHIPPED:
        assert Path(where, rel).is_file(), rel

    results = zeroshot_file(elsewhere / "a.json", "a" * 64, "nf-125M", 124_000_000, FULL)
    run = subprocess.run(
        [str(python), "-m", "nfeval", "leaderboard", results, "--reference", "gpt3", "--output", "lb.json"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
    )
    assert run.returncode == 0, run.stderr
    rows = json.loads((elsewhere / "lb.json").read_text())
    assert "GPT-3" in json.dumps(rows)


def test_references_are_found_from_any_working_directory(tmp_path, monkeypatch):
    from nfeval.base.errors import MissingDataError
    from nfeval.report.leaderboard_read import load_reference

    monkeypatch.chdir(tmp_path)
    assert load_reference("gpt3")["name"] == "GPT-3"
    with pytest.raises(MissingDataError, match=r"one of \['gpt3'\]"):
        load_reference("gpt4")
