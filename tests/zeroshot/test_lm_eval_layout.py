"""``nfeval zeroshot --output_path DIR --log_samples`` writes lm-eval's own layout: lm-eval's finders and
``make_table`` read it, its sample lines equal stock lm-eval's for the same model and documents, and
compare-scores and the leaderboard read it beside ``--output F``'s files."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pathlib
import shutil

import lm_eval
import pytest
from conftest import _save_tiny
from lm_eval.utils import (
    get_file_datetime,
    get_file_task_name,
    get_latest_filename,
    get_results_filenames,
    get_sample_results_filenames,
    hash_string,
    make_table,
    sanitize_model_name,
)

from nfeval import cli, embedded
from nfeval import tasks as nf_tasks
from nfeval.report import paired
from nfeval.report.compare_scores import compare_scores
from nfeval.report.leaderboard import build
from nfeval.zeroshot import lm_eval_layout

TASKS = ("piqa", "openbookqa")  # two and four choices; OpenBookQA adds unconditional requests
LOCAL = tuple(f"{t}_local" for t in TASKS)  # what ran, and what results and samples are keyed by
LIMIT = 10
SAMPLE_FIELDS = {
    "doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
    "doc_hash", "prompt_hash", "target_hash",
}  # fmt: skip


def zeroshot(ckpt: str, *output: str) -> tuple[int, str]:
    """Returns (exit status, stderr) of ``nfeval zeroshot`` on the embedded slices of TASKS (CPU)."""
    argv = ["zeroshot", "--ckpt", ckpt, "--data-dir", "embedded", "--tasks", *TASKS, "--limit", str(LIMIT)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main([*argv, *output, "--device", "cpu", "--no-progress"])
    return code, err.getvalue()


def every_file(root) -> list[str]:
    """Returns every file under ``root``, as lm-eval's finders take them (paths with '/')."""
    return sorted(str(p) for p in pathlib.Path(root).rglob("*") if p.is_file())


def sample_lines(path) -> list[dict]:
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


@pytest.fixture(scope="module")
def written(tiny_clm_ckpt, tmp_path_factory):
    """Scores the tiny model twice into one ``--output_path`` folder (the second run from the cache) and
    once with stock lm-eval; returns their folders."""
    root = tmp_path_factory.mktemp("lm_eval_layout")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NFEVAL_CACHE", str(root / "cache"))
        for _ in range(2):
            code, err = zeroshot(tiny_clm_ckpt, "--output_path", str(root / "nf"), "--log_samples")
            assert code == 0, err
        stock_lm_eval(tiny_clm_ckpt, root / "stock")
    return {"nf": root / "nf", "stock": root / "stock", "root": root}


def stock_lm_eval(ckpt: str, output_path) -> None:
    """Runs what ``lm_eval --model nfeval --model_args pretrained=CKPT --tasks piqa_local openbookqa_local
    --limit 10 --batch_size 16 --device cpu --output_path DIR --log_samples`` runs (lm_eval/_cli/run.py):
    ``simple_evaluate`` with an ``EvaluationTracker``, then its two writers. The batch size is zeroshot's
    default: another batch shape changes fp32 log-likelihoods in their last digits."""
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    import nfeval.model_adapters.lm  # noqa: F401  (registers the "nfeval" model)

    tracker = EvaluationTracker(output_path=str(output_path))
    manager = TaskManager(
        include_path=nf_tasks.TASKS_DIR,
        include_defaults=False,
        metadata={"data_dir": embedded.zeroshot_dir("embedded")},
    )
    results = lm_eval.simple_evaluate(
        model="nfeval",
        model_args=f"pretrained={os.path.abspath(ckpt)}",
        tasks=[f"{t}_local" for t in TASKS],
        limit=LIMIT,
        batch_size=16,
        device="cpu",
        log_samples=True,
        evaluation_tracker=tracker,
        task_manager=manager,
    )
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])


def test_lm_evals_finders_and_make_table_read_what_zeroshot_wrote(written, tiny_clm_ckpt):
    files = every_file(written["nf"])
    results_files = get_results_filenames(files)
    assert len(results_files) == 2 and len(files) == 6  # two runs, each a results file and 2 samples
    latest = get_latest_filename(results_files)
    results = json.loads(pathlib.Path(latest).read_text())
    folder = pathlib.Path(latest).parent
    assert folder.parent == written["nf"]
    assert folder.name == results["model_name_sanitized"] == sanitize_model_name(tiny_clm_ckpt)
    date = get_file_datetime(os.path.basename(latest)).removesuffix(".json")
    ours = [f for f in get_sample_results_filenames(files) if get_file_datetime(os.path.basename(f)) == date]
    assert {get_file_task_name(os.path.basename(f)): os.path.dirname(f) for f in ours} == dict.fromkeys(
        LOCAL, str(folder)
    )
    table = make_table(results)
    assert all(t in table for t in LOCAL) and "acc_per_token" in table and "acc_uncond" in table
    assert set(results["results"]) == set(LOCAL) and results["nfeval"]["tasks"] == dict(zip(LOCAL, TASKS))
    nf = results["nfeval"]  # nfeval's block, kept inside lm-eval's results file
    assert nf["provenance"]["lm_eval_version"] == lm_eval.__version__ and nf["model"]["fingerprint"]
    assert results["model_source"] == "nfeval" and results["config"]["model"] == "nfeval"
    for f in ours:
        task = get_file_task_name(os.path.basename(f))
        lines = sample_lines(f)
        assert len(lines) == results["n-samples"][task]["effective"] == LIMIT
        for line in lines:
            assert SAMPLE_FIELDS | set(line["metrics"]) == set(line)
        joined = "".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in lines)
        assert results["task_hashes"][task] == hash_string(joined)  # lm-eval's hash of the run's samples
    assert lm_eval_layout.results_files(str(written["nf"])) == [latest]


def test_sample_files_equal_stock_lm_evals_for_the_same_model_and_documents(written):
    stock = every_file(written["stock"])
    assert len(get_results_filenames(stock)) == 1
    ours = every_file(written["nf"])
    for task in TASKS:
        (theirs,) = [f for f in get_sample_results_filenames(stock) if f"/samples_{task}_local_" in f]
        runs = sorted(f for f in get_sample_results_filenames(ours) if f"/samples_{task}_" in f)
        expected = sample_lines(theirs)
        assert len(expected) == LIMIT
        for run in runs:  # the first scored, the second from the cache
            assert sample_lines(run) == expected, (task, run)


def test_compare_scores_pairs_zeroshots_and_stock_lm_evals_files(written):
    (stock,) = get_results_filenames(every_file(written["stock"]))
    out = compare_scores(str(written["nf"]), stock, n_resamples=200)
    assert out["a"] == lm_eval_layout.results_files(str(written["nf"]))[0]
    assert {r["task"] for r in out["rows"]} == set(TASKS) and len(out["rows"]) == 7
    for row in out["rows"]:
        assert row["n"] == LIMIT and row["difference"] == 0.0, row


def test_both_layouts_read_alike_by_leaderboard_and_compare_scores(
    written, tiny_clm_ckpt, tiny_tokenizer, tmp_path, monkeypatch
):
    monkeypatch.setenv("NFEVAL_CACHE", str(written["root"] / "cache"))
    other = _save_tiny(tmp_path / "other", tiny_tokenizer, "prenorm", "clm", seed=1)
    folder, single = tmp_path / "both", tmp_path / "other.json"
    assert zeroshot(other, "--output", str(single))[0] == 0
    code, err = zeroshot(other, "--output_path", str(folder), "--log_samples")
    assert code == 0 and "cached result" not in err, err  # a cache entry without samples is rescored
    nf = str(written["nf"])
    assert compare_scores(nf, str(folder))["rows"] == compare_scores(nf, str(single))["rows"]
    boards = [build([nf, str(other_side)]) for other_side in (folder, single)]
    for board in boards:  # the leaderboard's --baseline pairs through either layout
        paired.add_to_board(board, board["zeroshot"]["rows"][0]["name"], n_resamples=200)
    scores = [[row["scores"] for row in board["zeroshot"]["rows"]] for board in boards]
    assert scores[0] == scores[1] and boards[0]["paired"]["comparisons"] == 2
    assert zeroshot(tiny_clm_ckpt, "--output_path", str(folder), "--log_samples")[0] == 0
    rows = build([str(folder)])["zeroshot"]["rows"]
    assert len([r for r in rows if r["reference"] is None]) == 2  # a folder: each model's latest results
    code, err = one_line_error(["compare-scores", str(folder), nf])
    assert code == 2 and f"A {folder}: holds the results of 2 models" in err, err


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (["--log_samples"], "--log_samples: lm-eval's samples files go under --output_path DIR"),
        (["--output", "F.json", "--output_path", "D"], "--output F.json and --output_path D: pass one"),
    ],
)
def test_bad_output_flags_are_one_line_before_any_work(
    tiny_clm_ckpt, output, expected, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, err = zeroshot(tiny_clm_ckpt, *output)
    assert code == 2 and err.count("\n") == 1 and expected in err, err
    assert list(tmp_path.iterdir()) == []


def test_results_without_their_samples_do_not_pair(written, tiny_clm_ckpt, tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(written["root"] / "cache"))
    assert zeroshot(tiny_clm_ckpt, "--output_path", str(tmp_path / "bare"))[0] == 0
    (results,) = get_results_filenames(every_file(tmp_path / "bare"))  # --output_path alone: no samples
    code, err = one_line_error(["compare-scores", results, str(written["nf"])])
    assert code == 2 and "no samples_piqa_local_<date>.jsonl of the same run beside it" in err, err
    # a run's files with the last line of each samples file lost, in a folder named as lm-eval's results
    # files are (lm-eval's finders match '/results_' anywhere in a path; nfeval's look at file names)
    cut = tmp_path / "results_cut"
    cut.mkdir()
    latest = lm_eval_layout.results_files(str(written["nf"]))[0]
    date = get_file_datetime(os.path.basename(latest)).removesuffix(".json")
    for f in every_file(os.path.dirname(latest)):
        if date in f:
            lines = pathlib.Path(f).read_text().splitlines(keepends=True)
            (cut / os.path.basename(f)).write_text("".join(lines[:-1] if "/samples_" in f else lines))
    code, err = one_line_error(["compare-scores", str(cut), latest])
    assert code == 2 and f"{LIMIT - 1} documents, but {cut}" in err and f"effective = {LIMIT}" in err, err


def one_line_error(argv: list[str]) -> tuple[int, str]:
    """Returns (exit status, stderr) of ``nfeval argv``, its stderr checked to be at most one line."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    assert err.getvalue().count("\n") <= 1, err.getvalue()
    return code, err.getvalue()


def test_a_write_lm_eval_could_not_do_is_one_line_leaving_nothing(
    written, tiny_clm_ckpt, tmp_path, monkeypatch
):
    monkeypatch.setenv("NFEVAL_CACHE", str(written["root"] / "cache"))

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", full)  # lm-eval's results writer logs and carries on
    code, err = zeroshot(tiny_clm_ckpt, "--output_path", str(tmp_path / "out"), "--log_samples")
    last = err.strip().splitlines()[-1]  # after the cache's one line per task
    assert code == 2 and "lm-eval could not write its files" in last, err
    assert "No space left on device" in last and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # not even the folder the write made


def test_a_rerun_clears_what_a_write_killed_between_its_moves_left(
    written, tiny_clm_ckpt, tmp_path, monkeypatch
):
    """A writer killed after moving its samples files and before its results file (samples go first)
    leaves its staging folder and samples without their results; lm-eval's readers take each task's
    newest samples file, so they would pair those with an older run's results. The next write into the
    folder takes its turn lock and removes them (issue 55, round four)."""
    monkeypatch.setenv("NFEVAL_CACHE", str(written["root"] / "cache"))
    out = tmp_path / "out"
    assert zeroshot(tiny_clm_ckpt, "--output_path", str(out), "--log_samples")[0] == 0
    (results,) = get_results_filenames(every_file(out))
    model = os.path.dirname(results)
    killed = "2099-01-01T00-00-00.000001"  # newer than any run to come: lm-eval's readers would pick it
    for f in get_sample_results_filenames(every_file(model)):
        task = get_file_task_name(os.path.basename(f))
        shutil.copy(f, os.path.join(model, f"samples_{task}_{killed}.jsonl"))
    staging = out / f"{lm_eval_layout.STAGING}dead" / os.path.basename(model)
    staging.mkdir(parents=True)
    shutil.copy(results, staging / f"results_{killed}.json")
    assert zeroshot(tiny_clm_ckpt, "--output_path", str(out), "--log_samples")[0] == 0
    files = every_file(out)
    assert not [f for f in files if killed in f] and os.listdir(out) == [os.path.basename(model)]
    assert len(get_results_filenames(files)) == 2 and len(get_sample_results_filenames(files)) == 2 * len(
        TASKS
    )
    latest = get_file_datetime(get_latest_filename(get_results_filenames(files))).removesuffix(".json")
    for task in LOCAL:  # lm-eval's pick of each task's samples is the latest results' run
        mine = [
            f for f in get_sample_results_filenames(files) if get_file_task_name(os.path.basename(f)) == task
        ]
        assert get_file_datetime(get_latest_filename(mine)) == latest
    assert one_line_error(["compare-scores", str(out), str(written["nf"])])[0] == 0


def _latest_run_copy(written, to) -> dict[str, pathlib.Path]:
    """Copies the latest run of ``written``'s folder to ``to``; returns {"results": file, task: samples}."""
    latest = lm_eval_layout.results_files(str(written["nf"]))[0]
    date = get_file_datetime(os.path.basename(latest)).removesuffix(".json")
    to.mkdir()
    out = {}
    for f in every_file(os.path.dirname(latest)):
        if date in f:
            name = os.path.basename(f)
            out["results" if "/results_" in f else get_file_task_name(name)] = to / name
            shutil.copy(f, to / name)
    return out


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda x: {**x, "doc_id": str(x["doc_id"])}, ":1: key 'doc_id' is '0'; expected a document id"),
        (lambda x: {**x, "filter": None}, ":1: key 'filter' is None; expected a filter name"),
        (lambda x: {**x, "metrics": 3}, ":1: key 'metrics' is 3; expected a list of metric names"),
    ],
)
def test_a_samples_line_of_another_shape_is_one_line_naming_file_and_line(
    written, tmp_path, change, expected
):
    files = _latest_run_copy(written, tmp_path / "run")
    lines = sample_lines(files["piqa_local"])
    files["piqa_local"].write_text("".join(json.dumps(change(x)) + "\n" for x in lines))
    code, err = one_line_error(["compare-scores", str(tmp_path / "run"), str(written["nf"])])
    assert code == 2 and f"{files['piqa_local']}{expected}" in err, err


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda r: r["results"].update(piqa_local="x"), "key 'results.piqa_local' is 'x'"),
        (lambda r: r.update(results=[]), "key 'results' is []"),
        (lambda r: r.update(configs=[]), "key 'configs' is []"),
    ],
)
def test_a_results_file_of_another_shape_is_one_line_naming_it(written, tmp_path, change, expected):
    files = _latest_run_copy(written, tmp_path / "run")
    data = json.loads(files["results"].read_text())
    change(data)
    files["results"].write_text(json.dumps(data))
    code, err = one_line_error(["compare-scores", str(tmp_path / "run"), str(written["nf"])])
    assert code == 2 and f"{files['results']}: {expected}" in err, err


def test_lm_eval_command_reads_the_embedded_slices_too():
    from nfeval.commands.lm_eval import with_data_dir

    assert with_data_dir(None, "embedded") == {"data_dir": embedded.zeroshot_dir("embedded")}
