"""Paired comparisons: compare-scores and leaderboard --baseline on synthetic and real (tiny) results."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from test_glue import write_cat_tasks
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval.cli import main
from nfeval.glue import sweep as glue
from nfeval.glue.config import GlueConfig
from nfeval.model_adapters.config import ScoringConfig
from nfeval.report import paired
from nfeval.zeroshot import evaluate as zeroshot
from nfeval.zeroshot import items as zeroshot_items
from nfeval.zeroshot.config import ZeroShotConfig


def write_zeroshot(root, name: str, outcomes: list[float], doc_hashes: list[str] | None = None) -> str:
    """Writes a zero-shot results file for task piqa_local and its per-item sidecar; returns its path."""
    path = str(root / f"{name}.json")
    model = {"fingerprint": f"{name}-fingerprint", "path": f"runs/{name}", "parameters": 1000}
    results = {
        "results": {"piqa_local": {"acc,none": float(np.mean(outcomes))}},
        "nfeval": {"model": model, "tasks": {"piqa_local": "piqa"}, "limit": None},
    }
    (root / f"{name}.json").write_text(json.dumps(results))
    record = {
        "doc_id": list(range(len(outcomes))),
        "gold": [0] * len(outcomes),
        "doc_hash": doc_hashes or [f"h{i}" for i in range(len(outcomes))],
        "metrics": {"acc,none": {"value": [float(v) for v in outcomes], "chosen": None}},
    }
    zeroshot_items.write_sidecar(path, {"piqa_local": record}, model)
    return path


@pytest.fixture()
def synthetic(tmp_path):
    rng = np.random.default_rng(0)
    base = (rng.random(400) < 0.5).astype(float)
    strong = np.where(rng.random(400) < 0.6, 1.0, base)  # about +30 points on the same items
    null = base.copy()
    null[:4] = 1 - null[:4]  # four items swap: nothing to see
    return {
        n: write_zeroshot(tmp_path, n, v) for n, v in (("base", base), ("strong", strong), ("null", null))
    }


def test_compare_scores_flags_a_real_difference_with_mcnemar(synthetic, capsys):
    assert (
        main(["compare-scores", synthetic["strong"], synthetic["base"], "--resamples", "2000", "--json"]) == 0
    )
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    a = np.array(
        json.loads(open(synthetic["strong"].replace(".json", ".items.json")).read())["tasks"]["piqa_local"][
            "metrics"
        ]["acc,none"]["value"]
    )
    b = np.array(
        json.loads(open(synthetic["base"].replace(".json", ".items.json")).read())["tasks"]["piqa_local"][
            "metrics"
        ]["acc,none"]["value"]
    )
    a_only, b_only = int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))
    assert row["mcnemar_p"] == pytest.approx(stats.binomtest(a_only, a_only + b_only).pvalue)
    assert row["difference"] == pytest.approx(a.mean() - b.mean()) and row["significant"]
    assert row["low"] > 0.2 and row["n"] == 400
    assert main(["compare-scores", synthetic["null"], synthetic["base"], "--resamples", "2000"]) == 0
    out = capsys.readouterr().out
    assert "piqa" in out and "A − B" in out and not any(line.endswith("*") for line in out.splitlines())


def test_unpaired_results_are_refused(tmp_path, capsys):
    a = write_zeroshot(tmp_path, "a", [1, 0, 1, 1, 0, 1])
    fewer = write_zeroshot(tmp_path, "fewer", [1, 0, 1])
    other = write_zeroshot(tmp_path, "other", [1, 0, 1, 1, 0, 1], [f"x{i}" for i in range(6)])
    assert main(["compare-scores", a, fewer]) == 2
    assert "6 documents" in capsys.readouterr().err
    with pytest.raises(paired.UnpairedError, match="document 0 differs"):
        paired.compare_files(a, other, n_resamples=200)


def test_leaderboard_marks_a_significant_difference_only(synthetic, tmp_path):
    paths = [synthetic[n] for n in ("base", "strong", "null")]
    md, csv_path = tmp_path / "board.md", tmp_path / "board.csv"
    board_argv = ["leaderboard", *paths, "--metric", "acc", "--baseline", "base"]
    assert main([*board_argv, "--resamples", "2000", "--output", str(md)]) == 0
    lines = md.read_text().splitlines()
    table, section = (
        lines[: lines.index("## Paired differences vs base")],
        lines[lines.index("## Paired differences vs base") :],
    )
    row = {line.split("|")[1].strip(): line.split("|") for line in table if line.startswith("| ")}
    assert row["strong"][8].strip().endswith("†")  # the PIQA column
    assert not any("†" in cell for name in ("base", "null") for cell in row[name])
    paired_rows = {line.split("|")[1].strip(): line for line in section if line.startswith("| ")}
    assert "†" in paired_rows["strong"] and "†" not in paired_rows["null"] and "base" not in paired_rows
    assert main([*board_argv, "--resamples", "500", "--output", str(csv_path)]) == 0
    header, *rows = csv_path.read_text().splitlines()
    assert "piqa/acc/diff" in header and "piqa/acc/mcnemar_p" in header
    with pytest.raises(ValueError, match="--baseline nobody"):
        from nfeval.report import leaderboard

        paired.add_to_board(leaderboard.build(paths), "nobody")


def test_real_zeroshot_runs_pair_and_limits_refuse(tiny_clm_ckpt, tmp_path, monkeypatch, capsys):
    from conftest import _save_tiny

    from nfeval.engine.checkpoints import checkpoint

    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "data"
    write_jsonl(data / "piqa" / "validation.jsonl", DOCS["piqa"] * 3)
    other = _save_tiny(tmp_path / "other", checkpoint.load(tiny_clm_ckpt).tokenizer, "prenorm", "clm", seed=1)
    outs = {}
    for name, ckpt, limit in (("a", tiny_clm_ckpt, None), ("b", other, None), ("c", other, 3)):
        outs[name] = str(tmp_path / f"{name}.json")
        zeroshot.evaluate(
            ckpt,
            ZeroShotConfig(
                tasks=["piqa"],
                data_dir=str(data),
                output=outs[name],
                limit=limit,
                scoring=ScoringConfig(device="cpu"),
            ),
        )
    rows = paired.compare_files(outs["a"], outs["b"], n_resamples=500)
    res = {n: json.loads(open(outs[n]).read())["results"]["piqa_local"] for n in "ab"}
    assert {r["metric"] for r in rows} == {"acc", "acc_norm", "acc_per_token"}
    for r in rows:
        assert r["difference"] == pytest.approx(
            res["a"][f"{r['metric']},none"] - res["b"][f"{r['metric']},none"]
        )
    with pytest.raises(paired.UnpairedError, match="6 documents.*3"):
        paired.compare_files(outs["a"], outs["c"])


def test_glue_points_keep_predictions_and_pair(tiny_mlm_ckpt, tiny_clm_ckpt, tmp_path):
    glue_dir = write_cat_tasks(tmp_path / "glue", n_train=64, n_dev=48)
    recipe = glue.Recipe(epochs=2, batch_size=16)
    outs = {}
    for name, ckpt in (("mlm", tiny_mlm_ckpt), ("clm", tiny_clm_ckpt)):
        glue.sweep(
            ckpt,
            GlueConfig(
                tasks=["sst2", "stsb"],
                lrs=[1e-3],
                out_dir=str(tmp_path / name),
                glue_dir=glue_dir,
                recipe=recipe,
                progress=False,
            ),
        )
        outs[name] = str(tmp_path / name / "glue.json")
        point = tmp_path / name / "glue" / "sst2" / "lr=0.001" / "seed=0"
        result = json.loads((point / "result.json").read_text())
        preds = json.loads((point / "predictions.json").read_text())
        assert preds["epoch"] == result["epoch"] and len(preds["splits"]["dev"]["preds"]) == 48
        dev = preds["splits"]["dev"]
        assert np.mean(np.array(dev["preds"]) == np.array(dev["labels"])) == result["metrics"]["accuracy"]
    rows = {r["metric"]: r for r in paired.compare_files(outs["mlm"], outs["clm"], n_resamples=500)}
    assert set(rows) == {"accuracy", "pearson", "spearman"}
    assert rows["accuracy"]["mcnemar_p"] is not None and rows["pearson"]["mcnemar_p"] is None
    summaries = {n: json.loads(open(p).read())["tasks"] for n, p in outs.items()}
    for metric, task in (("accuracy", "sst2"), ("pearson", "stsb")):
        diff = summaries["mlm"][task]["best"][metric] - summaries["clm"][task]["best"][metric]
        assert rows[metric]["difference"] == pytest.approx(diff)
        assert rows[metric]["low"] <= rows[metric]["difference"] <= rows[metric]["high"]


def write_glue(root, preds_by_seed: list[dict[str, list[int]]], labels: dict[str, list[int]]) -> str:
    """Writes an MNLI GLUE summary, one point per seed at lr 1e-3 with its predictions; returns its path."""
    metrics = []
    for seed, preds in enumerate(preds_by_seed):
        point = root / "glue" / "mnli" / "lr=0.001" / f"seed={seed}"
        point.mkdir(parents=True)
        m = {
            f"accuracy_{s}": float(np.mean(np.array(preds[f"dev_{n}"]) == np.array(labels[f"dev_{n}"])))
            for s, n in (("m", "matched"), ("mm", "mismatched"))
        }
        metrics.append(m)
        (point / "result.json").write_text(json.dumps({"epoch": 2, "metrics": m}))
        splits = {k: {"labels": labels[k], "preds": preds[k]} for k in labels}
        (point / "predictions.json").write_text(
            json.dumps({"epoch": 2, "data": {"dev": "x"}, "splits": splits})
        )
    best = {k: float(np.mean([m[k] for m in metrics])) for k in metrics[0]}
    summary = {
        "tasks": {
            "mnli": {
                "metric": "accuracy_m",
                "best_lr": 1e-3,
                "best": best,
                "per_lr": {"0.001": {**best, "seeds": len(metrics)}},
            }
        },
        "nfeval": {"model": {"fingerprint": root.name, "path": str(root)}},
    }
    (root / "glue.json").write_text(json.dumps(summary))
    return str(root / "glue.json")


def test_glue_seeds_pair_as_the_mean_over_seeds(tmp_path):
    rng = np.random.default_rng(5)
    labels = {k: rng.integers(0, 3, 200).tolist() for k in ("dev_matched", "dev_mismatched")}

    def noisy(p_right):
        return {k: [y if rng.random() < p_right else (y + 1) % 3 for y in v] for k, v in labels.items()}

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a = write_glue(tmp_path / "a", [noisy(0.9), noisy(0.9)], labels)
    b = write_glue(tmp_path / "b", [noisy(0.6)], labels)
    rows = {r["metric"]: r for r in paired.compare_files(a, b, n_resamples=500)}
    assert set(rows) == {"accuracy_m", "accuracy_mm"}
    best_a = json.loads(open(a).read())["tasks"]["mnli"]["best"]
    best_b = json.loads(open(b).read())["tasks"]["mnli"]["best"]
    for metric, row in rows.items():
        assert row["difference"] == pytest.approx(best_a[metric] - best_b[metric])
        assert row["significant"] and row["mcnemar_p"] is None  # several seeds: no single pairing of outcomes
    other = dict(labels, dev_matched=labels["dev_matched"][::-1])
    (tmp_path / "c").mkdir()
    c = write_glue(tmp_path / "c", [noisy(0.6)], other)
    with pytest.raises(paired.UnpairedError, match="different dev labels"):
        paired.compare_files(a, c)
