"""Imports run downhill as the package is installed: ``tasks/`` (installed as ``nfeval.tasks``) and
``model_adapters/`` sit below ``nfeval.zeroshot``, so they never import it, and a backend that needs no
lm-eval (``nfeval generate`` on a Hugging Face folder) does not import it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
ABOVE = ("zeroshot", "pipelines", "commands", "cli", "glue", "tune", "report")


def _imported_rooms(folder: str) -> dict[str, set[str]]:
    """Returns {file: the nfeval rooms its relative imports reach} for the modules of ``folder``."""
    out = {}
    for name in os.listdir(os.path.join(ROOT, folder)):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(ROOT, folder, name), encoding="utf-8").read())
        rooms = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module:
                rooms.add(node.module.split(".")[0])  # from ..X import: nfeval.X
            elif isinstance(node, ast.ImportFrom) and node.level == 2:
                rooms.update(alias.name for alias in node.names)
        out[f"{folder}/{name}"] = rooms
    return out


def test_tasks_and_model_adapters_import_no_room_above_them():
    for folder in ("tasks", "model_adapters"):
        for path, rooms in _imported_rooms(folder).items():
            assert not rooms & set(ABOVE), f"{path} imports {sorted(rooms & set(ABOVE))}"


def test_a_backend_without_lm_eval_imports_no_lm_eval():
    code = (
        "import sys, nfeval.model_adapters.backends, nfeval.tasks.task_build; print('lm_eval' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
