"""The checkout and the wiki corpus travel to a GPU machine together within its 64 MiB (the device tool
sends the tracked files with what a call carries): the GPU budget axis (``benchmarks/gpu_budget_axis.py``)
needs both. Every report that lands grows the tree, so the tree's room is checked here, not found out
at the first GPU call."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAVEL_LIMIT = 64 * 2**20  # the device tool's working-tree limit, carried paths included
# ../shared/data/wiki's train.txt.xz and valid.txt.xz, carried by the budget axis's call
WIKI_XZ_BYTES = {"train.txt.xz": 33_274_144, "valid.txt.xz": 1_168_672}
WIKI = REPO.parent / "shared" / "data" / "wiki"


def tracked_bytes() -> int:
    """Returns the summed size of the checkout's tracked files (as they are on disk)."""
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, text=True
    ).stdout
    files = [REPO / name for name in listing.split("\0") if name]
    return sum(os.path.getsize(f) for f in files if f.is_file())


def test_the_tree_and_the_wiki_corpus_fit_one_device_call():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to measure")
    tree, corpus = tracked_bytes(), sum(WIKI_XZ_BYTES.values())
    room = TRAVEL_LIMIT - tree - corpus
    assert room > 0, (
        f"the tracked tree ({tree / 1e6:.1f} MB) and the wiki corpus ({corpus / 1e6:.1f} MB) exceed the "
        f"device call's {TRAVEL_LIMIT / 2**20:.0f} MiB by {-room / 1e6:.1f} MB: land smaller records"
    )


@pytest.mark.skipif(not WIKI.is_dir(), reason="../shared/data/wiki is not here")
def test_the_wiki_corpus_sizes_are_the_ones_counted():
    assert {name: (WIKI / name).stat().st_size for name in WIKI_XZ_BYTES} == WIKI_XZ_BYTES
