"""GLUE test-server files (``nfeval glue --predict-test``): names, rows, header, label strings, and the
predictions of the best-LR point's reported model."""

from __future__ import annotations

import json
import os
import random

import pytest
from test_glue import FAST, write_cat_tasks

from nfeval import cli
from nfeval.base.sweep_points import point_dir
from nfeval.glue import submission

TEST_HEADERS = {
    "CoLA/test.tsv": ["index", "sentence"],
    "SST-2/test.tsv": ["index", "sentence"],
    "MRPC/test.tsv": ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
    "STS-B/test.tsv": ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                       "sentence2"],
    "QQP/test.tsv": ["id", "question1", "question2"],
    "MNLI/test_matched.tsv": ["index", "promptID", "pairID", "genre", "sentence1", "sentence2"],
    "MNLI/test_mismatched.tsv": ["index", "promptID", "pairID", "genre", "sentence1", "sentence2"],
    "diagnostic/diagnostic.tsv": ["index", "sentence1", "sentence2"],
    "QNLI/test.tsv": ["index", "question", "sentence"],
    "RTE/test.tsv": ["index", "sentence1", "sentence2"],
}  # fmt: skip
NLI3 = {"entailment", "neutral", "contradiction"}
NLI2 = {"entailment", "not_entailment"}
BINARY = {"0", "1"}
VOCAB = {"CoLA.tsv": BINARY, "SST-2.tsv": BINARY, "MRPC.tsv": BINARY, "QQP.tsv": BINARY, "MNLI-m.tsv": NLI3,
         "MNLI-mm.tsv": NLI3, "AX.tsv": NLI3, "QNLI.tsv": NLI2, "RTE.tsv": NLI2}  # fmt: skip


def write_test_files(root, n: int = 7) -> dict[str, list[str]]:
    """Writes every task's test file with the official header; returns {path: index column}."""
    indices = {}
    for rel, header in TEST_HEADERS.items():
        os.makedirs(root / os.path.dirname(rel), exist_ok=True)
        ids = [str(100 + 3 * i) for i in range(n + len(rel) % 3)]  # row counts differ between files
        rows = ["\t".join([i] + [f"text {i} {c}" for c in header[1:]]) for i in ids]
        (root / rel).write_text("\t".join(header) + "\n" + "\n".join(rows) + "\n")
        indices[rel] = ids
    return indices


def fake_pred(rng: random.Random, spec):
    return rng.uniform(-1, 6) if spec.is_regression else rng.randrange(spec.num_labels)


def fake_sweep(out, root, tasks, lrs=(1e-5, 2e-5)) -> dict:
    """Writes the points a sweep leaves (result.json, test_predictions.json) and returns its summary;
    the better lr is the second, and its second seed is the better one."""
    rng = random.Random(0)
    summary = {"nfeval": {"model": {"fingerprint": "f" * 64}, "recipe": {}}, "tasks": {}}
    for task in tasks:
        spec, main = submission.glue_data.spec(task), submission.glue_metrics.MAIN_METRIC[task]
        tests = submission.glue_data.read_tests(task, str(root))
        for lr in lrs:
            for seed in range(2):
                d = point_dir(str(out), "glue", task, lr, seed)
                os.makedirs(d)
                score = lr * 1e4 + seed
                result = {"lr": lr, "seed": seed, "metrics": {main: score}, "key": {"checkpoint": "f" * 64}}
                (out / d / "result.json").write_text(json.dumps(result))
                splits = {
                    name: {"index": s.index, "preds": [fake_pred(rng, spec) for _ in s.index]}
                    for name, s in tests.items()
                }
                kept = {"epoch": 2, "data": {n: s.sha256 for n, s in tests.items()}, "splits": splits}
                (out / d / submission.TEST_PREDICTIONS).write_text(json.dumps(kept))
        summary["tasks"][task] = {"best_lr": lrs[-1]}
        summary["nfeval"]["recipe"][task] = {"seeds": 2}
    return summary


def test_every_task_file_has_official_name_rows_header_and_labels(tmp_path):
    root = tmp_path / "glue"
    indices = write_test_files(root)
    tasks = list(submission.glue_data.TEST_FILES)
    summary = fake_sweep(tmp_path, root, tasks)
    folder = submission.write_submission(str(tmp_path), summary, tasks, str(root))
    names = {f for f in os.listdir(folder) if f.endswith(".tsv")}
    assert names == {"CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv", "MNLI-mm.tsv",
                     "AX.tsv", "QNLI.tsv", "RTE.tsv"}  # fmt: skip
    manifest = json.loads(open(os.path.join(folder, "manifest.json")).read())
    for task, splits in submission.glue_data.TEST_FILES.items():
        for name, (rel, file_name) in splits.items():
            lines = open(os.path.join(folder, file_name)).read().splitlines()
            assert lines[0] == "index\tprediction", file_name
            rows = [line.split("\t") for line in lines[1:]]
            assert [r[0] for r in rows] == indices[rel], file_name
            labels = {r[1] for r in rows}
            if file_name == "STS-B.tsv":
                assert all(0.0 <= float(x) <= 5.0 for x in labels) and len(labels) > 2
            else:
                assert labels <= VOCAB[file_name] and len(labels) > 1, (file_name, labels)
            entry = manifest["files"][file_name]
            assert (entry["lr"], entry["seed"], entry["rows"]) == (2e-5, 1, len(rows))  # the best point
            kept = json.loads(
                open(
                    os.path.join(point_dir(str(tmp_path), "glue", task, 2e-5, 1), "test_predictions.json")
                ).read()
            )
            if file_name != "STS-B.tsv":
                spec = submission.glue_data.spec(task)
                assert [r[1] for r in rows] == [spec.labels[p] for p in kept["splits"][name]["preds"]]


def test_changed_test_file_is_refused(tmp_path):
    root = tmp_path / "glue"
    write_test_files(root)
    summary = fake_sweep(tmp_path, root, ["rte"])
    with open(root / "RTE" / "test.tsv", "a") as f:
        f.write("999\ta\tb\n")
    with pytest.raises(ValueError, match=r"test_predictions\.json: predictions are not for .*RTE/test\.tsv"):
        submission.write_submission(str(tmp_path), summary, ["rte"], str(root))


def test_cli_predict_test_uses_the_best_points_reported_model(tiny_mlm_ckpt, tmp_path):
    root = tmp_path / "glue"
    write_cat_tasks(root, n_train=160, n_dev=40)
    for task in ("SST-2", "STS-B"):  # the test files hold the dev texts: test predictions must equal dev's
        lines = (root / task / "dev.tsv").read_text().splitlines()
        header = lines[0].split("\t")
        rows = [line.split("\t")[:-1] for line in lines[1:]]  # drop the label column (last)
        if task == "SST-2":
            header, rows = ["index", "sentence"], [[str(i), r[0]] for i, r in enumerate(rows)]
        else:
            header = header[:-1]
        (root / task / "test.tsv").write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n")
    out = tmp_path / "results"
    argv = ["glue", "--ckpt", tiny_mlm_ckpt, "--glue-dir", str(root), "--out", str(out),
            "--tasks", "sst2,stsb", "--lrs", "1e-4,3e-3", "--epochs", str(FAST["epochs"] - 1),
            "--no-progress", "--predict-test"]  # fmt: skip
    assert cli.main(argv) == 0
    summary = json.loads((out / "glue.json").read_text())
    folder = out / "glue" / "submission"
    for task, file_name in (("sst2", "SST-2.tsv"), ("stsb", "STS-B.tsv")):
        best = point_dir(str(out), "glue", task, summary["tasks"][task]["best_lr"], 0)
        dev = json.loads(open(os.path.join(best, "predictions.json")).read())["splits"]["dev"]["preds"]
        rows = [line.split("\t") for line in (folder / file_name).read_text().splitlines()[1:]]
        assert len(rows) == len(dev)
        if task == "sst2":
            assert [r[1] for r in rows] == [str(p) for p in dev]
        else:
            assert [float(r[1]) for r in rows] == pytest.approx([min(5, max(0, p)) for p in dev], abs=6e-4)


def test_cli_predict_test_without_test_files_fails_before_training(tiny_mlm_ckpt, tmp_path, capsys):
    root = write_cat_tasks(tmp_path / "glue", n_train=20, n_dev=10)
    out = tmp_path / "results"
    argv = ["glue", "--ckpt", tiny_mlm_ckpt, "--glue-dir", root, "--out", str(out), "--tasks", "sst2",
            "--no-progress", "--predict-test"]  # fmt: skip
    assert cli.main(argv) == 2
    assert "SST-2/test.tsv: not found (--predict-test needs it)" in capsys.readouterr().err
    assert not out.exists()
