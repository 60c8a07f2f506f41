"""GLUE test-server submissions: ``nfeval glue ... --predict-test``.

How the test predictions come from the best-LR model without keeping any weights: whenever a sweep
point's epoch becomes the one it reports (the same moment its dev ``predictions.json`` is written),
the point also predicts the task's test split(s) and writes ``test_predictions.json`` beside it. The
cost is one inference pass over the test set per such epoch (at most ``epochs`` passes per point, each
about as costly as the dev evaluation the point already runs; no extra training, no weights on disk).
Test files are read whenever the GLUE folder has them (``<Task>/test.tsv``; MNLI's
``test_matched.tsv``/``test_mismatched.tsv``; ``diagnostic/diagnostic.tsv``, predicted by the MNLI
model as AX); they are not part of a point's resume key.

After the sweep, ``write_submission`` takes each task's best learning rate from the summary, the seed
with the best dev score at that rate, and writes the server's files into ``<out>/glue/submission/``:
``CoLA.tsv``, ``SST-2.tsv``, ``MRPC.tsv``, ``STS-B.tsv``, ``QQP.tsv``, ``MNLI-m.tsv``, ``MNLI-mm.tsv``,
``AX.tsv``, ``QNLI.tsv``, ``RTE.tsv``, each ``index<TAB>prediction`` with the official label strings
(0/1 for CoLA, SST-2, MRPC, QQP; entailment/neutral/contradiction for MNLI and AX;
entailment/not_entailment for QNLI and RTE; a score in [0, 5] for STS-B), plus ``manifest.json``
(which point made each file, its dev score, the test files' sha256, provenance). WNLI is not a task
nfeval fine-tunes: its file is not written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..base.artifacts import atomic_write_json, atomic_write_text, provenance
from ..base.errors import ConfigError, DataError, MissingDataError
from ..base.jsonio import load_json
from ..base.sweep_points import point_dir
from . import data as glue_data
from . import metrics as glue_metrics
from .points import RESULT, SWEEP
from .predictions import TEST_PREDICTIONS

SUBMISSION_DIR = os.path.join("glue", "submission")


def check_test_files(tasks: list[str], glue_dir: str | None) -> None:
    """Raises before any training when ``--predict-test`` cannot be served: no GLUE folder, or a task's
    required test file missing (AX is optional)."""
    if glue_dir is None:
        raise ConfigError("--predict-test: needs --glue-dir (a GLUE folder with the test.tsv files)")
    for task in tasks:
        for name, (rel, _) in glue_data.TEST_FILES[task].items():
            if name not in glue_data.OPTIONAL and not os.path.isfile(os.path.join(glue_dir, rel)):
                raise MissingDataError(f"{os.path.join(glue_dir, rel)}: not found (--predict-test needs it)")


def best_point(out_dir: str, summary: Mapping, task: str) -> Mapping:
    """Returns the finished point (result.json) at the task's best lr with the best dev main metric (the
    lowest seed on ties), checked to be of the summary's checkpoint."""
    best_lr, main = summary["tasks"][task]["best_lr"], glue_metrics.MAIN_METRIC[task]
    if best_lr is None:
        raise DataError(
            f"{task}: every learning rate diverged, so no model predicts its test set (lower --lrs)"
        )
    fingerprint = summary["nfeval"]["model"]["fingerprint"]
    points = []
    for seed in range(summary["nfeval"]["recipe"][task]["seeds"]):
        path = os.path.join(point_dir(out_dir, SWEEP, task, best_lr, seed), RESULT)
        if os.path.isfile(path):
            point = load_json(path)
            if point.get("key", {}).get("checkpoint") != fingerprint:
                raise DataError(f"{path}: a point of another checkpoint than {out_dir}/glue.json's")
            points.append(point)
    if not points:
        raise MissingDataError(f"{task}: no finished point at the best lr {best_lr} under {out_dir}")
    return max(points, key=lambda p: p["metrics"][main])


def label_text(spec: glue_data.TaskSpec, pred) -> str:
    """Returns the server's label string for a prediction (STS-B: the score clipped to [0, 5])."""
    if spec.is_regression:
        return f"{min(5.0, max(0.0, float(pred))):.3f}"
    return spec.labels[int(pred)]


def read_test_predictions(directory: str, tests: Mapping[str, glue_data.UnlabelledSplit]) -> dict[str, Any]:
    """Returns a point's test predictions, checked to be for the current test files."""
    path = os.path.join(directory, TEST_PREDICTIONS)
    if not os.path.isfile(path):
        raise MissingDataError(
            f"{path}: no test predictions (the point finished before the test files were there); "
            "delete its result.json and rerun with --predict-test to redo it"
        )
    kept = load_json(path, hint="delete the point's result.json and rerun it")
    for name, split in tests.items():
        if kept.get("data", {}).get(name) != split.sha256:
            raise DataError(
                f"{path}: predictions are not for {split.source} (its sha256 changed); rerun the point"
            )
    return kept


def write_submission(out_dir: str, summary: Mapping, tasks: list[str], glue_dir: str) -> str:
    """Writes the server's TSVs for ``tasks`` into ``<out_dir>/glue/submission`` and updates its
    manifest.json (files of other tasks, from earlier runs of the same checkpoint, are kept); returns
    the folder."""
    folder = os.path.join(out_dir, SUBMISSION_DIR)
    manifest_path = os.path.join(folder, "manifest.json")
    model = summary["nfeval"]["model"]
    files: dict[str, Any] = {}
    if os.path.isfile(manifest_path):
        earlier = load_json(manifest_path, hint="delete it to rebuild the manifest")
        if earlier.get("model", {}).get("fingerprint") == model["fingerprint"]:
            files = earlier["files"]
    for task in tasks:
        spec, tests = glue_data.spec(task), glue_data.read_tests(task, glue_dir)
        point = best_point(out_dir, summary, task)
        kept = read_test_predictions(point_dir(out_dir, SWEEP, task, point["lr"], point["seed"]), tests)
        for name, split in tests.items():
            preds = kept["splits"][name]
            rows = [f"{i}\t{label_text(spec, p)}" for i, p in zip(preds["index"], preds["preds"])]
            file_name = glue_data.TEST_FILES[task][name][1]
            atomic_write_text(os.path.join(folder, file_name), "index\tprediction\n" + "\n".join(rows) + "\n")
            files[file_name] = {"task": task, "split": name, "rows": len(rows), "lr": point["lr"],
                                "seed": point["seed"], "epoch": kept["epoch"], "dev": point["metrics"],
                                "test_file": split.source, "test_sha256": split.sha256}  # fmt: skip
    atomic_write_json(manifest_path, {"files": files, "model": model, "nfeval": {"provenance": provenance()}})
    return folder
