"""Copies the real data that ``gpu_check.py`` reads into a folder of the checkout, so that it can travel to
a device machine (which receives the working tree and the paths named in ``carry``, never ``../shared``):

    python benchmarks/gpu_check_data.py                 # ../shared/data -> .gpu_data (ignored by git)
    python benchmarks/gpu_check_data.py --source DIR --dest DIR

then name ``.gpu_data`` in the device call's ``carry`` and give the checks ``--data-dir .gpu_data`` (their
default when that folder exists). What it copies, about 18 MB, in ``../shared/data``'s layout: the
validation sets of PIQA, HellaSwag, WinoGrande and OpenBookQA (OpenBookQA's validation file only, so the
``openbookqa_local`` task scores it rather than its test set), SST-2's train and dev TSVs, and GPT-2's
tokenizer files.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "data"
DEFAULT_DEST = REPO / ".gpu_data"
FILES = (
    "zeroshot/piqa/validation.jsonl",
    "zeroshot/hellaswag/validation.jsonl",
    "zeroshot/winogrande/validation.jsonl",
    "zeroshot/openbookqa/validation.jsonl",
    "glue/SST-2/train.tsv",
    "glue/SST-2/dev.tsv",
    "tokenizer/gpt2/encoder.json",
    "tokenizer/gpt2/vocab.bpe",
)


def default_data_dir() -> Path:
    """Returns the data folder the checks read by default: ``.gpu_data`` in the checkout when it exists
    (on a device machine), else ``../shared/data`` beside the checkout."""
    return DEFAULT_DEST if DEFAULT_DEST.is_dir() else DEFAULT_SOURCE


def copy_data(source: Path, dest: Path) -> dict[str, list[str]]:
    """Copies ``FILES`` from ``source`` to ``dest`` (same relative paths); returns {"copied": [...],
    "missing": [...]}, the relative paths each way. A file already there with the same size is kept."""
    done: dict[str, list[str]] = {"copied": [], "missing": []}
    for rel in FILES:
        src, dst = source / rel, dest / rel
        if not src.is_file():
            done["missing"].append(rel)
            continue
        if not (dst.is_file() and dst.stat().st_size == src.stat().st_size):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        done["copied"].append(rel)
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="../shared/data by default")
    p.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=".gpu_data in the checkout by default")
    args = p.parse_args(argv)
    done = copy_data(args.source, args.dest)
    size = sum((args.dest / rel).stat().st_size for rel in done["copied"])
    print(f"{len(done['copied'])} files ({size / 2**20:.1f} MiB) in {args.dest}")
    for rel in done["missing"]:
        print(f"missing: {args.source / rel} (the checks that read it are skipped)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
