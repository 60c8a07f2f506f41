"""nfeval leaderboard on fixed results files made by the test, plus the GPT-3 reference file."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from matplotlib.image import imread

from nfeval.cli import main
from nfeval.report.leaderboard import build
from nfeval.report.leaderboard_read import load_reference, nearest_by_size
from nfeval.report.leaderboard_render import render_csv, render_markdown

REPO = Path(__file__).resolve().parents[2]

FULL = {
    "hellaswag": {"acc": 0.30, "acc_norm": 0.31, "acc_per_token": 0.3125},
    "piqa": {"acc": 0.60, "acc_norm": 0.61, "acc_per_token": 0.625},
    "winogrande": {"acc": 0.51},
    "storycloze_2016": {"acc": 0.60, "acc_per_token": 0.62},
    "openbookqa": {"acc": 0.30, "acc_norm": 0.32, "acc_uncond": 0.35},
}
NO_OBQA = {task: metrics for task, metrics in FULL.items() if task != "openbookqa"}


def zeroshot_file(path, fingerprint, run, parameters, scores, compute=None, **nfeval_extra):
    """Writes a zero-shot results file in lm-eval's schema plus the nfeval block; returns its path."""
    results = {
        task: {f"{m},none": v for m, v in metrics.items()} | {"alias": task}
        for task, metrics in scores.items()
    }
    model = {
        "path": f"/runs/{run}",
        "fingerprint": fingerprint,
        "architecture": "normformer",
        "objective": "clm",
        "parameters": parameters,
        "n_layer": 12,
        "d_model": 768,
        "compute": compute,
    }
    data = {
        "results": results,
        "configs": {},
        "versions": {},
        "n-samples": {},
        "higher_is_better": {},
        "nfeval": {
            "provenance": {},
            "model": model,
            "batch_size": 8,
            "dtype": "float32",
            "data_dir": None,
            "limit": None,
            **nfeval_extra,
        },
    }
    path.write_text(json.dumps(data))
    return str(path)


def glue_file(path, fingerprint, run, tasks):
    model = {
        "path": f"/runs/{run}",
        "fingerprint": fingerprint,
        "architecture": "prenorm",
        "parameters": 355_000_000,
        "compute": {"tokens": 1e9, "flops": 3e18, "device_hours": 12.0},
    }
    data = {"nfeval": {"provenance": {}, "model": model, "recipe": {}}, "tasks": tasks, "glue_average": 0.5}
    path.write_text(json.dumps(data))
    return str(path)


COMPUTE_A = {"tokens": 3e8, "flops": 2.2e17, "device_hours": 1.5, "steps": 1000}
COMPUTE_B = {"tokens": 3.1e8, "flops": 2.1e17, "device_hours": 1.45}
GLUE_RESULTS = {
    "cola": {
        "metric": "mcc",
        "best_lr": 1e-5,
        "best": {"mcc": 0.5},
        "per_lr": {"1e-05": {"mcc": 0.5, "seeds": 1}},
    },
    "mrpc": {"metric": "f1", "best": {"accuracy": 0.8, "f1": 0.85}},
}


@pytest.fixture
def files(tmp_path):
    a = zeroshot_file(tmp_path / "a.json", "a" * 64, "nf-125M", 124_000_000, FULL, COMPUTE_A)
    b = zeroshot_file(tmp_path / "b.json", "b" * 64, "pre-125M", 125_000_000, NO_OBQA, COMPUTE_B)
    g = glue_file(tmp_path / "g.json", "c" * 64, "mlm-355M", GLUE_RESULTS)
    return a, b, g


def test_gpt3_reference_file_matches_the_issue_table():
    issue_table = """
    GPT-3 Small 125M | 33.7 | 64.6 | 52.0 | 63.3 | 35.6
    GPT-3 Medium 350M | 43.6 | 70.2 | 52.1 | 68.5 | 43.2
    GPT-3 Large 760M | 51.0 | 72.9 | 57.4 | 72.4 | 45.2
    GPT-3 XL 1.3B | 54.7 | 75.1 | 58.7 | 73.4 | 46.8
    GPT-3 2.7B | 62.8 | 75.6 | 62.3 | 77.2 | 53.0
    GPT-3 6.7B | 67.4 | 78.0 | 64.5 | 77.7 | 50.4
    GPT-3 13B | 70.9 | 78.5 | 67.9 | 79.5 | 55.6
    GPT-3 175B | 78.9 | 81.0 | 70.2 | 83.2 | 57.6
    """
    raw = json.loads((REPO / "leaderboards" / "reference" / "gpt3.json").read_text())
    tasks = ["hellaswag", "piqa", "winogrande", "storycloze_2016", "openbookqa"]
    expected = [line.strip().split(" | ") for line in issue_table.strip().splitlines()]
    assert [m["name"] for m in raw["models"]] == [row[0] for row in expected]
    for model, row in zip(raw["models"], expected):
        assert [model["scores"][t] for t in tasks] == [float(v) for v in row[1:]], model["name"]
    assert {t: raw["tasks"][t]["metric"] for t in tasks} == {
        "hellaswag": "acc_per_token",
        "piqa": "acc_per_token",
        "winogrande": "acc",
        "storycloze_2016": "acc_per_token",
        "openbookqa": "acc_uncond",
    }
    assert "Brown et al. 2020" in raw["citation"] and "H.1" in raw["citation"]
    assert [m["parameters"] for m in raw["models"]][:2] == [125_000_000, 350_000_000]
    ref = load_reference("gpt3")
    assert ref["models"][0]["scores"]["hellaswag"] == pytest.approx(0.337)


def test_markdown_for_fixed_results_equals_expected_text(files):
    a, b, g = files
    board = build([a, b, g], reference="gpt3")
    zeroshot_header = (
        "| Model | Params | Arch | Tokens | FLOPs | Device-h | HellaSwag (acc_per_token) | PIQA"
        " (acc_per_token) | WinoGrande (acc) | StoryCloze (acc_per_token) | OpenBookQA (acc_uncond) |"
        " Avg |"
    )
    zeroshot_note = (
        "- Accuracy in percent; each column names its lm-eval metric (acc_per_token: GPT-3's per-token"
        " length normalisation; acc_uncond: its unconditional normalisation; acc: unnormalised, which"
        " for WinoGrande is GPT-3's partial scoring). –: not evaluated. Avg: mean of HellaSwag, PIQA,"
        " WinoGrande, StoryCloze, OpenBookQA; – unless all five are present.\n"
        "- ±: half-width of the 95% interval, 1.96 standard errors (lm-eval's, else binomial √(p(1−p)/n)"
        " over the n items); over 50 items a 50% accuracy is ±14 points.\n"
        "- chance: one over the answer choices per item (HellaSwag, OpenBookQA and the corpus cloze task 4:"
        " 25%; PIQA, WinoGrande and StoryCloze 2: 50%); a score inside its interval of chance is no"
        " evidence of learning."
    )
    gpt3_note = (
        "- GPT-3 rows: Brown et al. 2020, Language Models are Few-Shot Learners, Table H.1 (zero-shot),"
        " the sizes nearest ours. Each reference number sits under the column whose metric follows the"
        " same convention: HellaSwag dev (per-token length normalisation: acc_per_token); PIQA dev"
        " (per-token length normalisation: acc_per_token); WinoGrande dev (partial scoring: acc);"
        " StoryCloze test (per-token length normalisation: acc_per_token); OpenBookQA test"
        " (unconditional normalisation: acc_uncond)."
    )
    glue_note = (
        "- GLUE scores ×100 at each task's best learning rate, as in the GLUE summary; each column names"
        " its metric. –: not evaluated. Avg: mean over the tasks shown of the GLUE task score (the mean"
        " of a task's metrics: MRPC/QQP accuracy and F1, STS-B Pearson and Spearman, MNLI matched and"
        " mismatched); – unless every task shown is present.\n"
        "- ±: accuracy columns, half-width of the binomial 95% interval over the dev rows (F1, MCC and"
        " correlations have none here; --baseline gives paired intervals of differences).\n"
        "- majority class: the most frequent training label (STS-B: the mean score) predicted for every dev"
        " row, scored with each column's metric; MCC and correlations of a constant are 0."
    )
    expected = f"""# Leaderboard

## Zero-shot

{zeroshot_header}
|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| nf-125M | 124M | normformer | 300M | 2.2e17 | 1.5 | 31.2 | 62.5 | 51.0 | 62.0 | 35.0 | 48.4 |
| pre-125M | 125M | normformer | 310M | 2.1e17 | 1.45 | 31.2 | 62.5 | 51.0 | 62.0 | – | – |
| *reference: GPT-3* |  |  |  |  |  |  |  |  |  |  |  |
| GPT-3 Small 125M | 125M | GPT-3 | 300B | – | – | 33.7 | 64.6 | 52.0 | 63.3 | 35.6 | 49.8 |
| *reference: yardstick* |  |  |  |  |  |  |  |  |  |  |  |
| chance | – | – | – | – | – | 25.0 | 50.0 | 50.0 | 50.0 | 25.0 | 40.0 |

{zeroshot_note}
{gpt3_note}

## GLUE

| Model | Params | Arch | Tokens | FLOPs | Device-h | CoLA (mcc) | MRPC (f1) | Avg |
|---|---:|---|---:|---:|---:|---:|---:|---:|
| mlm-355M | 355M | prenorm | 1B | 3e18 | 12 | 50.0 | 85.0 | 66.2 |

{glue_note}

## Sources

- nf-125M: fingerprint `aaaaaaaaaaaaaaaa`; {a}
- pre-125M: fingerprint `bbbbbbbbbbbbbbbb`; {b}
- mlm-355M: fingerprint `cccccccccccccccc`; {g}
"""
    assert render_markdown(board) == expected


def test_missing_tasks_are_dashes_never_zero(files):
    a, b, _ = files
    board = build([a, b])
    row = board["zeroshot"]["rows"][1]
    assert row["scores"]["openbookqa"] is None and row["average"] is None
    line = next(x for x in render_markdown(board).splitlines() if x.startswith("| pre-125M"))
    assert line.endswith("| – | – |") and " 0.0 " not in line
    rows = list(csv.DictReader(io.StringIO(render_csv(board))))
    assert rows[1]["openbookqa/acc_uncond"] == "" and rows[1]["zeroshot_average"] == ""
    assert float(rows[0]["openbookqa/acc_uncond"]) == 0.35


def test_zeroshot_and_glue_rows_join_by_fingerprint(tmp_path, files):
    a, _, _ = files
    g = glue_file(tmp_path / "g2.json", "a" * 64, "nf-125M", GLUE_RESULTS)
    board = build([a, g])
    assert (
        [r["name"] for r in board["zeroshot"]["rows"] if r["reference"] is None]
        == [r["name"] for r in board["glue"]["rows"]]
        == ["nf-125M"]
    )
    row, chance = csv.DictReader(io.StringIO(render_csv(board)))
    assert float(row["piqa/acc_per_token"]) == 0.625 and float(row["cola/mcc"]) == 0.5
    assert chance["model"] == "chance" and chance["piqa/acc_per_token"] == "0.5"
    assert float(row["glue_average"]) == pytest.approx((0.5 + (0.8 + 0.85) / 2) / 2)


def test_reference_cell_follows_the_metric_convention(files):
    a, _, _ = files
    board = build([a], reference="gpt3", metric=["hellaswag=acc_norm"])
    columns = {c["task"]: c["metric"] for c in board["zeroshot"]["columns"]}
    assert columns["hellaswag"] == "acc_norm" and columns["piqa"] == "acc_per_token"
    ours, ref, _chance = board["zeroshot"]["rows"]
    assert ours["scores"]["hellaswag"]["value"] == 0.31
    assert ref["scores"]["hellaswag"] is None and ref["scores"]["piqa"]["value"] == pytest.approx(0.646)
    assert ref["average"] is None
    assert "GPT-3 cells are – for HellaSwag" in render_markdown(board)


def test_reference_rows_nearest_in_size():
    models = load_reference("gpt3")["models"]
    assert [m["name"] for m in nearest_by_size(models, [100_000_000, 1_500_000_000])] == [
        "GPT-3 Small 125M",
        "GPT-3 XL 1.3B",
    ]
    assert len(nearest_by_size(models, [])) == 8


def test_custom_reference_file_is_validated(tmp_path, files):
    a, _, _ = files
    raw = json.loads((REPO / "leaderboards" / "reference" / "gpt3.json").read_text())
    raw["models"][1]["scores"]["piqa"] = 170.2
    bad = tmp_path / "ref.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(
        ValueError, match=r"ref.json: key 'models.1.scores.piqa' is 170.2; expected a number in \[0, 100\]"
    ):
        build([a], reference=str(bad))


def test_grouping_by_flops_separates_compute_matched_groups(tmp_path, files):
    a, b, _ = files
    c = zeroshot_file(
        tmp_path / "c.json",
        "d" * 64,
        "big",
        350_000_000,
        FULL,
        {"tokens": 1e9, "flops": 9e17, "device_hours": 6.0},
    )
    board = build([c, a, b], group_by="flops")
    rows = [r for r in board["zeroshot"]["rows"] if r["reference"] is None]
    assert [(r["name"], r["group"]) for r in rows] == [
        ("pre-125M", "≈ 2.1e17–2.2e17 FLOPs"),
        ("nf-125M", "≈ 2.1e17–2.2e17 FLOPs"),
        ("big", "≈ 9e17 FLOPs"),
    ]
    text = render_markdown(board)
    assert (
        text.index("**≈ 2.1e17–2.2e17 FLOPs**")
        < text.index("| nf-125M")
        < text.index("**≈ 9e17 FLOPs**")
        < text.index("| big")
    )


def test_subset_scores_are_marked(tmp_path):
    path = zeroshot_file(tmp_path / "s.json", "e" * 64, "tiny", 1_000_000, FULL, None, limit=10)
    text = render_markdown(build([path]))
    assert "| 31.2* |" in text and "*: evaluated on a subset" in text


def test_embedded_slices_are_subsets_and_storycloze_says_user_supplied(tmp_path):
    """Scores on the slices shipped in the package are marked as a subset; a model row without StoryCloze
    says its data is user-supplied, and an average over the other four fills the row (issue 40)."""
    no_story = {t: m for t, m in FULL.items() if t != "storycloze_2016"}
    shipped = {"hellaswag": {"source": "local", "embedded": {"slice": "x", "rows": 200, "of": 10042}}}
    path = zeroshot_file(tmp_path / "e.json", "e" * 64, "tiny", 1_000_000, no_story, task_data=shipped)
    board = build([path], reference="gpt3")
    text = render_markdown(board)
    row = next(line for line in text.splitlines() if line.startswith("| tiny |"))
    assert "| 31.2* |" in row and "| 62.5 |" in row  # only the embedded task is marked
    assert "| user-supplied |" in row and "Avg w/o StoryCloze" in text
    assert row.rstrip(" |").endswith(f"{100 * (0.3125 + 0.625 + 0.51 + 0.35) / 4:.1f}")
    assert "its licence forbids redistribution" in text
    chance = next(r for r in board["zeroshot"]["rows"] if r["name"] == "chance")
    assert chance["partial_average"] == pytest.approx((0.25 + 0.5 + 0.5 + 0.25) / 4)
    gpt3 = [r for r in board["zeroshot"]["rows"] if r["reference"] == "GPT-3"]
    assert gpt3 and all(r["partial_average"] is not None for r in gpt3)
    # the CSV carries the same column
    rows = list(csv.DictReader(io.StringIO(render_csv(board))))
    tiny = next(r for r in rows if r["model"] == "tiny")
    assert float(tiny["zeroshot_average_without_storycloze"]) == pytest.approx(
        (0.3125 + 0.625 + 0.51 + 0.35) / 4
    )
    # a full row: no extra column
    full = zeroshot_file(tmp_path / "f.json", "f" * 64, "full", 1_000_000, FULL)
    assert "Avg w/o StoryCloze" not in render_markdown(build([full]))
    assert "zeroshot_average_without_storycloze" not in render_csv(build([full]))


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda d: d["nfeval"].pop("model"), "'nfeval.model' is missing"),
        (
            lambda d: d["results"]["piqa"].update({"acc_per_token,none": "0.6"}),
            "'results.piqa.acc_per_token,none' is '0.6'",
        ),
        (
            lambda d: d["results"]["piqa"].update({"acc_per_token,none": 62.5}),
            "'results.piqa.acc_per_token,none' is 62.5",
        ),
        (
            lambda d: d["nfeval"]["model"].update({"parameters": "125M"}),
            "'nfeval.model.parameters' is '125M'",
        ),
        (
            lambda d: d["nfeval"]["model"]["compute"].update({"flops": "lots"}),
            "'nfeval.model.compute.flops' is 'lots'",
        ),
        (
            lambda d: d.pop("results"),
            "key 'results' (zero-shot results) or 'tasks' (GLUE summary) is missing",
        ),
        (lambda d: d["nfeval"].update({"tasks": {"piqa": 3}}), "'nfeval.tasks.piqa' is 3"),
    ],
)
def test_malformed_zeroshot_file_names_file_and_key(tmp_path, files, capsys, mutate, key):
    data = json.loads(Path(files[0]).read_text())
    mutate(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert main(["leaderboard", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(bad) in err and key in err and len(err.splitlines()) == 1


def test_malformed_glue_file_names_file_and_key(tmp_path):
    bad = glue_file(
        tmp_path / "bad.json", "f" * 64, "x", {"cola": {"metric": "mcc", "best": {"accuracy": 0.7}}}
    )
    with pytest.raises(ValueError, match=r"bad.json: key 'tasks.cola.best.mcc' is missing"):
        build([bad])


def test_local_task_variant_counts_as_its_canonical_task(tmp_path):
    scores = {"piqa_local": FULL["piqa"], "lambada": {"acc": 0.2}}
    aliases = {"piqa_local": "piqa", "lambada": "lambada"}
    path = zeroshot_file(tmp_path / "l.json", "e" * 64, "tiny", 1_000_000, scores, None, tasks=aliases)
    board = build([path])
    assert board["zeroshot"]["rows"][0]["scores"]["piqa"]["value"] == 0.625
    assert any("ignored task 'lambada'" in w for w in board["warnings"])


def test_conflicting_results_for_one_task_are_rejected(tmp_path, files):
    a, _, _ = files
    again = zeroshot_file(
        tmp_path / "again.json", "a" * 64, "nf-125M", 124_000_000, {"piqa": {"acc_per_token": 0.7}}, COMPUTE_A
    )
    with pytest.raises(
        ValueError, match=r"again.json: task 'piqa' of model aaaaaaaaaaaa is also in .*a.json"
    ):
        build([a, again])


def test_cli_writes_markdown_plots_csv_and_json(tmp_path, files, capsys):
    from test_compare import (
        make_run,  # tests/ is on sys.path under pytest's default import mode
    )

    base = make_run(tmp_path, "base", [(10, 100, 40.0), (20, 200, 30.0)])
    cand = make_run(tmp_path, "cand", [(10, 100, 35.0), (20, 200, 28.0)])
    out = tmp_path / "boards" / "main.md"
    assert main(["leaderboard", *files, "--out", str(out), "--reference", "gpt3", "--runs", base, cand]) == 0
    text = out.read_text()
    assert (
        "![Zero-shot accuracy](main_zeroshot.png)" in text
        and "![Validation perplexity vs compute](main_curves.png)" in text
    )
    for png in ("main_zeroshot.png", "main_curves.png"):
        image = imread(str(out.parent / png))
        assert image.shape[0] > 200 and image.shape[1] > 400 and image.std() > 0
    assert main(["leaderboard", *files, "--out", str(tmp_path / "b.csv")]) == 0
    assert (tmp_path / "b.csv").read_text().startswith("model,reference,group,parameters")
    assert main(["leaderboard", *files, "--format", "json"]) == 0
    board = json.loads(capsys.readouterr().out)
    assert board["zeroshot"]["rows"][1]["scores"]["openbookqa"] is None


def test_a_second_leaderboard_writing_one_page_is_refused_at_once(tmp_path, files, capsys):
    from conftest import held_elsewhere

    out = tmp_path / "board.md"
    with held_elsewhere(out, "file_lock") as pid:
        assert main(["leaderboard", *files, "--out", str(out)]) == 2
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("board", ".board"))) == [
            ".board.md.lock"
        ]  # no page and no image beside the holder's
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out}: being written by another nfeval process (pid {pid} on " in err
    assert main(["leaderboard", *files, "--out", str(out)]) == 0  # the holder died
    assert not (tmp_path / ".board.md.lock").exists()


def test_glue_average_needs_every_metric_of_the_task_score(tmp_path):
    tasks = {"cola": GLUE_RESULTS["cola"], "mrpc": {"metric": "f1", "best": {"f1": 0.85}}}
    board = build([glue_file(tmp_path / "g.json", "f" * 64, "mlm", tasks)])
    (row,) = board["glue"]["rows"]
    assert row["scores"]["mrpc"]["value"] == 0.85 and row["average"] is None
    assert any("'tasks.mrpc.best.accuracy' is missing" in w for w in board["warnings"])


def table_cells(markdown: str, heading: str) -> dict[str, dict[str, str]]:
    """Returns {row name: {column: cell}} of the table under ``## heading`` in ``markdown``."""
    lines = markdown.split(f"## {heading}\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    header, *rows = ([c.strip() for c in line.strip("|").split(" | ")] for line in lines if line[:3] != "|--")
    return {row[0]: dict(zip(header, row)) for row in rows}


def linked_images(page: Path) -> list[str]:
    """Returns the image files a markdown page links."""
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text())


def test_the_format_follows_the_output_suffix_and_any_other_suffix_writes_nothing(tmp_path, files, capsys):
    """``--output nf.html`` wrote markdown into it and redrew the nf_zeroshot.png of an earlier nf.md with
    its own models (issue 51 §2)."""
    folder = tmp_path / "leaderboards"
    assert main(["leaderboard", *files, "--output", str(folder / "nf.md")]) == 0
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(before) == {"nf.md", "nf_zeroshot.png"}
    capsys.readouterr()
    refused = {
        "nf.html": "expected a name ending in .md (markdown), .csv or .json",
        "nf": "expected a name ending in .md (markdown), .csv or .json",
        "nf.MD": "expected a name ending in .md (markdown), .csv or .json",
    }
    for name, message in refused.items():
        assert main(["leaderboard", files[0], "--output", str(folder / name)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--output {folder / name}: {message}" in err, err
    assert main(["leaderboard", files[0], "--output", str(folder / "nf.md"), "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--format csv: --output {folder / 'nf.md'} is md by its suffix" in err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing written, nothing redrawn
    assert main(["leaderboard", *files, "--output", str(folder / "nf.csv")]) == 0
    assert main(["leaderboard", *files, "--output", str(folder / "nf.json"), "--format", "json"]) == 0
    assert (folder / "nf.csv").read_text().startswith("model,reference,group")
    assert json.loads((folder / "nf.json").read_text())["zeroshot"]["columns"]
    assert sorted(p.name for p in folder.iterdir()) == ["nf.csv", "nf.json", "nf.md", "nf_zeroshot.png"]


def test_two_pages_in_one_folder_never_share_an_image(tmp_path, files):
    from test_compare import make_run

    base = make_run(tmp_path, "base", [(10, 100, 40.0), (20, 200, 30.0)])
    cand = make_run(tmp_path, "cand", [(10, 100, 35.0), (20, 200, 28.0)])
    folder = tmp_path / "boards"
    # names chosen to collide if images were named by anything less than the page's own name
    pages = ["nf.md", "nf_zeroshot.md", "nf_curves.md", "nf.md.md", "nf_zeroshot_zeroshot.md"]
    drawn = {}
    for i, name in enumerate(pages):
        models = files[: 1 + i % 2]  # one model, then two: a shared image would change
        assert main(["leaderboard", *models, "--output", str(folder / name), "--runs", base, cand]) == 0
        images = linked_images(folder / name)
        assert len(images) == 2
        drawn[name] = {image: (folder / image).read_bytes() for image in images}
    linked = [image for images in drawn.values() for image in images]
    assert len(set(linked)) == len(linked) == 2 * len(pages)
    for images in drawn.values():  # each page's images are still the ones it drew
        assert all((folder / image).read_bytes() == content for image, content in images.items())


def with_item_counts(path: str, counts: dict[str, int]) -> str:
    """Rewrites a results file with lm-eval's ``n-samples`` for ``counts`` ({task: items}); returns it."""
    data = json.loads(Path(path).read_text())
    data["n-samples"] = {task: {"original": 1000, "effective": n} for task, n in counts.items()}
    Path(path).write_text(json.dumps(data))
    return path


def test_a_column_scored_on_different_item_counts_says_n_in_each_cell(tmp_path, capsys):
    """One model in nfeval's own results file, the other in lm-eval's ``--output_path`` layout; PIQA on
    100 and 200 items, HellaSwag on 100 for both; GLUE RTE on 50 and 100 dev rows (issue 51 §2)."""
    tasks = {"hellaswag": FULL["hellaswag"], "piqa": FULL["piqa"]}
    own = zeroshot_file(tmp_path / "nf.json", "a" * 64, "nf", 1_000_000, tasks)
    with_item_counts(own, {"hellaswag": 100, "piqa": 100})
    layout = tmp_path / "lm_eval_out" / "pre"
    layout.mkdir(parents=True)
    other = zeroshot_file(
        layout / "results_2026-01-01T00-00-00.000000.json", "b" * 64, "pre", 1_000_000, tasks
    )
    with_item_counts(other, {"hellaswag": 100, "piqa": 200})

    def rte(rows):
        best = {"accuracy": 0.6}
        return {"rte": {"metric": "accuracy", "best": best, "majority": {"metrics": best, "rows": rows}}}

    glue = [
        glue_file(tmp_path / "g1.json", "c" * 64, "mlm1", rte({"dev": 50})),
        glue_file(tmp_path / "g2.json", "d" * 64, "mlm2", rte({"dev": 100})),
    ]
    page, results = tmp_path / "board.md", [own, str(tmp_path / "lm_eval_out")]
    assert main(["leaderboard", *results, *glue, "--output", str(page)]) == 0
    text = page.read_text()
    zeroshot = table_cells(text, "Zero-shot")
    piqa, hellaswag = "PIQA (acc_per_token)", "HellaSwag (acc_per_token)"
    # a subset of the task (*), with the binomial interval over its own n
    assert zeroshot["nf"][piqa] == "62.5 ±9.5* (n=100)" and zeroshot["pre"][piqa] == "62.5 ±6.7* (n=200)"
    assert zeroshot["nf"][hellaswag] == zeroshot["pre"][hellaswag] == "31.2 ±9.1*"  # one count: no n
    assert zeroshot["chance"][piqa] == "50.0"
    glue_cells = table_cells(text, "GLUE")
    assert glue_cells["mlm1"]["RTE (accuracy)"] == "60.0 ±13.6 (n=50)"
    assert glue_cells["mlm2"]["RTE (accuracy)"] == "60.0 ±9.6 (n=100)"
    assert "(n=…): the items a score was computed on" in text and "(PIQA;" in text
    assert "(n=…): the dev rows a score was computed on" in text and "(RTE;" in text
    assert main(["leaderboard", *results, *glue, "--output", str(tmp_path / "b.csv")]) == 0
    by_model = {r["model"]: r for r in csv.DictReader(io.StringIO((tmp_path / "b.csv").read_text()))}
    assert (by_model["nf"]["piqa/acc_per_token/n"], by_model["pre"]["piqa/acc_per_token/n"]) == ("100", "200")
    assert by_model["mlm2"]["rte/accuracy/n"] == "100" and by_model["chance"]["piqa/acc_per_token/n"] == ""
    capsys.readouterr()
    assert main(["leaderboard", *results, "--format", "json"]) == 0
    board = json.loads(capsys.readouterr().out)["zeroshot"]
    assert [c["items_differ"] for c in board["columns"]][:2] == [False, True]  # HellaSwag, PIQA
    assert [r["scores"]["piqa"]["n"] for r in board["rows"][:2]] == [100, 200]
