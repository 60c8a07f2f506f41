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


# The engine's rooms, each importing only rooms to its left (the model is plain torch at the bottom; the
# speed layer, ``fast``, above the plain scoring and decoding it speeds up, so that they never see it).
ENGINE_ORDER = ("model", "text", "checkpoints", "interop", "inference", "fast", "training")


def _engine_imports(room: str) -> dict[str, set[str]]:
    """Returns {file: what of nfeval its imports reach, the engine's rooms by name, nfeval.base left out}
    for the modules of ``engine/<room>``."""
    folder = os.path.join(ROOT, "nfeval", "engine", room)
    out = {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
        reached = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            if node.level == 1:
                reached.add(room)
            elif node.level == 2:
                reached.update(names)
            elif node.level == 3:  # nfeval.X: only base, the house's foundation, sits below the engine
                reached.update(n for n in names if n != "base")
            elif node.level == 0 and names[0] == "nfeval":
                reached.add(node.module)
        out[f"engine/{room}/{name}"] = reached
    return out


def test_the_engines_rooms_import_one_way():
    for i, room in enumerate(ENGINE_ORDER):
        allowed = set(ENGINE_ORDER[: i + 1])
        for path, reached in _engine_imports(room).items():
            assert reached <= allowed, f"{path} imports {sorted(reached - allowed)}, above or outside it"


def test_the_model_room_imports_no_other_engine_room():
    assert {r for reached in _engine_imports("model").values() for r in reached} <= {"model"}


# The composed pipelines: siblings over the shared modules of nfeval/pipelines/, never importing each other.
PIPELINES = ("reproduce", "bakeoff", "demo")


def _from_module(package: str, node: ast.ImportFrom) -> str:
    """Returns the absolute module a ``from`` import of a module of ``package`` names."""
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    return ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))


def sibling_imports(source: str, package: str) -> set[str]:
    """Returns the pipelines other than its own (``package``: nfeval.pipelines.<name>[...]) that the
    module ``source`` imports, in any spelling: relative, absolute, ``from .. import name``, lazily."""
    own, reached = package.split(".")[2], set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = _from_module(package, node)
            modules = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for parts in (m.split(".") for m in modules):
            if parts[:2] == ["nfeval", "pipelines"] and len(parts) > 2 and parts[2] in PIPELINES:
                reached.add(parts[2])
    return reached - {own}


def test_the_pipelines_import_the_shared_modules_never_each_other():
    crossing = {}
    for name in PIPELINES:
        for folder, _, files in os.walk(os.path.join(ROOT, "nfeval", "pipelines", name)):
            package = "nfeval." + os.path.relpath(folder, os.path.join(ROOT, "nfeval")).replace(os.sep, ".")
            for file in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, file)
                reached = sibling_imports(open(path, encoding="utf-8").read(), package)
                if reached:
                    crossing[os.path.relpath(path, ROOT)] = sorted(reached)
    assert not crossing, f"a pipeline imports another (move what they share to nfeval/pipelines/): {crossing}"


def test_the_sibling_rule_sees_every_spelling_of_an_import():
    crossing = [
        "from ..reproduce.plan import SCALES",
        "from .. import demo, runs",
        "from ...pipelines.reproduce import run_specs",
        "from nfeval.pipelines.reproduce.report import markdown_table",
        "from nfeval.pipelines import reproduce",
        "import nfeval.pipelines.demo.report",
        "def f():\n    from ..reproduce.analysis_experiment import analyze",
    ]
    for source in crossing:
        assert sibling_imports(source, "nfeval.pipelines.bakeoff"), source
    assert sibling_imports("from ..bakeoff.runs import log", "nfeval.pipelines.bakeoff") == set()  # its own
    shared = "from .. import runs\nfrom ..scales import SCALES\nfrom . import report\nfrom .runs import log"
    assert sibling_imports(shared, "nfeval.pipelines.bakeoff") == set()
