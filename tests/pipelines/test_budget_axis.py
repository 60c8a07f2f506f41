"""The token budget as an axis (issue 49): Figure 2 at several token budgets, LRs re-tuned at each, and
NormFormer's gain fitted against tokens."""

from __future__ import annotations

import glob
import json
import math
import os

import numpy as np
import pytest
from scipy import stats

from nfeval.base.errors import ConfigError
from nfeval.cli import main
from nfeval.pipelines import realised_time, trained_gate
from nfeval.pipelines.reproduce import ReproduceConfig, run_reproduce, sections
from nfeval.pipelines.reproduce.budget_axis import budget_steps, fit, parse_token_budgets
from nfeval.pipelines.reproduce.budget_report import crossing_text, render


def test_token_budgets_parse_with_suffixes_and_refuse_bad_lists():
    assert parse_token_budgets("2M, 0.5M,8m") == (500_000, 2_000_000, 8_000_000)
    assert parse_token_budgets("128,1k") == (128, 1000)
    for bad in ("2M", "1M,1M", "1M,fast", "1x,2M"):
        with pytest.raises(ConfigError, match="--token-budgets"):
            parse_token_budgets(bad)
    assert budget_steps("tiny", 512_000) == 1000  # tiny: 4 sequences x 128 tokens an update
    with pytest.raises(ConfigError, match="less than one update"):
        budget_steps("tiny", 100)


@pytest.fixture(scope="module", autouse=True)
def open_gate():
    """Opens the trained-run gate and the realised-time check: the smoke scale's few-step runs cannot beat
    the unigram PPL and its step ratios are noise, and these tests read the fit of every seed's gain (the
    gate and the check have their own tests)."""
    check = realised_time.check

    def every_seed_inside(planned, times):  # the smoke's paired ratios are noise on a loaded machine
        return check({**planned, "ci_low": 0.0, "ci_high": math.inf}, times)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trained_gate, "FACTOR", 1e-3)
        patch.setattr(realised_time, "check", every_seed_inside)
        yield


def _rows(gains_by_tokens):
    return [{"tokens": t, "gains": g} for t, g in gains_by_tokens.items()]


def test_fit_matches_a_hand_computation():
    gains = {2**17: [-0.20, -0.16, -0.22], 2**19: [-0.10, -0.05, -0.12], 2**21: [0.02, -0.03, 0.05]}
    f = fit(_rows(gains))
    x = np.array([math.log2(t) for t, g in gains.items() for _ in g])
    y = np.array([v for g in gains.values() for v in g])
    slope, intercept = np.polyfit(x, y, 1)
    assert f["slope"] == pytest.approx(slope) and f["intercept"] == pytest.approx(intercept)
    residual = y - (intercept + slope * x)
    se = math.sqrt(residual @ residual / (len(x) - 2) / ((x - x.mean()) @ (x - x.mean())))
    t = stats.t(len(x) - 2).ppf(0.975)
    assert f["slope_low"] == pytest.approx(slope - t * se) and f["slope_high"] == pytest.approx(
        slope + t * se
    )
    assert f["ends"][0]["gain"] == pytest.approx(intercept + slope * 17)
    assert f["ends"][1]["gain"] == pytest.approx(intercept + slope * 21)
    assert f["sign_change"] is True  # negative at 2^17 tokens, positive at 2^21; a JSON boolean
    assert json.loads(json.dumps(f, default=str)) == f  # plain numbers: report.json holds what render read
    assert f["zero_at_tokens"] == pytest.approx(2 ** (-intercept / slope))


def test_fit_says_no_sign_change_and_no_fit_when_too_few_gains():
    f = fit(_rows({1000: [-0.2, -0.3], 4000: [-0.1, -0.15], 16000: [-0.12, -0.2]}))
    assert not f["sign_change"] and f["ends"][0]["gain"] < 0 and f["ends"][1]["gain"] < 0
    assert fit(_rows({1000: [0.1], 4000: [0.2]}))["slope"] is None
    assert fit(_rows({1000: [0.1, float("inf")], 4000: [0.2]}))["n"] == 2  # a diverged seed: left out


def test_a_crossing_outside_the_range_is_said_as_an_extrapolation_never_as_a_token_count_below_one():
    # docs/budget_tiny's first fit reached 0 at 0.56 tokens, which the page printed as "about 1 tokens"
    assert "less than one token" in crossing_text(0.56, 100_000) and "1 tokens" not in crossing_text(0.56, 1)
    assert "about 2K tokens only when extrapolated back" in crossing_text(2_000, 100_000)
    assert "about 25.6M tokens only when extrapolated forward" in crossing_text(25.6e6, 100_000)


@pytest.fixture(scope="module")
def axis(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("budget") / "axis")
    cfg = ReproduceConfig(
        out=out, scale="smoke", seeds=2, token_budgets=(128, 512), progress=False, device="cpu"
    )
    return cfg, run_reproduce(cfg)


def test_each_budget_is_its_own_tuned_figure_2_and_the_report_fits_the_gain(axis):
    cfg, result = axis
    report = json.load(open(os.path.join(cfg.out, "report.json")))
    assert report["token_budgets"] == [128, 512]
    for row, steps in zip(report["budgets"], (4, 16)):  # smoke: 2 sequences x 16 tokens an update
        folder = os.path.join(cfg.out, row["folder"])
        assert row["steps"]["clm-prenorm"] == steps and len(row["gains"]) == len(row["seeds"])
        # every judged seed is read or left out with its reason (the smoke's step ratios are noisy)
        left_out = sorted(s for seeds in row["left_out"].values() for s in seeds)
        assert row["seeds"] == [1, 2] and not left_out
        sub = json.load(open(os.path.join(folder, "report.json")))
        assert [s["name"] for s in sub["sections"] if s["status"] == "done"] == ["fig2-clm"]
        assert sub["header"]["tune_seeds"] == [101, 102, 103]
        assert os.path.isfile(os.path.join(folder, "tune", "clm", "tune.json"))  # re-tuned at this budget
        assert row["judged"]  # every judged run read on the whole validation split
        for seed, gain in zip(row["seeds"], row["gains"]):
            ppl = {
                k: json.load(open(os.path.join(folder, "runs", k, f"seed{seed}.json")))["judge"]["ppl"]
                for k in row["ppl"]
            }
            assert gain == pytest.approx(math.log(ppl["clm-prenorm"] / ppl["clm-normformer"]))
    assert report["fit"]["n"] == 4 and report["fit"]["slope"] is not None
    md = open(result["report"], encoding="utf-8").read()
    assert md == render(report) + "\n"
    assert "per doubling of the tokens" in md
    assert "Final PPLs are read on the whole validation split (the judging set) at every budget." in md
    ends = report["fit"]["ends"]
    said = "does not change sign" if ends[0]["gain"] * ends[1]["gain"] > 0 else "changes sign"
    assert f"The fitted line {said} inside 128–512 tokens" in md
    assert "fitted over a range of 4× and is not extrapolated" in md
    assert os.path.getsize(os.path.join(cfg.out, "budget_gain.png")) > 1000


def test_a_rerun_resumes_and_render_only_rewrites_the_budget_report(axis, capsys):
    cfg, result = axis
    before = open(result["report"], encoding="utf-8").read()
    os.remove(result["report"])
    assert main(["reproduce", "--out", cfg.out, "--render-only"]) == 0
    assert open(result["report"], encoding="utf-8").read() == before


def test_token_budgets_refuse_other_experiments(tmp_path, capsys):
    argv = ["reproduce", "--out", str(tmp_path / "o"), "--scale", "smoke", "--token-budgets", "128,512"]
    assert main([*argv, "--only", "table4"]) == 2
    assert "runs Figure 2 alone" in capsys.readouterr().err


def test_a_landed_budget_is_read_not_rerun_without_its_run_folders(axis, tmp_path, monkeypatch):
    import shutil

    from nfeval.pipelines import runs

    cfg, _ = axis
    before = json.load(open(os.path.join(cfg.out, "report.json")))
    landed = str(tmp_path / "landed")  # a copy: the module's other tests read the run folders
    shutil.copytree(cfg.out, landed)
    for folder in glob.glob(os.path.join(landed, "tokens=*", "runs", "**", "seed*"), recursive=True):
        if os.path.isdir(folder):  # the run records alone: the finished budgets are read from their reports
            shutil.rmtree(folder)
    monkeypatch.setattr(runs, "train", lambda *a, **k: pytest.fail("a landed budget was trained again"))
    again = run_reproduce(ReproduceConfig(**{**vars(cfg), "out": landed}))
    after = json.load(open(os.path.join(landed, "report.json")))
    assert after["budgets"] == before["budgets"] and after["fit"] == before["fit"]
    assert again["report"] == os.path.join(landed, "report.md")


def test_a_budget_linked_to_another_reports_figure_2_is_read_from_it_and_left_unchanged(
    axis, tmp_path, monkeypatch
):
    """docs/budget_small's 512K budget is a link to docs/reproduce_small (one run, two reports)."""
    import shutil

    from nfeval.pipelines import runs

    cfg, _ = axis
    before = json.load(open(os.path.join(cfg.out, "report.json")))
    linked = tmp_path / "linked"
    shutil.copytree(cfg.out, linked)
    os.rename(linked / "tokens=512", tmp_path / "other_report")
    os.symlink(os.path.join("..", "other_report"), linked / "tokens=512")
    files = {p: open(p, "rb").read() for p in glob.glob(str(tmp_path / "other_report" / "**"), recursive=True)
             if os.path.isfile(p)}  # fmt: skip
    monkeypatch.setattr(runs, "train", lambda *a, **k: pytest.fail("a linked budget was trained again"))
    run_reproduce(ReproduceConfig(**{**vars(cfg), "out": str(linked)}))
    after = json.load(open(linked / "report.json"))
    assert after["budgets"] == before["budgets"] and after["fit"] == before["fit"]
    assert all(open(p, "rb").read() == data for p, data in files.items())  # the other report is only read


def test_a_budget_whose_run_was_trained_again_is_reported_from_the_new_run(axis, tmp_path, monkeypatch):
    """A budget is landed only while its Figure 2 section was computed from the run records in the
    folder: after a run is trained again (its record rewritten: here another final PPL), the budget's
    report is redone from the new record instead of read as it stood."""
    import shutil

    from nfeval.pipelines import runs
    from nfeval.pipelines.reproduce import budget_axis

    cfg, _ = axis
    copy = str(tmp_path / "again")
    shutil.copytree(cfg.out, copy)
    folder = sorted(glob.glob(os.path.join(copy, "tokens=*")))[0]
    steps = json.load(open(os.path.join(folder, "reproduce.json")))["budget"]["max_steps"]
    assert budget_axis.landed(folder, steps)
    record = os.path.join(folder, "runs", "clm-normformer", "seed1.json")
    json.dump(json.load(open(record)) | {"val_ppl": 12345.0}, open(record, "w"))
    assert not budget_axis.landed(folder, steps)
    monkeypatch.setattr(runs, "train", lambda *a, **k: pytest.fail("a finished run was trained again"))
    run_reproduce(ReproduceConfig(**{**vars(cfg), "out": copy}))
    assert budget_axis.landed(folder, steps)
    section = json.load(open(os.path.join(folder, "experiments", "fig2-clm", "section.json")))
    assert section["run_records"] == sections.run_records(folder, budget_axis.PAIR)


def test_a_budget_committed_mid_run_trains_only_the_runs_without_a_record(axis, tmp_path, monkeypatch):
    """What a committed budget keeps (its reports, figures and records archive, under the folder's
    .gitignore: no weights, checkpoints or loose records) is enough to go on from: a commit made while a
    run trained carries that run's logs in the archive without its record, and a fresh clone clears them
    and trains that run alone, to the same final PPL; every finished run is read from the archive."""
    import shutil
    import subprocess

    from nfeval.pipelines import archive, runs
    from nfeval.tune import sweep as tune_sweep

    cfg, _ = axis
    repo = tmp_path / "clone"
    shutil.copytree(cfg.out, repo)
    shutil.copy(
        os.path.join(os.path.dirname(__file__), "..", "..", "docs", "budget_tiny", ".gitignore"), repo
    )
    victim = repo / "tokens=512" / "runs" / "clm-normformer" / "seed2"
    committed = json.load(open(str(victim) + ".json"))
    os.remove(str(victim) + ".json")  # it was still training when the commit was made
    archive.pack(str(repo / "tokens=512"))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    kept = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "--others", "--exclude-standard"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    records = [p for p in kept if not p.endswith((".png", ".md", ".gitignore"))]  # figures and pages stay
    assert not [
        p for p in records if p.endswith((".safetensors", ".jsonl")) or "/runs/" in p or "/tune/" in p
    ]
    assert "tokens=512/records.tar.xz" in kept and "tokens=512/report.json" in kept
    fresh = tmp_path / "fresh"
    for path in kept:
        (fresh / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(repo / path, fresh / path)
    for stale in ("report.json", "report.md", "tokens=512/report.json", "tokens=512/report.md"):
        os.remove(fresh / stale)
    trained, tuned = [], []
    real_train = runs.train
    monkeypatch.setattr(
        runs, "train", lambda c, d, resume=False: trained.append(d) or real_train(c, d, resume)
    )
    monkeypatch.setattr(
        tune_sweep, "train", lambda *a, **k: tuned.append(a) or pytest.fail("a tune point ran")
    )
    monkeypatch.setattr(runs, "measure_step_ratio", None)  # the committed ratios are reused

    run_reproduce(ReproduceConfig(**{**vars(cfg), "out": str(fresh)}))

    victim = fresh / "tokens=512" / "runs" / "clm-normformer" / "seed2"
    assert trained == [str(victim)] and tuned == []
    # the same run trained again: the same PPL up to float reassociation (a loaded machine's thread
    # timing; 2.4e-7 relative seen in a full suite run)
    assert json.load(open(str(victim) + ".json"))["val_ppl"] == pytest.approx(committed["val_ppl"], rel=1e-5)
    report = json.load(open(fresh / "report.json"))
    assert report["token_budgets"] == [128, 512] and len(report["budgets"]) == 2


def test_reread_trains_nothing_and_reads_every_budget_again_under_todays_rules(axis, tmp_path, monkeypatch):
    """--reread recomputes every budget's section from the records the folder holds (a section stored
    under older rules included) and trains, judges, tunes and times nothing."""
    import shutil

    from nfeval.pipelines import runs
    from nfeval.report import verdict
    from nfeval.tune import sweep as tune_sweep

    cfg, _ = axis
    copy = str(tmp_path / "reread")
    shutil.copytree(cfg.out, copy)
    section = os.path.join(copy, "tokens=128", "experiments", "fig2-clm", "section.json")
    json.dump(json.load(open(section)) | {"rules": verdict.RULES - 1}, open(section, "w"))
    for name in ("train", "measure_step_ratio"):
        monkeypatch.setattr(runs, name, lambda *a, **k: pytest.fail("--reread trained or timed"))
    monkeypatch.setattr(tune_sweep, "train", lambda *a, **k: pytest.fail("--reread tuned"))
    monkeypatch.setattr(runs.judging, "judge_run", lambda *a, **k: pytest.fail("--reread judged"))
    before = json.load(open(os.path.join(cfg.out, "report.json")))
    for log in glob.glob(os.path.join(copy, "tokens=128", "runs", "**", "metrics.jsonl"), recursive=True):
        os.remove(log)  # an older committed budget kept its run records only
    run_reproduce(ReproduceConfig(**{**vars(cfg), "out": copy, "reread": True}))
    assert json.load(open(section))["rules"] == verdict.RULES
    after = json.load(open(os.path.join(copy, "report.json")))
    assert [b["gains"] for b in after["budgets"]] == [b["gains"] for b in before["budgets"]]
    flops = [c for c in json.load(open(section))["claims"] if c["id"].endswith("equal-flops")][0]
    assert flops["why"] == "the runs' logs were not kept: equal FLOPs cannot be read again", flops["why"]
    assert "mid-schedule" not in flops["measured"]


def test_tune_only_tunes_every_budget_and_trains_no_run(tmp_path, monkeypatch):
    from nfeval.pipelines import runs

    monkeypatch.setattr(runs, "train", lambda *a, **k: pytest.fail("--tune-only trained a run"))
    monkeypatch.setattr(runs, "measure_step_ratio", lambda *a, **k: pytest.fail("--tune-only timed"))
    out = str(tmp_path / "o")
    cfg = ReproduceConfig(out=out, scale="smoke", seeds=2, token_budgets=(64, 128), tune_only=True,
                          tune_seeds=1, progress=False, device="cpu")  # fmt: skip
    result = run_reproduce(cfg)
    assert "rerun without --tune-only" in result["tuned"]
    for tokens in (64, 128):
        tune = json.load(open(os.path.join(out, f"tokens={tokens}", "tune", "clm", "tune.json")))
        assert set(tune["presets"]) == {"prenorm-tiny", "normformer-tiny"} and not tune["missing"]
        assert not os.path.isdir(os.path.join(out, f"tokens={tokens}", "runs"))
    assert not os.path.isfile(os.path.join(out, "report.json"))
    with pytest.raises(ConfigError, match="--tune-only"):
        ReproduceConfig(out=out, scale="smoke", tune_only=True, reread=True).validate()


def test_an_archived_axis_is_read_from_its_archives_and_trains_nothing(axis, tmp_path, monkeypatch):
    """Each budget packs its records into records.tar.xz when it writes its report; a clone that holds
    only the archives and the reports (what a committed folder keeps) is read from them: the same report,
    nothing trained, tuned or timed."""
    import shutil

    from nfeval.pipelines import archive, runs
    from nfeval.tune import sweep as tune_sweep

    cfg, _ = axis
    clone = str(tmp_path / "clone")
    shutil.copytree(cfg.out, clone)
    for folder in sorted(glob.glob(os.path.join(clone, "tokens=*"))):
        assert os.path.isfile(os.path.join(folder, archive.ARCHIVE))
        for rel in archive.members(folder):
            os.remove(os.path.join(folder, rel))
        os.remove(os.path.join(folder, archive.UNPACKED))
        for path in glob.glob(os.path.join(folder, "**", "*.safetensors"), recursive=True):
            os.remove(path)  # no weights either
    for name in ("train", "measure_step_ratio"):
        monkeypatch.setattr(runs, name, lambda *a, **k: pytest.fail("an archived budget was trained"))
    monkeypatch.setattr(tune_sweep, "train", lambda *a, **k: pytest.fail("an archived budget was tuned"))
    before = json.load(open(os.path.join(cfg.out, "report.json")))
    run_reproduce(ReproduceConfig(**{**vars(cfg), "out": clone}))
    after = json.load(open(os.path.join(clone, "report.json")))
    assert after["budgets"] == before["budgets"] and after["fit"] == before["fit"]


def test_the_gain_figure_labels_its_log_axis_with_plain_numbers_that_do_not_overlap(monkeypatch, tmp_path):
    from nfeval.pipelines.reproduce import budget_report

    gains = {100_000: [-0.05, -0.04], 400_000: [-0.03, -0.06, -0.04], 1_600_000: [-0.02, -0.03, -0.05]}
    report = {"header": {"facts": {"parameters": 431_000}}, "budgets": _rows(gains), "fit": fit(_rows(gains))}
    figures = []
    monkeypatch.setattr(budget_report, "save_png", lambda fig, path: figures.append(fig) or path)
    budget_report.plot(report, str(tmp_path / "gain.png"))
    (fig,) = figures
    ax = fig.axes[0]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # the tick labels as they land on the page (0.23 to 3.7 tokens per parameter)
    shown = [t for t in ax.xaxis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
    texts = [t.get_text() for t in shown]
    assert len(texts) >= 3 and all("^" not in t and "times" not in t for t in texts), texts
    boxes = sorted((t.get_window_extent(renderer) for t in shown), key=lambda b: b.x0)
    assert all(left.x1 <= right.x0 for left, right in zip(boxes, boxes[1:])), texts
