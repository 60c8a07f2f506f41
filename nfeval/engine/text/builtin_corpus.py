"""The built-in corpus used when a run names no data: Python's own English text (offline, always there)."""

from __future__ import annotations

import ast
import functools
import os
import sys
import sysconfig

from .data import Corpus, make_corpus, split_documents


def _stdlib_docstrings() -> list[str]:
    """Returns the English docstrings of CPython's standard library sources (modules, classes, functions).

    Files are read in path order (tests, idlelib, turtledemo and site-packages left out); doctest lines
    (``>>>``, ``...``) are dropped and docstrings under 8 words skipped. Empty where the sources are absent.
    """
    root = sysconfig.get_paths()["stdlib"]
    skip = {"test", "tests", "idlelib", "turtledemo", "site-packages", "__pycache__", "lib2to3"}
    docs = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in skip)
        for name in sorted(f for f in files if f.endswith(".py")):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, OSError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    text = ast.get_docstring(node) or ""
                    lines = [ln for ln in text.split("\n") if not ln.lstrip().startswith((">>>", "..."))]
                    text = "\n".join(lines).strip()
                    if len(text.split()) >= 8:
                        docs.append(text)
    return docs


@functools.lru_cache(maxsize=1)
def default_corpus() -> Corpus:
    """Returns the embedded default corpus: the English documentation every CPython install carries.

    Two sources, each deduplicated (so no validation text is also training text) and each split with
    its last 5% of documents held out: the paragraphs of ``pydoc_data.topics`` (topics in name order;
    ~370K characters) and the standard library's docstrings (``_stdlib_docstrings``; ~1.5M characters).
    The same on every machine with the same Python version; its fingerprint is recorded in runs.
    """
    from pydoc_data.topics import topics

    paragraphs = (
        para.strip("\n") for key in sorted(topics) for para in topics[key].split("\n\n") if para.strip()
    )
    train, valid = [], []
    seen: set[str] = set()
    for name, docs in (("pydoc_data.topics", paragraphs), ("stdlib docstrings", _stdlib_docstrings())):
        unique = [d for d in dict.fromkeys(docs) if d not in seen]
        seen.update(unique)
        if len(unique) >= 2:
            t, v = split_documents(unique, name)
            train += t
            valid += v
    version = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    return make_corpus(f"CPython {version} documentation (pydoc topics + stdlib docstrings)", train, valid)
