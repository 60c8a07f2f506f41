"""A module imports what it uses at its top; an import sits inside a function only for a reason
``docs/layout.md`` ("Imports inside a function") names: a library the module's other callers should not
pay for (or a module of ours that brings one), the command line's start-up, or a cycle. A new import
inside a function fails here until it is moved to the top or its reason is added below."""

from __future__ import annotations

import ast
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PACKAGES = ("nfeval", "tasks", "model_adapters", "leaderboards")

# libraries any module may import where it needs them: slow to import, or needed only by one path
LIBRARIES = (
    "lm_eval",
    "transformers",
    "datasets",
    "matplotlib",
    "scipy",
    "psutil",
    "pydoc_data",
    "torch.distributed",
    "torch.utils.tensorboard",
    "torch.utils.collect_env",
)

# (file, imported module as written) -> why it is imported inside a function there
WHERE = {
    ("nfeval/cli.py", "*"): "start-up: only the chosen command's module is imported",
    ("nfeval/base/progress.py", "tqdm"): "imported after cli.py has set tqdm's switches",
    ("nfeval/launch/local.py", "torch"): "launch/ runs before a command decides it needs torch",
    ("nfeval/launch/local.py", "..engine.fast"): "brings torch",
    ("nfeval/launch/jobs.py", "..engine.fast"): "a Slurm job unpickles jobs.py without torch",
    ("nfeval/launch/jobs.py", "..base.artifacts"): "brings torch",
    ("nfeval/commands/train.py", "..launch"): "submitit, only for --launcher slurm",
    ("nfeval/commands/compare.py", "..report.seeds"): "brings scipy.stats, only for --group",
    ("nfeval/commands/compare.py", "..base.plots"): "brings matplotlib, only for --plot",
    ("nfeval/analysis/runs.py", "..base.plots"): "brings matplotlib",
    ("nfeval/analysis/runs.py", "."): "analysis.figures, which brings matplotlib",
    ("nfeval/report/leaderboard_page.py", "..base.plots"): "brings matplotlib",
    ("nfeval/report/leaderboard_page.py", ".compare_table"): "brings the checkpoint readers, only for --runs",
    ("nfeval/tune/results.py", "..base.plots"): "brings matplotlib",
    ("nfeval/engine/training/recipe.py", ".train_config"): "brings the presets and tokenizers",
    ("nfeval/engine/training/step_ratio.py", ".trainer"): "brings the trainer and its checkpoints",
    ("nfeval/zeroshot/cache.py", "..tasks.gpt3"): "brings lm_eval",
    ("nfeval/zeroshot/records.py", "..tasks.gpt3"): "brings lm_eval",
    ("nfeval/zeroshot/evaluate.py", "..model_adapters"): "NFEvalLM brings lm_eval",
    ("tasks/task_build.py", "torch"): "tasks/ load under lm-eval's task loader without torch",
    ("tasks/task_build.py", "..base.artifacts"): "brings torch",
    ("nfeval/pipelines/reproduce/budget_axis.py", "."): "a cycle: the package imports budget_axis",
}


def function_imports(root: str = ROOT) -> list[tuple[str, int, str]]:
    """Returns (file, line, module as written) of every import inside a function of the packages under
    ``root``."""
    found = []
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(root, package)):
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                tree = ast.parse(open(path, encoding="utf-8").read())
                for fn in ast.walk(tree):
                    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        continue
                    for node in ast.walk(fn):
                        if isinstance(node, ast.Import):
                            found += [(rel, node.lineno, alias.name) for alias in node.names]
                        elif isinstance(node, ast.ImportFrom):
                            found.append((rel, node.lineno, "." * node.level + (node.module or "")))
    return found


def allowed(path: str, module: str) -> bool:
    """Returns whether importing ``module`` inside a function of ``path`` has a named reason."""
    if any(module == lib or module.startswith(lib + ".") for lib in LIBRARIES):
        return True
    return (path, "*") in WHERE or (path, module) in WHERE


def test_every_import_inside_a_function_has_a_named_reason():
    unexplained = [
        f"{path}:{line}: {module}" for path, line, module in function_imports() if not allowed(path, module)
    ]
    assert not unexplained, "move these to the module's top, or name their reason in WHERE:\n" + "\n".join(
        unexplained
    )


def test_every_named_reason_is_still_used():
    used = {(path, module) for path, _, module in function_imports()}
    used |= {(path, "*") for path, _ in used}
    stale = sorted(key for key in WHERE if key not in used)
    assert not stale, f"no longer imported inside a function (drop from WHERE): {stale}"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    """The walk finds a stdlib import inside a function, which no reason covers."""
    package = tmp_path / "nfeval"
    package.mkdir()
    (package / "m.py").write_text("def f():\n    import json\n    return json\n", encoding="utf-8")
    found = function_imports(str(tmp_path))
    assert found == [("nfeval/m.py", 2, "json")]
    assert not allowed("nfeval/m.py", "json")
