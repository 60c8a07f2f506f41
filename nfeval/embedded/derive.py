"""Rebuilds the shipped slices' data files and their ``SOURCE.md`` from the shared data folder (the
layout of ``../shared/data``, described by its README): ``python -m nfeval.embedded.derive SHARED_DATA``.

Zero-shot: ``ZEROSHOT_ROWS`` lines drawn by ``sorted(random.Random(SEED).sample(range(n), k))`` over the
n lines of the shared file, kept in file order and copied byte for byte. GLUE STS-B: the header and the
first rows (in file order) whose ``filename`` column is ``images`` (the PASCAL VOC image captions, whose
text is CC BY-SA like the scores), ``GLUE_ROWS`` of train and of dev, copied byte for byte.

The LICENSE files are committed as they are; this script does not write them.
"""

from __future__ import annotations

import os
import random
import sys

from ..base.jsonio import file_sha256
from . import ROOT, SLICES, SOURCE_FILE, ZEROSHOT_ROWS, Slice

SEED = 0
STSB_SOURCE = "images"  # the STS-B `filename` value the slice keeps

# Where the shared files came from (../shared/data/README.md), per slice folder.
ORIGINS = {
    "zeroshot/hellaswag": {
        "title": "HellaSwag (validation)",
        "shared": "zeroshot/hellaswag/validation.jsonl",
        "origin": "`klosax/hellaswag_text_data` @ `1105d370f8340eac3c63a91fd1fa58e8999f9505`, "
        "`hellaswag_val_full.txt.bz2`: a text export of `rowanz/hellaswag` `data/hellaswag_val.jsonl`, "
        "converted to the Hugging Face `Rowan/hellaswag` columns by the shared data folder (its README "
        "lists the differences: `ctx_b` empty, `ind` the row index, WikiHow markup already removed)",
        "licence": "MIT. Copyright (c) 2019 Rowan Zellers (`rowanz/hellaswag` LICENSE, copied in `LICENSE`)",
        "cite": "Zellers, Holtzman, Bisk, Farhadi and Choi, HellaSwag: Can a Machine Really Finish Your "
        "Sentence? ACL 2019",
    },
    "zeroshot/piqa": {
        "title": "PIQA (validation)",
        "shared": "zeroshot/piqa/validation.jsonl",
        "origin": "`ybisk/ybisk.github.io` @ `21edab439af693b961be2f069e8690a88d3b4e37`, "
        "`piqa/data/valid.jsonl` and `piqa/data/valid-labels.lst` (line i of each joined as one record "
        "with an integer `label`)",
        "licence": 'Academic Free License v3.0 ("AFL-3.0"), as `piqa/index.html` of that repository states; '
        "the work of Yonatan Bisk, Rowan Zellers, Ronan Le Bras, Jianfeng Gao and Yejin Choi. The licence "
        "text is in `LICENSE`",
        "cite": "Bisk, Zellers, Le Bras, Gao and Choi, PIQA: Reasoning about Physical Commonsense in Natural "
        "Language, AAAI 2020",
    },
    "zeroshot/winogrande": {
        "title": "WinoGrande 1.1 (dev, used as validation)",
        "shared": "zeroshot/winogrande/validation.jsonl",
        "origin": "`mosaicml/llm-foundry` @ `8c8dd48f72168c5d51e2f7b151595892a8fba43d`, "
        "`scripts/eval/local_data/language_understanding/winogrande.jsonl` (the WinoGrande 1.1 dev set), "
        "converted to the Hugging Face `allenai/winogrande` columns by the shared data folder (labels "
        "checked against the official `dev-labels.lst`: 1267/1267 agree)",
        "licence": "CC BY 2.0 (Creative Commons Attribution), as the WinoGrande 1.1 data README states "
        "(`allenai/winogrande`'s README: 'The dataset is licensed under CC-BY'); copyright the Allen "
        "Institute for AI and the WinoGrande authors. `LICENSE` names the licence and its URL",
        "cite": "Sakaguchi, Le Bras, Bhagavatula and Choi, WinoGrande: An Adversarial Winograd Schema "
        "Challenge at Scale, AAAI 2020",
    },
    "zeroshot/openbookqa": {
        "title": "OpenBookQA (main, test)",
        "shared": "zeroshot/openbookqa/test.jsonl",
        "origin": "`genggui001/opencompass` @ `5649a0f7e3d246ed58ffaef865f8b818cd8e0044`, "
        "`data/openbookqa/Main/test.tsv` (the official OpenBookQA-V1-Sep2018 TSV), converted to the Hugging "
        "Face `allenai/openbookqa` (main) columns by the shared data folder. The test split, as lm-eval's "
        "built-in task and the GPT-3 paper score",
        "licence": "Apache-2.0; copyright the Allen Institute for AI (the licence of `allenai/OpenBookQA`, "
        "whose LICENSE @ `b51971646e9371a61508d9953fc706645e194a71` is copied in `LICENSE`)",
        "cite": "Mihaylov, Clark, Khot and Sabharwal, Can a Suit of Armor Conduct Electricity? A New Dataset "
        "for Open Book Question Answering, EMNLP 2018",
    },
    "glue/STS-B": {
        "title": "GLUE STS-B (train and dev), image-caption pairs",
        "shared": "glue/STS-B/{train,dev}.tsv",
        "origin": "`korjak/sts-dev` @ `016124a06bbd2e7e02f37ffd4b754df219ee50cb`, `data/STS-B/` (the GLUE "
        "distribution's STS-B, with `LICENSE.txt`), copied unchanged into the shared data folder",
        "licence": "The similarity scores: CC BY-SA 4.0 (`LICENSE.txt`, the STS benchmark's notes). The text "
        "of the rows kept here is the `images` source only: captions of PASCAL VOC-2008 images (Rashtchian "
        "et al. 2010), 'released under a CreativeCommons Attribution-ShareAlike license' (`LICENSE.txt`). "
        "The slice as a whole is shared under CC BY-SA 4.0; `LICENSE` names it and holds its legal code",
        "cite": "Cer, Diab, Agirre, Lopez-Gazpio and Specia, SemEval-2017 Task 1: Semantic Textual "
        "Similarity, SemEval 2017 (and the STS wiki, http://ixa2.si.ehu.eus/stswiki)",
    },
}


def zeroshot_lines(
    lines: list[bytes], k: int = ZEROSHOT_ROWS, seed: int = SEED
) -> tuple[list[int], list[bytes]]:
    """Returns (the kept line indices, the kept lines): ``k`` drawn with ``seed``, in file order."""
    keep = sorted(random.Random(seed).sample(range(len(lines)), k))
    return keep, [lines[i] for i in keep]


def stsb_lines(lines: list[bytes], k: int) -> tuple[list[int], list[bytes]]:
    """Returns (the kept row indices, header + rows): the first ``k`` rows whose filename is images."""
    header = lines[0].decode("utf-8").rstrip("\n").split("\t")
    column = header.index("filename")
    keep = [i for i, line in enumerate(lines[1:]) if line.decode("utf-8").split("\t")[column] == STSB_SOURCE]
    keep = keep[:k]
    return keep, [lines[0]] + [lines[1 + i] for i in keep]


def _read_lines(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line + b"\n" for line in lines]


def derive(shared: str, root: str = ROOT) -> dict[str, dict[str, list[int]]]:
    """Writes every slice's data files and SOURCE.md under ``root`` from ``shared``; returns {folder:
    {file: kept indices}}."""
    kept: dict[str, dict[str, list[int]]] = {}
    for s in SLICES:
        folder = os.path.join(root, s.folder)
        os.makedirs(folder, exist_ok=True)
        kept[s.folder] = {}
        for name, rows in s.files.items():
            source = os.path.join(shared, s.folder, name)
            lines = _read_lines(source)
            if s.folder.startswith("glue/"):
                indices, out = stsb_lines(lines, rows)
                full = len(lines) - 1
            else:
                indices, out = zeroshot_lines(lines, rows)
                full = len(lines)
            if full != s.full_rows[name]:
                raise ValueError(f"{source}: {full} rows, expected {s.full_rows[name]}")
            with open(os.path.join(folder, name), "wb") as f:
                f.write(b"".join(out))
            kept[s.folder][name] = indices
        write_source(s, folder, kept[s.folder])
    return kept


def write_source(s: Slice, folder: str, kept: dict[str, list[int]]) -> None:
    """Writes the slice's SOURCE.md: origin, derivation, rows, sha256, licence, citation."""
    o = ORIGINS[s.folder]
    glue = s.folder.startswith("glue/")
    if glue:
        rule = (
            f"the header and the first {', '.join(f'{r} rows of {n}' for n, r in s.files.items())} (in file "
            f"order) whose `filename` column is `{STSB_SOURCE}`, each line copied byte for byte. The "
            f"`{STSB_SOURCE}` source is the only one of STS-B whose text licence (CC BY-SA) matches the "
            "scores'; the other sources (MSR paraphrase and video corpora, news headlines, DEFT, Stack "
            "Exchange forums) carry terms of their own. So the slice holds image-caption pairs only, an "
            "easier and narrower genre than the full task"
        )
    else:
        (name,) = s.files
        rule = (
            f"{s.files[name]} of the {s.full_rows[name]} lines of the shared `{o['shared']}`, drawn by "
            f"`sorted(random.Random({SEED}).sample(range({s.full_rows[name]}), {s.files[name]}))` (Python's "
            "`random`), kept in file order and copied byte for byte"
        )
    lines = [
        f"# {o['title']}: nfeval's embedded slice",
        "",
        f"- Origin: {o['origin']}.",
        f"- Shared file: `../shared/data/{o['shared']}` (its README gives the full derivation and sha256).",
        f"- Derivation: {rule}. `nfeval/embedded/derive.py` rebuilds it.",
        f"- Licence: {o['licence']}.",
        f"- Cite: {o['cite']}.",
        "",
        "| file | rows | of | sha256 |",
        "|---|---:|---:|---|",
    ]
    for name, rows in s.files.items():
        digest = file_sha256(os.path.join(folder, name))
        lines.append(f"| {name} | {rows} | {s.full_rows[name]} | {digest} |")
    lines += ["", f"Rows are {'TSV rows after the header' if glue else 'JSONL records'}.", ""]
    first = {name: idx[:8] for name, idx in kept.items()}
    lines += [
        "Kept rows (0-based, of the shared file"
        + (", counting rows after the header" if glue else "")
        + "), the first eight: "
        + "; ".join(f"{n}: {', '.join(map(str, i))}, …" for n, i in first.items())
        + ".",
        "",
    ]
    with open(os.path.join(folder, SOURCE_FILE), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m nfeval.embedded.derive SHARED_DATA_DIR", file=sys.stderr)
        return 2
    for folder, files in derive(argv[0]).items():
        print(folder, {n: len(i) for n, i in files.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
