"""A wheel of the checkout works from any folder (issue 22 item 2, issue 41): every package ships (setup.py
finds them), so every command's ``--help`` runs; reference rows, task YAMLs and the export template ship
inside the package, so ``nfeval leaderboard --reference gpt3`` (the demo's last stage) and ``nfeval info``
run from a temporary folder, with the checkout nowhere on ``sys.path``.

The build is offline: ``pip wheel --no-index --no-build-isolation`` builds with the setuptools of the
running environment (the test extra pins one that reads this pyproject), and the fresh venv sees the
running environment's dependencies through a ``.pth`` file, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "nfeval", "tasks", "model_adapters", "leaderboards")
SHIPPED = (
    "leaderboards/reference/gpt3.json",
    "tasks/piqa/piqa_local.yaml",
    "tasks/hellaswag/_hellaswag.yaml",
    "engine/interop/hf_template/modeling_nfeval.py",
    # the embedded task slices (--data-dir embedded, --glue-dir embedded), each with its licence
    *(
        f"embedded/{folder}/{name}"
        for folder, files in (
            ("zeroshot/hellaswag", ("validation.jsonl",)),
            ("zeroshot/piqa", ("validation.jsonl",)),
            ("zeroshot/winogrande", ("validation.jsonl",)),
            ("zeroshot/openbookqa", ("test.jsonl",)),
            ("glue/STS-B", ("train.tsv", "dev.tsv", "LICENSE.txt")),
        )
        for name in (*files, "SOURCE.md", "LICENSE")
    ),
    "embedded/README.md",
)
# Runs in the installed venv: each command's --help in one process (one torch import, not fifteen);
# prints {command: why it failed} and every imported nfeval module's file.
EVERY_HELP = """
import contextlib, io, json, sys
from nfeval import cli
failed = {}
for name in cli.COMMANDS:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = cli.main([name, "--help"])
    except SystemExit as e:
        code = e.code
    except Exception as e:
        code = f"{type(e).__name__}: {e}"
    if code not in (0, None) or "usage" not in out.getvalue().lower():
        failed[name] = f"{code}: {out.getvalue()[-300:]}"
ours = [m for m in list(sys.modules) if m.split(".")[0] == "nfeval"]
files = {m: getattr(sys.modules[m], "__file__", None) for m in ours}
print(json.dumps({"commands": list(cli.COMMANDS), "failed": failed, "files": files, "path": sys.path}))
"""


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


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """Returns the venv where a wheel built from a copy of the checkout is installed (the copy deleted)."""
    root = tmp_path_factory.mktemp("installed")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        if not (ROOT / name).exists():  # setup.py: a checkout before issue 41 had none
            continue
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "-q"]
    wheel_dir = root / "dist"
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-index", "--no-build-isolation", "-w", str(wheel_dir), str(src)],
        check=True,
        cwd=root,
    )
    shutil.rmtree(src)  # the installed package must not lean on the source tree
    (wheel,) = wheel_dir.glob("nfeval-*.whl")
    python = _fresh_venv(root / "venv")
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], check=True
    )
    return root / "venv"


def _run(venv: Path, cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Returns ``cmd`` run in ``cwd`` with ``venv``'s bin first on PATH and no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)


@pytest.mark.timeout(180)
def test_every_command_and_its_files_come_from_the_wheel(installed, tmp_path):
    run = _run(installed, [str(installed / "bin" / "python"), "-c", EVERY_HELP], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.splitlines()[-1])
    checkout = {ROOT, *(ROOT / name for name in SOURCES)}
    assert not [p for p in seen["path"] if Path(p or tmp_path).resolve() in checkout]
    assert len(seen["commands"]) > 10 and seen["failed"] == {}
    not_installed = {m: f for m, f in seen["files"].items() if f and not f.startswith(str(installed))}
    assert not_installed == {}
    where = Path(seen["files"]["nfeval"]).parent
    for rel in SHIPPED:
        assert (where / rel).is_file(), rel

    info = _run(installed, ["nfeval", "info", "prenorm-tiny"], tmp_path)  # the console script
    assert info.returncode == 0, info.stderr[-3000:]
    assert "prenorm" in info.stdout


@pytest.mark.timeout(180)
def test_the_leaderboard_finds_its_references_from_any_folder(installed, tmp_path):
    from test_leaderboard import FULL, zeroshot_file

    results = zeroshot_file(tmp_path / "a.json", "a" * 64, "nf-125M", 124_000_000, FULL)
    cmd = ["nfeval", "leaderboard", results, "--reference", "gpt3", "--output", "lb.json"]
    run = _run(installed, cmd, tmp_path)
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "lb.json").read_text())
    assert "GPT-3" in json.dumps(rows)


def test_references_are_found_from_any_working_directory(tmp_path, monkeypatch):
    from nfeval.base.errors import MissingDataError
    from nfeval.report.leaderboard_read import load_reference

    monkeypatch.chdir(tmp_path)
    assert load_reference("gpt3")["name"] == "GPT-3"
    with pytest.raises(MissingDataError, match=r"one of \['gpt3'\]"):
        load_reference("gpt4")
