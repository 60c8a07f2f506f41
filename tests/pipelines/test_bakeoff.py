"""``nfeval bakeoff``: the architecture specs, bad input (one line, exit 2), and a smoke bakeoff over three
architectures at the smoke recipe that writes a ranking, significance rows and the command, and reruns
as a no-op."""

from __future__ import annotations

import glob
import importlib
import json
import os

import pytest

from nfeval.base.errors import ConfigError
from nfeval.cli import main
from nfeval.engine.model.config import preset
from nfeval.engine.training import recipe
from nfeval.pipelines import realised_time, trained_gate
from nfeval.pipelines.bakeoff import BakeoffConfig, make_context, run_bakeoff
from nfeval.pipelines.bakeoff.candidates import Candidate, parse_candidate, parse_candidates
from nfeval.pipelines.bakeoff.runs import EXTENSIONS, lr_past_edge, train_config
from nfeval.report import verdict

SMOKE_ARCHS = ("prenorm", "normformer", "sandwich")


def test_candidate_specs():
    assert parse_candidate("sandwich") == Candidate("sandwich", "sandwich", {})
    c = parse_candidate("olmo2qk=olmo2norm:qk_norm=true,norm=rmsnorm")
    assert (c.name, c.arch, c.overrides) == ("olmo2qk", "olmo2norm", {"qk_norm": True, "norm": "rmsnorm"})
    assert c.preset("tiny") == "olmo2norm-tiny"
    assert parse_candidate(c.spec()) == c  # the report's spelling parses back to the same candidate
    ordered = parse_candidates(["prenorm,normformer", "x=sandwich:qk_norm=true"], "normformer", "tiny", {})
    assert [c.name for c in ordered] == ["normformer", "prenorm", "x"]  # the baseline first


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_issue_42_schemes_are_candidates_under_the_shared_recipe(size):
    """Peri-LN, LayerNorm Scaling, Mix-LN and DyT are bakeoff candidates (a preset each, and variants of
    them), and every run of them trains under the baseline's recipe: the report's recipe check
    (``recipe.check_same``) would otherwise refuse the bakeoff after its runs."""
    llama = "dytllama=dyt:dyt_alpha_attn=0.8,dyt_alpha_other=0.2"  # DyT's LLaMA-7B alphas, as a variant
    archs = ("prenorm", "periln", "lnscaling", "mixln", "dyt", llama)
    ctx = make_context(BakeoffConfig(archs=archs, size=size))
    names = [c.name for c in ctx.candidates]
    assert names == ["prenorm", "periln", "lnscaling", "mixln", "dyt", "dytllama"]
    configs = {c.name: train_config(ctx, c, seed=1, tuned=False) for c in ctx.candidates}
    recipes = {name: recipe.of_train_config(cfg) for name, cfg in configs.items()}
    assert recipe.check_same(recipes, "bakeoff") == recipes["prenorm"]
    models = {name: preset(cfg.preset, **cfg.model) for name, cfg in configs.items()}
    # the bakeoff's tiny trains 6 layers (the preset mixln-tiny's 2 would give no Post-LN block)
    assert models["mixln"].post_ln_layers == {"tiny": 1, "small": 3}[size]
    assert models["lnscaling"].ln_scaling and models["dytllama"].dyt_alpha_attn == 0.8
    assert models["periln"] == models["prenorm"].replace(norm_position="sandwich")


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_issue_54_schemes_are_candidates_under_the_shared_recipe(size):
    """Derf, gated attention (both granularities), HybridNorm and HybridNorm* are bakeoff candidates (a
    preset each) whose runs train under the baseline's recipe, each with its own fields."""
    archs = ("prenorm", "derf", "gatedattn", "gatedattnhead", "hybridnorm", "hybridnormstar")
    ctx = make_context(BakeoffConfig(archs=archs, size=size))
    assert [c.name for c in ctx.candidates] == list(archs)
    configs = {c.name: train_config(ctx, c, seed=1, tuned=False) for c in ctx.candidates}
    recipes = {name: recipe.of_train_config(cfg) for name, cfg in configs.items()}
    assert recipe.check_same(recipes, "bakeoff") == recipes["prenorm"]
    models = {name: preset(cfg.preset, **cfg.model) for name, cfg in configs.items()}
    assert {name: m.architecture for name, m in models.items()} == {name: name for name in archs}
    star = models["hybridnormstar"]
    assert [star.layer_placement(i) for i in range(star.n_layer)] == ["pre"] + ["hybrid"] * (star.n_layer - 1)


def test_ngpt_carries_its_own_recipe_fields_and_nothing_else():
    """nGPT trains without weight decay and warm-up (its paper's recipe): in a bakeoff those two fields are
    left to the scheme, in its tune points and runs alike, every other field is the shared recipe, the
    report check lets exactly those differ, and the stability test gives it no weight decay either."""
    from nfeval.pipelines.bakeoff import runs as bakeoff_runs

    ctx = make_context(BakeoffConfig(archs=("prenorm", "ngpt", "dyt"), size="small"))
    _, ngpt, dyt = ctx.candidates
    configs = {c.name: train_config(ctx, c, seed=1, tuned=False) for c in ctx.candidates}
    assert configs["ngpt"].weight_decay is None and configs["ngpt"].warmup is None
    assert configs["prenorm"].warmup == configs["dyt"].warmup == ctx.scale.warmup  # untouched
    recipes = {name: recipe.of_train_config(cfg) for name, cfg in configs.items()}
    assert recipes["ngpt"]["scheme"] == {"weight_decay": 0.0, "warmup": 0.0}
    assert (
        recipes["ngpt"]["optimizer"]["weight_decay"] == 0.0 and recipes["ngpt"]["schedule"]["warmup"] == 0.0
    )
    assert recipe.check_same(recipes, "bakeoff", schemes_may_differ=True) == recipes["prenorm"]
    with pytest.raises(ConfigError, match="another recipe"):
        recipe.check_same(recipes, "bakeoff")  # without the opt-in they are not one recipe
    from nfeval.pipelines.analyses import stability_settings

    settings = stability_settings(ctx.scale, "cpu")
    assert settings.weight_decay > 0 and bakeoff_runs._with_scheme(settings, dyt, "small") is settings
    assert bakeoff_runs._with_scheme(settings, ngpt, "small").weight_decay == 0.0


@pytest.mark.parametrize(
    "archs, baseline, message",
    [
        (["prenorm", "nosuchnorm"], "prenorm", "unknown architecture 'nosuchnorm'"),
        (["prenorm", "x=olmo2norm:no_such_field=1"], "prenorm", "no_such_field"),
        (["prenorm", "x=olmo2norm:norm=batchnorm"], "prenorm", "norm='batchnorm'"),
        (["normformer", "sandwich"], "prenorm", "--baseline prenorm: not among --archs"),
        ([""], "prenorm", "--archs: empty"),
        (["prenorm", "prenorm"], "prenorm", "given twice"),
        (["olmo2norm:qk_norm=true"], "prenorm", "needs a name"),
    ],
)
def test_bad_archs(archs, baseline, message):
    with pytest.raises(ConfigError, match=message):
        make_context(BakeoffConfig(archs=tuple(archs), baseline=baseline))


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    out = str(tmp_path / "o")
    cases = [
        (["--archs", "prenorm", "nosuchnorm"], "unknown architecture"),
        (["--archs", "prenorm", "x=olmo2norm:qk_nrom=true"], "qk_nrom"),
        (["--archs", "normformer", "sandwich"], "--baseline prenorm"),
        (["--seeds", "0"], "--seeds 0: expected at least 1"),
        (["--archs", ""], "--archs: empty"),
        (["--lrs", "1e-3,fast"], "--lrs"),
        (["--clip-grad", "-1"], "--clip-grad -1"),
    ]
    for argv, message in cases:
        try:
            code = main(["bakeoff", "--out", out, *argv])
        except SystemExit as e:  # argparse's errors (a bad --lrs)
            code = e.code
        assert code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert not os.path.exists(out)  # checked before any work


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke bakeoff with the trained-run gate opened: its 8-step runs cannot beat the unigram PPL,
    and these tests read the verdicts (the gate's own smoke is ``clipped_smoke``)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trained_gate, "FACTOR", OPEN_GATE)
        return _smoke(tmp_path_factory)


OPEN_GATE = 1e-3  # a factor every finished smoke run passes


def _smoke(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("bakeoff"))
    cfg = BakeoffConfig(
        archs=SMOKE_ARCHS,
        size="smoke",
        out=out,
        seeds=2,
        close_seeds=3,
        lrs=(1e-3, 3e-3),
        progress=False,
        command="nfeval bakeoff --smoke",
    )
    return cfg, run_bakeoff(cfg)


def test_smoke_bakeoff_report(smoke):
    cfg, report = smoke
    assert sorted(r["name"] for r in report["ranking"]) == sorted(SMOKE_ARCHS)
    finite = [r["interval"]["mean"] for r in report["ranking"] if r["interval"] and not r["diverged"]]
    assert finite == sorted(finite)  # best perplexity first
    assert [t["name"] for t in report["ppl_tests"]] == ["normformer", "sandwich"]
    assert all(t["verdict"] and "mde" in t for t in report["ppl_tests"])
    cloze = [t for t in report["zeroshot_tests"] if t["task"] == "corpus_cloze"]
    assert [t["name"] for t in cloze] == ["normformer", "sandwich"] and all(
        len(t["per_seed"]) >= 2 for t in cloze
    )
    assert {s["name"] for s in report["stability"]} == set(SMOKE_ARCHS)
    assert report["step_ratios"]["prenorm"]["ratio"] == 1.0 and "ci_low" in report["step_ratios"]["sandwich"]
    assert len(report["tuning"]) == 3 and all("*" in row[1] for row in report["tuning"])
    md = open(report["path"]).read()
    assert "`nfeval bakeoff --smoke`" in md and "## Ranking" in md and "seed-paired t-test" in md
    for png in report["figures"]:
        assert os.path.getsize(os.path.join(cfg.out, png)) > 1000
    stored = json.load(open(os.path.join(cfg.out, "report.json")))
    assert stored["ranking"] == json.loads(json.dumps(report["ranking"]))
    # Holm over the perplexity tests (the primary family) and over the rest (secondary)
    assert {t["family"] for t in report["ppl_tests"]} == {"primary"}
    assert all(
        t["p_holm"] is None or t["p_holm"] >= t["p"] for t in report["ppl_tests"] + report["stability"][1:]
    )
    # one of four words, marked when the runs' realised step times missed the plan (a loaded machine)
    said = ("better", "worse", "inconclusive at this scale", verdict.LR_SENSITIVE)
    for t in report["ppl_tests"]:
        off_plan = bool(t.get("off_plan")) and t["p"] is not None
        assert t["verdict"].endswith(verdict.OFF_PLAN) == off_plan, t["verdict"]
        assert t["verdict"].removesuffix(verdict.OFF_PLAN) in said, t["verdict"]
    # LRs tuned on seeds 101-103, judged on 1-3: selection and judgement share no seed
    header = stored["header"]
    assert header["tune_seeds"] == [101, 102, 103] and header["eval_seeds"] == [1, 2, 3]
    for name in SMOKE_ARCHS:
        points = json.load(open(os.path.join(cfg.out, "tune", name, "tune.json")))["points"]
        assert {p["seed"] for p in points} == {101, 102, 103}
    # each perplexity test re-read across the bands; LR-sensitive exactly when those verdicts differ
    for t in report["ppl_tests"]:
        s = t["lr_sensitivity"]
        if s is None:
            continue
        if not s["rows"]:  # the re-reads read the test's own seeds: none when a loaded machine left all out
            assert t.get("seeds_left_out") and not s["sensitive"]
            continue
        assert s["sensitive"] == (len({r["verdict"] for r in s["rows"]}) > 1)
        assert (t["verdict"].removesuffix(verdict.OFF_PLAN) == verdict.LR_SENSITIVE) == s["sensitive"]
    # the scale, the one recipe and each architecture's gradient ratio by depth
    assert header["recipe"]["init"] == "fairseq" and header["facts"]["layers"] == 2
    assert "fewer parameters" in md.splitlines()[2] and "**Recipe, shared by every run:** fairseq init" in md
    depth = {d["name"]: d for d in report["depth_ratios"]}
    assert set(depth) == set(SMOKE_ARCHS) and all(d["mean"] > 0 for d in depth.values())
    # every best LR bracketed by a worse one, or the grid grown past its edge EXTENSIONS times, or its
    # best LR did not train (then the grid is not widened)
    for name in SMOKE_ARCHS:
        tuned = json.load(open(os.path.join(cfg.out, "tune", name, "tune.json")))
        (entry,) = tuned["presets"].values()
        lrs, best = tuned["grid"]["lrs"], entry["best_lr"]
        grown = len(lrs) == 2 + EXTENSIONS
        untrained = not trained_gate.best_trained(entry, header["unigram_ppl"])
        assert min(lrs) < best < max(lrs) or grown or untrained, name
        added = [lr for lr in lrs if lr not in cfg.lrs]
        assert header["widened"].get(name, []) == added and (not added or f"{name} +{added[0]:g}" in md)
    # the seed plan, decided from the first 2 seeds, is what was trained and tested
    plan = header["seed_plan"]
    assert plan["from_seeds"] == 2 and plan["close_seeds"] == 3 and plan["best"] in SMOKE_ARCHS
    close = {n for n, gap in plan["gaps"].items() if gap < plan["mde"]}
    assert set(plan["counts"]) == (close | {"prenorm"} if close - {"prenorm"} else set())
    for name in SMOKE_ARCHS:
        seeds = plan["counts"].get(name, 2)
        assert [r["seed"] for r in stored["records"][name]] == list(range(1, seeds + 1))
        assert len(depth[name]["per_seed"]) == seeds
    # report.md is a function of report.json alone
    from nfeval.pipelines.bakeoff.report import render

    assert render(stored) == md


def test_a_candidate_changing_the_recipe_is_refused():
    with pytest.raises(ConfigError, match="init is part of the training recipe"):
        parse_candidates(["prenorm", "gpt2init=prenorm:init=gpt2"], "prenorm", "tiny", {})


def test_smoke_bakeoff_reruns_as_a_no_op(smoke, monkeypatch):
    cfg, first = smoke

    def forbidden(*args, **kwargs):
        raise AssertionError("a finished bakeoff stage ran again")

    import nfeval.analysis.runs as analysis_runs
    import nfeval.pipelines.runs as runs
    import nfeval.tune.sweep as sweep
    import nfeval.zeroshot.evaluate as zeroshot

    monkeypatch.setattr(runs, "train", forbidden)
    monkeypatch.setattr(runs, "measure_step_ratio", forbidden)
    monkeypatch.setattr(sweep, "run_point", forbidden)
    monkeypatch.setattr(zeroshot, "evaluate", forbidden)
    monkeypatch.setattr(analysis_runs, "stability_test", forbidden)
    monkeypatch.setattr(trained_gate, "FACTOR", OPEN_GATE)
    again = run_bakeoff(cfg)
    assert again["ranking"] == first["ranking"] and again["ppl_tests"] == first["ppl_tests"]


KEPT = ("seed", "config.json", "metrics.jsonl", "complete.json", "fc2_depth.json")  # docs/*/.gitignore's


def test_a_folder_without_weights_or_gradient_records_reads_again(smoke, monkeypatch, tmp_path):
    """What a committed bakeoff folder keeps (each run's record, logs and config, its zero-shot results
    and gradient ratio by depth, scored as it finished; no weights, checkpoints or gradient records) is
    all a rerun reads: a bakeoff lands run by run, and a fresh clone gives the same report."""
    import shutil

    cfg, first = smoke
    copy = str(tmp_path / "committed")
    shutil.copytree(cfg.out, copy)
    for root, dirs, files in os.walk(os.path.join(copy, "runs")):
        if os.path.basename(root) == "checkpoints":
            shutil.rmtree(root)
            dirs[:] = []
            continue
        for name in files:
            if not name.startswith(KEPT):
                os.remove(os.path.join(root, name))
    assert not glob.glob(os.path.join(copy, "runs", "*", "seed1", "grad_stats.jsonl"))
    for module, name in (
        ("nfeval.pipelines.runs", "train"),
        ("nfeval.zeroshot.evaluate", "evaluate"),
        ("nfeval.pipelines.runs", "measure_step_ratio"),
    ):
        monkeypatch.setattr(importlib.import_module(module), name, _forbidden)
    monkeypatch.setattr(trained_gate, "FACTOR", OPEN_GATE)
    again = run_bakeoff(BakeoffConfig(**{**cfg.__dict__, "out": copy}))
    for field in ("ranking", "ppl_tests", "zeroshot_tests", "depth_ratios", "compute_fractions"):
        assert again[field] == first[field], field


def test_each_run_is_scored_zero_shot_as_soon_as_it_trains(smoke, monkeypatch):
    """The zero-shot scoring and the depth summary happen in ``ensure_run`` (the worker that trained the
    run, while its weights are there), for the runs at the tuned LR only (the band's runs are read for
    their PPL)."""
    from nfeval.pipelines.bakeoff import runs as bakeoff_runs

    cfg, _ = smoke
    monkeypatch.setattr(trained_gate, "FACTOR", OPEN_GATE)
    ctx = make_context(cfg)
    ctx.unigram_ppl, ctx.zeroshot = 700.0, ("data", ["corpus_cloze"])
    ctx.step_ratios = json.load(open(os.path.join(cfg.out, "step_ratios.json")))
    scored = []
    monkeypatch.setattr(
        bakeoff_runs, "zeroshot_files", lambda ctx, c, seed, *a: scored.append((c.name, seed))
    )
    c = ctx.candidates[1]
    bakeoff_runs.ensure_run(ctx, c, 1)
    assert scored == [(c.name, 1)]
    assert os.path.isfile(os.path.join(bakeoff_runs.run_dir(ctx, c, 1), bakeoff_runs.DEPTH_FILE))
    for lr in bakeoff_runs.band_lrs(ctx, c):
        bakeoff_runs.ensure_run(ctx, c, 1, lr)
    assert scored == [(c.name, 1)]


def _forbidden(*args, **kwargs):
    raise AssertionError("a committed folder's run was trained, scored or timed again")


def test_a_results_file_left_without_its_sidecar_is_scored_again(smoke, monkeypatch):
    """Issue 55: a kill between the two writes of a scoring left the results file alone; the rerun of the
    same command heals it instead of stopping."""
    from nfeval.zeroshot.items import sidecar_path

    cfg, first = smoke
    results = os.path.join(cfg.out, "zeroshot", "normformer-seed1_cloze.json")
    os.remove(sidecar_path(results))
    monkeypatch.setattr(trained_gate, "FACTOR", OPEN_GATE)
    again = run_bakeoff(cfg)
    assert os.path.isfile(sidecar_path(results))
    assert again["zeroshot_tests"] == first["zeroshot_tests"]


def test_a_rerun_with_other_settings_is_refused(smoke):
    cfg, _ = smoke
    with pytest.raises(ConfigError, match="this folder was made with"):
        run_bakeoff(BakeoffConfig(**{**cfg.__dict__, "lrs": (1e-3,)}))


def test_settle_takes_verdicts_from_holm_and_never_words_an_inconclusive_row():
    from nfeval.pipelines.bakeoff.results import settle

    ppl = [  # three candidates: raw p 0.01, 0.03, 0.04 → Holm 0.03, 0.06, 0.06
        {"name": "a", "family": "primary", "p": 0.01, "mean": 0.1, "verdict": "agrees"},
        {"name": "b", "family": "primary", "p": 0.03, "mean": 0.1, "verdict": "agrees"},
        {"name": "c", "family": "primary", "p": 0.04, "mean": -0.1, "verdict": "disagrees"},
    ]
    zeroshot = [
        {"name": "a", "family": "secondary", "p": 0.2, "mean": 1.0, "verdict": "inconclusive at this scale"}
    ]
    settle(ppl, zeroshot)
    assert [t["verdict"] for t in ppl] == [
        "better",
        "inconclusive at this scale",
        "inconclusive at this scale",
    ]
    assert [round(t["p_holm"], 6) for t in ppl] == [0.03, 0.06, 0.06]
    assert zeroshot[0]["verdict"] == "inconclusive at this scale" and zeroshot[0]["p_holm"] == 0.2


def _records(ppl_by_seed: list[float | None]) -> list[dict]:
    return [
        {"seed": k, "status": "finished" if p else "diverged", "val_ppl": p, "lr": 1e-3}
        for k, p in enumerate(ppl_by_seed, start=1)
    ]


@pytest.mark.parametrize(
    "ppl, expected",
    [
        # b is 1% worse than a (inside one MDE of the paired tests' noise), c 25% worse: a and b get
        # 5 seeds, the baseline with them
        (
            {"base": [100, 110, 105], "a": [90, 104, 92], "b": [92, 100, 96], "c": [115, 130, 118]},
            {"base": 5, "a": 5, "b": 5},
        ),
        # the baseline is the best and no candidate is close: nobody gets more (no pair would gain)
        ({"base": [90, 91, 90.5], "a": [120, 121, 120.5], "b": [130, 131, 130.5], "c": [140, 141, 140]}, {}),
    ],
)
def test_seed_plan_gives_more_seeds_to_the_candidates_close_to_the_best(ppl, expected, tmp_path):
    from nfeval.pipelines.bakeoff import results

    cfg = BakeoffConfig(archs=tuple(ppl), baseline="base", size="tiny", out=str(tmp_path))
    ctx = make_context(BakeoffConfig(archs=("prenorm", "normformer", "sandwich", "olmo2norm"), out=cfg.out))
    names = ["base", "a", "b", "c"]
    ctx.candidates = [Candidate(n, c.arch) for n, c in zip(names, ctx.candidates)]
    records = {n: _records(ppl[n]) for n in names}
    plan = results.plan_seeds(ctx, records, close_seeds=5)
    assert plan["counts"] == expected
    assert plan["from_seeds"] == 3 and plan["best"] == min(names, key=lambda n: sum(ppl[n]))
    assert plan["mde"] > 0
    ctx.seed_counts = plan["counts"]
    assert ctx.seeds_of(ctx.candidates[3]) == [1, 2, 3]
    if expected:
        assert ctx.seeds_of(ctx.candidates[0]) == [1, 2, 3, 4, 5]
    ctx.seeds = 6  # more seeds added to the folder later: no candidate trains fewer than that
    assert all(ctx.seeds_of(c) == list(range(1, 7)) for c in ctx.candidates)


def test_seed_plan_never_counts_a_diverged_candidate_as_close(tmp_path):
    from nfeval.pipelines.bakeoff import results

    ctx = make_context(BakeoffConfig(archs=("prenorm", "normformer", "sandwich"), out=str(tmp_path)))
    records = {
        "prenorm": _records([100, 110, 105]),
        "normformer": _records([90, 99, 95]),
        "sandwich": _records([None, 99, 95]),
    }
    plan = results.plan_seeds(ctx, records, close_seeds=5)
    assert "sandwich" not in plan["gaps"] and "sandwich" not in plan["counts"]
    assert results.plan_seeds(ctx, records, close_seeds=3)["counts"] == {}  # at most --seeds: none


def test_a_best_lr_on_an_edge_grows_the_grid_by_the_edge_step():
    grid = [1e-3, 3e-3, 1e-2, 2e-2, 4e-2]
    assert lr_past_edge(4e-2, grid) == 8e-2  # the top step is x2
    assert lr_past_edge(1e-3, grid) == 3.33e-4  # the bottom step is x3
    assert lr_past_edge(1e-2, grid) is None and lr_past_edge(None, grid) is None
    assert lr_past_edge(1e-3, [1e-3]) is None


def test_a_grid_whose_best_lr_did_not_train_has_no_band_to_retrain(tmp_path):
    """Nothing learned on the grid: every LR lies within noise of the "best", and no band LR is trained."""
    from types import SimpleNamespace

    from nfeval.pipelines.bakeoff import runs as bakeoff_runs

    c = SimpleNamespace(name="flat", preset=lambda size: f"flat-{size}")
    ctx = SimpleNamespace(out=str(tmp_path), scale=SimpleNamespace(size="small"), unigram_ppl=700.0)
    path = bakeoff_runs.tune_file(ctx, c)
    os.makedirs(os.path.dirname(path))
    trained = {"losses": {"101": 5.0}}  # exp(5.0) = 148: below the gate's 466.7
    per_lr = {"0.00424": trained, "0.006": trained, "0.00849": trained}
    for best_ppl, band in ((745.3, []), (140.0, [4.24e-3, 8.49e-3])):
        entry = {
            "best_lr": 6e-3,
            "best_val_ppl": best_ppl,
            "lr_band": [4.24e-3, 6e-3, 8.49e-3],
            "per_lr": per_lr,
        }
        json.dump({"presets": {"flat-small": entry}}, open(path, "w"))
        assert bakeoff_runs.band_lrs(ctx, c) == band


def test_a_grid_where_nothing_trained_grows_downward(tmp_path, monkeypatch):
    """A tune whose best LR did not train adds LRs below its bottom (up to EXTENSIONS), not past the noise
    "best"; once one trains and is the best, the edge rule goes on from there."""
    from types import SimpleNamespace

    from nfeval.pipelines.bakeoff import runs as bakeoff_runs
    from nfeval.tune import sweep

    trains_below = 4e-4  # this scheme learns only below it
    grids = []

    def fake_tune(base, presets, lrs, *args, **kwargs):
        grids.append(list(lrs))
        ppl = {lr: (200.0 + 1e4 * lr if lr < trains_below else 745.0 - 1e3 * lr) for lr in lrs}
        best = min(lrs, key=lambda lr: ppl[lr])
        return {"missing": 0, "presets": {presets[0]: {"best_lr": best, "best_val_ppl": ppl[best]}}}

    monkeypatch.setattr(sweep, "tune", fake_tune)
    monkeypatch.setattr(bakeoff_runs, "train_config", lambda *a, **k: SimpleNamespace(preset="x-small"))
    c = SimpleNamespace(name="x", preset=lambda size: f"x-{size}")
    ctx = SimpleNamespace(
        candidates=[c], lrs=[1e-3, 3e-3, 1e-2], out=str(tmp_path), scale=SimpleNamespace(size="small"),
        unigram_ppl=700.0, tune_budget="steps=5", tune_seeds=[101], jobs=1, progress=False, launch=None,
        reread=False,
    )  # fmt: skip
    bakeoff_runs.run_tunes(ctx)
    # nothing trains at 1e-3 … 1e-2: 3.33e-4 below (trains, best, on the bottom edge), then 1.11e-4, and
    # so on (lower is better in this fake) until EXTENSIONS LRs were added
    assert grids[1] == [3.33e-4, 1e-3, 3e-3, 1e-2] and grids[2][0] == 1.11e-4
    # then the band's neighbours of the best, over the grid it ended with (none here: a fake tune)
    assert len(grids) == EXTENSIONS + 2 and len(grids[-1]) == 3 + EXTENSIONS and grids[-1] == grids[-2]


def test_the_tunes_best_lr_trained_when_it_beats_the_gate():
    threshold = trained_gate.threshold(700.0)
    assert trained_gate.best_trained({"best_val_ppl": threshold * 0.99}, 700.0)
    # HybridNorm at small: 745 everywhere
    assert not trained_gate.best_trained({"best_val_ppl": threshold * 1.01}, 700.0)
    assert not trained_gate.best_trained({"best_val_ppl": None}, 700.0)  # no LR finished
    # no unigram PPL known: the edge rule alone
    assert trained_gate.best_trained({"best_val_ppl": 900.0}, None)


def _marked(ppl_by_seed: list[float | None], unigram: float = 700.0) -> list[dict]:
    return [trained_gate.mark(r, unigram) for r in _records(ppl_by_seed)]


def test_the_paired_ppl_test_drops_the_pairs_where_a_run_did_not_train(tmp_path):
    from nfeval.pipelines.bakeoff import results

    ctx = make_context(BakeoffConfig(archs=("prenorm", "normformer", "sandwich"), out=str(tmp_path)))
    records = {  # unigram 700: a run at 745 collapsed, one at 599 barely trained
        "prenorm": _marked([100, 110, 105, 108]),
        "normformer": _marked([90, 99, 745, 97]),  # seed 3 dropped: three pairs left, all better
        "sandwich": _marked([745, 750, 599, 104]),  # one pair left: not readable, though mostly "worse"
    }
    normformer, sandwich = results.ppl_tests(ctx, records)
    assert normformer["n"] == 3 and len(normformer["gains"]) == 3 and normformer["mean"] > 0
    assert "1 pair(s) left out" in normformer["why"]
    assert sandwich["verdict"] == trained_gate.NOT_READABLE and sandwich["p"] is None
    results.settle([normformer, sandwich])
    assert sandwich["verdict"] == trained_gate.NOT_READABLE  # never "worse"
    ranking = results.ranking(ctx, records, untrainable=frozenset({"sandwich"}))
    # a seed that did not train puts normformer after every candidate without one
    assert [r["name"] for r in ranking] == ["prenorm", "normformer", "sandwich"]
    assert ranking[1]["trained"] == [True, True, False, True] and not ranking[-1]["ranked"]
    assert ranking[1]["interval"]["mean"] == pytest.approx((90 + 99 + 97) / 3)  # the trained seeds'


@pytest.fixture(scope="module")
def clipped_smoke(tmp_path_factory):
    """A smoke bakeoff under the second recipe (--clip-grad 1.0) and the real gate, which none of its
    8-step runs passes (the smoke corpus's unigram PPL is about 71)."""
    out = str(tmp_path_factory.mktemp("bakeoff_clip"))
    cfg = BakeoffConfig(
        archs=("prenorm", "normformer"),
        size="smoke",
        out=out,
        seeds=2,
        close_seeds=2,
        lrs=(1e-3, 3e-3),
        clip_grad=1.0,
        progress=False,
        command="nfeval bakeoff --smoke --clip-grad 1.0",
    )
    return cfg, run_bakeoff(cfg)


def test_untrained_pairs_are_not_readable_whatever_their_realised_time(tmp_path):
    """The gate reads before the realised-time check: runs that did not train give "not readable: did
    not train" even when a loaded machine also put their seeds outside the planned time interval (CI
    once read such a claim as "inconclusive", a verdict that depended on wall-clock noise)."""
    from nfeval.pipelines.bakeoff import results

    ctx = make_context(BakeoffConfig(archs=("prenorm", "normformer"), out=str(tmp_path)))
    records = {"prenorm": _marked([745, 750]), "normformer": _marked([748, 760])}
    planned = {"ratio": 1.0, "ci_low": 0.95, "ci_high": 1.05}
    for seeds_outside in ({}, {1: (1.0, 1.3)}, {1: (1.0, 1.3), 2: (1.0, 0.7)}):
        times = {s: ((10.0, 100), (10.0 * seeds_outside.get(s, (1.0, 1.0))[1], 100)) for s in (1, 2)}
        check = realised_time.check(planned, times)
        assert check["outside"] == sorted(seeds_outside)
        (test,) = results.ppl_tests(ctx, records, {"normformer": check})
        assert test["verdict"] == trained_gate.NOT_READABLE and "did not train" in test["why"]


def test_a_clipped_bakeoff_is_one_recipe_and_reads_no_claim_from_untrained_runs(clipped_smoke):
    cfg, report = clipped_smoke
    assert json.load(open(os.path.join(cfg.out, "bakeoff.json")))["clip_grad"] == 1.0
    stored = json.load(open(os.path.join(cfg.out, "report.json")))
    header = stored["header"]
    assert header["recipe"]["optimizer"]["clip_grad"] == 1.0
    assert header["unigram_ppl"] > 1 and header["trained_factor"] == trained_gate.FACTOR
    assert all(r["trained"] is False for rs in stored["records"].values() for r in rs)
    (test,) = report["ppl_tests"]
    assert test["verdict"] == trained_gate.NOT_READABLE and "clipping 1" in test["why"]
    assert stored["untrainable"] == ["normformer", "prenorm"]
    assert not any(r["ranked"] for r in stored["ranking"])
    md = open(report["path"]).read()
    assert "**Trained-run gate:** the corpus's unigram perplexity is" in md
    assert "clipping 1, warm-up 0.05 of the run then linear decay" in md
    assert "Did not train at any LR of its grid under this recipe (clipping 1, warm-up" in md
    assert f"**{trained_gate.NOT_READABLE}**" in md
    from nfeval.pipelines.bakeoff.report import render

    assert render(stored) == md


def test_a_tune_made_under_the_other_recipe_is_refused(clipped_smoke):
    cfg, _ = clipped_smoke
    ctx = make_context(BakeoffConfig(archs=cfg.archs, size="smoke", out=cfg.out, lrs=cfg.lrs))
    ctx.tokenizer = os.path.join(cfg.out, "tokenizer.json")
    with pytest.raises(ConfigError, match="tuned under another recipe.*optimizer.clip_grad: 1.0 vs 0.0"):
        train_config(ctx, ctx.baseline, 1)
    with pytest.raises(ConfigError, match="this folder was made with"):
        run_bakeoff(BakeoffConfig(**{**cfg.__dict__, "clip_grad": 0.0}))


def test_the_report_states_the_recipe_fields_a_scheme_carries(smoke):
    from nfeval.pipelines.bakeoff.report import render

    cfg, _ = smoke
    stored = json.load(open(os.path.join(cfg.out, "report.json")))
    assert "a scheme carries" not in render(stored)  # none of the smoke's architectures carries any
    stored["header"]["schemes"] = {"ngpt": {"weight_decay": 0.0, "warmup": 0.0}}
    line = "a scheme carries** (every other field is the shared recipe's): ngpt: the scheme's weight_decay 0"
    assert line + ", warmup 0." in render(stored)


def test_a_scheme_that_trains_at_no_lr_is_tried_again_under_its_own_recipe(tmp_path):
    """HybridNorm fails the gate at every LR of its grid: it is added as hybridnorm+own, trained under
    its paper's recipe (its init, warm-up, clipping and optimizer); a scheme without an own recipe, or
    one that trained somewhere, is not."""
    from nfeval.engine.training.own_recipes import OWN_RECIPES
    from nfeval.pipelines.bakeoff import runs as bakeoff_runs

    ctx = make_context(BakeoffConfig(archs=("prenorm", "hybridnorm", "dyt"), size="small", out=str(tmp_path)))
    ctx.unigram_ppl = 700.0
    ppl = {"prenorm": 150.0, "hybridnorm": 745.0, "dyt": 760.0}  # dyt fails too, but has no own recipe
    for c in ctx.candidates:
        path = bakeoff_runs.tune_file(ctx, c)
        os.makedirs(os.path.dirname(path))
        per_lr = {
            "0.001": {"lr": 1e-3, "val_ppl": ppl[c.name]},
            "0.003": {"lr": 3e-3, "val_ppl": ppl[c.name]},
        }
        entry = {"best_lr": 1e-3, "best_val_ppl": ppl[c.name], "per_lr": per_lr}
        json.dump({"grid": {"lrs": [1e-3, 3e-3]}, "presets": {c.preset("small"): entry}}, open(path, "w"))
    added = bakeoff_runs.add_own_recipes(ctx)
    assert [c.name for c in added] == ["hybridnorm+own"] and ctx.candidates[-1] is added[0]
    assert bakeoff_runs.add_own_recipes(ctx) == []  # once
    own = train_config(ctx, added[0], 1, tuned=False)
    recipe_fields = OWN_RECIPES["hybridnorm"]
    assert own.own_recipe == "hybridnorm" and own.model["init"] == recipe_fields.model["init"]
    assert (own.clip_grad, own.beta2, own.weight_decay) == (1.0, 0.95, 0.1)
    shared = train_config(ctx, ctx.candidates[1], 1, tuned=False)
    assert shared.own_recipe is None and shared.clip_grad == 0.0
    assert bakeoff_runs.tune_file(ctx, added[0]).endswith(os.path.join("hybridnorm+own", "tune.json"))
