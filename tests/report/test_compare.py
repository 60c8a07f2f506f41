"""nfeval compare on synthetic run dirs whose crossings and budgets are known by construction."""

from __future__ import annotations

import json
import math

import pytest
from matplotlib.image import imread

from nfeval.base.errors import ConfigError
from nfeval.cli import main
from nfeval.engine.training import recipe
from nfeval.report.compare import (
    NOT_REACHED,
    compare,
    crossing,
    interpolate,
)
from nfeval.report.compare_table import format_comparison

# the fairseq LM recipe as a run records it (engine.training.recipe.record)
RECIPE = recipe.record(
    {"init": "fairseq", "positions": "sinusoidal", "scale_embedding": True, "embedding_norm": False}
    | {"dropout": 0.0, "attn_dropout": 0.0},
    {"clip_grad": 0.0, "warmup": 0.05, "lr_power": 1.0, "end_lr": 0.0, "dtype": "fp32"},
    {"beta1": 0.9, "beta2": 0.98, "eps": 1e-8, "weight_decay": 0.01},
)
CPU = {"platform": "Linux", "processor": "x86_64", "cpu_count": 2, "torch_threads": 2}
GPU = {**CPU, "cuda_device": "NVIDIA H100", "cuda_device_count": 8}


def make_run(
    root,
    name,
    val,
    step_time=1.0,
    tokens_per_step=100,
    hardware=CPU,
    extra_lines=(),
    arch="prenorm",
    total_steps=None,
    run_recipe=RECIPE,
):
    """Writes a run dir; ``val`` is [(step, flops, val_ppl)], with wall_s = step * step_time and a train
    line at every validation step."""
    run = root / name
    run.mkdir()
    lines = []
    for step, flops, ppl in val:
        common = {"step": step, "tokens": step * tokens_per_step, "wall_s": step * step_time, "flops": flops}
        lines.append(
            {
                "kind": "train",
                **common,
                "lr": 1e-3,
                "loss": 3.0,
                "grad_norm": 1.0,
                "tokens_per_s": 1.0,
                "mfu": 0.1,
            }
        )
        lines.append({"kind": "val", **common, "val_loss": math.log(ppl), "val_ppl": ppl})
    text = "\n".join(json.dumps(line) for line in lines) + "\n" + "".join(extra_lines)
    (run / "metrics.jsonl").write_text(text)
    model = {
        "n_layer": 2,
        "d_model": 64,
        "n_head": 2,
        "d_ffn": 256,
        "vocab_size": 300,
        **({"scale_attn": True, "scale_fc": True, "scale_heads": True} if arch == "normformer" else {}),
    }
    (run / "config.json").write_text(
        json.dumps(
            {
                "model": model,
                "train": {"total_steps": total_steps} if total_steps else {},
                "provenance": {"hardware": hardware},
                "compute": {"hardware": hardware},
                **({"recipe": run_recipe} if run_recipe else {}),
            }
        )
    )
    return str(run)


@pytest.fixture
def runs(tmp_path):
    # Baseline: best ppl 20 at step 40 (flops 400, wall 40 s).
    base = make_run(tmp_path, "base", [(10, 100, 40.0), (20, 200, 30.0), (30, 300, 25.0), (40, 400, 20.0)])
    # Candidate, 10% slower per step: crosses 20 halfway between steps 20 (ppl 24) and 30 (ppl 16).
    cand = make_run(
        tmp_path,
        "cand",
        [(10, 100, 30.0), (20, 200, 24.0), (30, 300, 16.0)],
        step_time=1.1,
        arch="normformer",
    )
    return base, cand


def test_known_crossing_gives_exact_fraction_on_both_axes(runs):
    result = compare(list(runs))
    base, cand = result["runs"]
    assert result["baseline"] == "base" and result["target_val_ppl"] == 20.0
    assert base["to_target"]["fraction"] == {"flops": 1.0, "wall_s": 1.0}
    assert cand["to_target"]["reached"] and cand["to_target"]["bound"] == "interpolated"
    assert cand["to_target"]["fraction"]["flops"] == 250 / 400
    assert cand["to_target"]["fraction"]["wall_s"] == pytest.approx(27.5 / 40, rel=1e-12)
    assert cand["to_target"]["step"] == 25 and cand["to_target"]["tokens"] == 2500
    assert cand["architecture"] == "normformer" and base["architecture"] == "prenorm"


def test_equal_compute_perplexity_steps_tokens_and_overhead(runs):
    result = compare(list(runs))
    assert result["budget"] == {"flops": 300, "wall_s": 33.0}  # the smaller final compute of the two runs
    base, cand = result["runs"]
    assert base["at_equal"]["flops"]["val_ppl"] == 25.0 and cand["at_equal"]["flops"]["val_ppl"] == 16.0
    # at 33 s the baseline is between steps 30 (25.0) and 40 (20.0); the candidate at its last point.
    assert base["at_equal"]["wall_s"]["val_ppl"] == pytest.approx(25.0 - 5.0 * 0.3)
    assert cand["at_equal"]["wall_s"]["val_ppl"] == pytest.approx(16.0)
    assert base["at_equal"]["wall_s"]["steps"] == pytest.approx(33) and cand["at_equal"]["wall_s"][
        "tokens"
    ] == pytest.approx(3000)
    assert (base["steps"], base["tokens"], cand["steps"], cand["tokens"]) == (40, 4000, 30, 3000)
    assert base["step_time_overhead"] == 0.0 and cand["step_time_overhead"] == pytest.approx(0.1)
    assert result["warnings"] == []


def test_mid_schedule_equal_time_reading_is_labelled_not_compute_matched(tmp_path, runs):
    result = compare(list(runs))
    base, cand = result["runs"]
    # The old reading is still there: the baseline at 33 s, step 33 of its 40-step schedule ...
    assert base["at_equal"]["wall_s"]["val_ppl"] == pytest.approx(23.5)
    # ... and now says that it falls mid-schedule (the candidate is read at the end of its own).
    assert base["at_equal"]["wall_s"]["schedule_fraction"] == pytest.approx(33 / 40)
    assert base["at_equal"]["wall_s"]["mid_schedule"] and not cand["at_equal"]["wall_s"]["mid_schedule"]
    assert result["mid_schedule"] == {"flops": ["base"], "wall_s": ["base"]}
    text = format_comparison(result)
    row = next(line for line in text.splitlines() if line.startswith("base "))
    assert "23.50 (mid-schedule)" in row
    assert "ppl@time: not compute-matched (mid-schedule): base at step 33 of 40" in text

    # Given the same time with complete schedules (the candidate 1.1x slower gets 1/1.1 of the steps),
    # both end together: neither is read mid-schedule at equal time (at equal FLOPs the baseline still is).
    even = make_run(
        tmp_path,
        "even",
        [(12, 120, 30.0), (24, 240, 22.0), (36, 360, 19.0)],
        step_time=40 / 36,
        arch="normformer",
    )
    matched = compare([runs[0], even])
    assert matched["mid_schedule"] == {"flops": ["base"], "wall_s": []}
    assert "ppl@time: not compute-matched" not in format_comparison(matched)


def test_a_run_stopped_before_its_schedule_ends_is_mid_schedule(tmp_path, runs):
    killed = make_run(tmp_path, "killed", [(10, 100, 30.0), (20, 200, 24.0)], total_steps=50)
    result = compare([runs[0], killed])
    reading = result["runs"][1]["at_equal"]["wall_s"]
    assert reading["schedule_fraction"] == pytest.approx(20 / 50) and reading["mid_schedule"]
    assert result["mid_schedule"]["wall_s"] == ["base", "killed"]


def test_candidate_that_never_reaches_target_is_not_reached(tmp_path, runs):
    slow = make_run(tmp_path, "slow", [(10, 100, 60.0), (20, 200, 45.0), (50, 500, 20.5)])
    result = compare([runs[0], slow])
    target = result["runs"][1]["to_target"]
    assert target["reached"] is False and target["fraction"] == {"flops": None, "wall_s": None}
    text = format_comparison(result)
    row = next(line for line in text.splitlines() if line.startswith("slow"))
    assert row.count(NOT_REACHED) == 2


def test_unequal_logging_intervals(tmp_path, runs):
    odd = make_run(
        tmp_path, "odd", [(5, 50, 50.0), (13, 130, 35.0), (31, 310, 22.0), (33, 330, 19.0), (70, 700, 15.0)]
    )
    result = compare([runs[0], odd])
    row = result["runs"][1]
    assert row["to_target"]["flops"] == pytest.approx(
        310 + 20 * 2 / 3
    )  # 22 -> 19 crosses 20 two thirds along
    assert row["to_target"]["fraction"]["flops"] == pytest.approx((310 + 20 * 2 / 3) / 400, rel=1e-12)
    assert result["budget"]["flops"] == 400
    assert row["at_equal"]["flops"]["val_ppl"] == pytest.approx(19.0 - 4.0 * 70 / 370, rel=1e-12)
    assert result["runs"][0]["at_equal"]["flops"]["val_ppl"] == 20.0


def test_first_point_already_below_target_is_an_upper_bound(tmp_path, runs):
    fast = make_run(tmp_path, "fast", [(10, 100, 18.0), (20, 200, 12.0)])
    row = compare([runs[0], fast])["runs"][1]
    assert row["to_target"]["bound"] == "at_most" and row["to_target"]["fraction"]["flops"] == 100 / 400
    assert "≤0.250" in format_comparison(compare([runs[0], fast]))


def test_interpolate_and_crossing_never_extrapolate():
    assert interpolate(5, [10, 20], [1.0, 2.0]) is None and interpolate(25, [10, 20], [1.0, 2.0]) is None
    assert interpolate(15, [10, 20], [1.0, 2.0]) == 1.5 and interpolate(20, [10, 20], [1.0, 2.0]) == 2.0
    assert crossing([{"step": 1, "tokens": 1, "flops": 1, "wall_s": 1, "val_ppl": 30.0}], 20.0) is None


def test_resumed_run_keeps_the_later_line_for_a_step(tmp_path, runs):
    redo = json.dumps(
        {"kind": "val", "step": 30, "tokens": 3000, "wall_s": 33.0, "flops": 300, "val_ppl": 21.0}
    )
    cand = make_run(
        tmp_path,
        "resumed",
        [(10, 100, 30.0), (20, 200, 24.0), (30, 300, 16.0)],
        step_time=1.1,
        extra_lines=[redo + "\n"],
    )
    row = compare([runs[0], cand])["runs"][1]
    assert row["final_val_ppl"] == 21.0 and row["to_target"]["reached"] is False


def test_base_line_can_be_chosen_and_baseline_outside_the_list_is_added(runs):
    base, cand = runs
    assert compare([base, cand], baseline="cand")["baseline"] == "cand"
    result = compare([cand], baseline=base)
    assert [r["name"] for r in result["runs"]] == ["base", "cand"]


def test_different_hardware_warns_in_json_and_on_stderr(tmp_path, runs, capsys):
    gpu = make_run(tmp_path, "gpu", [(10, 100, 30.0), (20, 200, 19.0)], hardware=GPU)
    result = compare([runs[0], gpu])
    assert any("different hardware" in w and "wall-clock" in w for w in result["warnings"])
    assert main(["compare", runs[0], gpu, "--json"]) == 0
    captured = capsys.readouterr()
    assert "different hardware" in captured.err
    assert "different hardware" in json.loads(captured.out)["warnings"][0]


def test_cli_table_json_and_plot(tmp_path, runs, capsys):
    out, png = tmp_path / "cmp.json", tmp_path / "curves.png"
    assert main(["compare", *runs, "--out", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "baseline: base" in text and "0.625" in text and "+10.0%" in text
    assert json.loads(out.read_text())["runs"][1]["to_target"]["fraction"]["flops"] == 0.625
    image = imread(str(png))
    assert image.shape[0] > 200 and image.shape[1] > 400 and image.std() > 0


def test_bad_metrics_lines_fail_naming_file_and_line(tmp_path, runs, capsys):
    bad = make_run(tmp_path, "bad", [(10, 100, 30.0), (20, 200, 24.0)])
    lines = (tmp_path / "bad" / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"val_ppl"', '"val_ppl_typo"')
    (tmp_path / "bad" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["compare", runs[0], bad]) == 2
    err = capsys.readouterr().err
    assert f"{bad}/metrics.jsonl:2" in err and "'val_ppl'" in err and len(err.strip().splitlines()) == 1

    lines[1] = "{not json"
    (tmp_path / "bad" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: invalid JSON"):
        compare([runs[0], bad])


def test_non_cumulative_compute_is_rejected(tmp_path, runs):
    bad = make_run(tmp_path, "bad", [(10, 100, 30.0), (20, 90, 24.0)])
    with pytest.raises(ValueError, match=r"metrics.jsonl:4: 'flops' is 90 at step 20, not above 100"):
        compare([runs[0], bad])


def test_unfinished_last_line_is_dropped_with_a_warning(tmp_path, runs):
    cut = make_run(
        tmp_path, "cut", [(10, 100, 30.0), (20, 200, 19.0)], extra_lines=['{"kind": "val", "step": 3']
    )
    result = compare([runs[0], cut])
    assert result["runs"][1]["steps"] == 20
    assert any("unfinished last line" in w for w in result["warnings"])


def test_step_time_leaves_out_startup_interval():
    from nfeval.report.compare_read import step_time

    train = [
        {"step": 10, "wall_s": 8.0},
        {"step": 20, "wall_s": 9.0},
        {"step": 30, "wall_s": 10.2},
        {"step": 40, "wall_s": 11.1},
    ]
    assert step_time(train) == pytest.approx(
        0.1
    )  # median of 0.10, 0.12, 0.09; the 0.8 s/step start-up is left out
    assert step_time(train[:1]) == pytest.approx(0.8)
    assert step_time([]) is None


def test_runs_of_different_recipes_are_refused_or_labelled(tmp_path):
    val = [(10, 100, 40.0), (20, 200, 30.0)]
    base = make_run(tmp_path, "base", val)
    gpt2 = make_run(tmp_path, "gpt2", val, run_recipe={**RECIPE, "init": "gpt2"})
    with pytest.raises(
        ConfigError, match=r"gpt2 was trained under another recipe than base \(init: 'fairseq' vs 'gpt2'\)"
    ):
        compare([base, gpt2])
    labelled = compare([base, gpt2], mixed_recipes=True)
    assert labelled["recipe"] is None and labelled["mixed_recipes"] == ["gpt2: init: 'fairseq' vs 'gpt2'"]
    assert format_comparison(labelled).startswith("MIXED RECIPES: ")
    same = compare([base, make_run(tmp_path, "same", val)])
    assert same["recipe"] == RECIPE and same["mixed_recipes"] == []
    assert not format_comparison(same).startswith("MIXED")


def test_a_run_whose_recipe_cannot_be_told_is_refused(tmp_path, capsys):
    val = [(10, 100, 40.0), (20, 200, 30.0)]
    base = make_run(tmp_path, "base", val)
    old = make_run(tmp_path, "old", val, run_recipe=None)  # no recipe record, no init field
    with pytest.raises(ConfigError, match="the recipe of old cannot be told"):
        compare([base, old])
    assert main(["compare", base, old]) == 2
    assert "--mixed-recipes" in capsys.readouterr().err
    assert main(["compare", base, old, "--mixed-recipes"]) == 0
    assert "MIXED RECIPES: these runs were trained under different recipes (old: recipe unknown)" in (
        capsys.readouterr().out
    )


def write_records(runs, ratio):
    """Writes the records a pipeline keeps beside its runs (``D.json``): the baseline timed against
    nothing, the candidate's paired step-time ratio ``ratio`` to it."""
    base, cand = runs
    with open(base + ".json", "w") as f:
        json.dump({"name": "base", "status": "finished", "step_ratio": None}, f)
    record = {"ratio": ratio, "ci_low": ratio - 0.01, "ci_high": ratio + 0.01, "baseline": "base"}
    with open(cand + ".json", "w") as f:
        json.dump({"name": "cand", "status": "finished", "step_ratio": record}, f)


def time_to_target(text: str, run: str) -> str:
    """Returns the last cell ("time to target") of ``run``'s row in a compare table."""
    return next(line for line in text.splitlines() if line.startswith(f"{run}  ")).split()[-1]


def test_time_to_the_baseline_s_best_has_one_definition_in_compare_and_leaderboard(tmp_path, runs, capsys):
    """The demo's runs got 0.853 from the paired step-time ratio and 0.866 from ``leaderboard --runs``
    (measured seconds): one clock now, the paired one when the runs' records hold the ratio, and every
    table names it (issue 51 §2)."""
    from test_leaderboard import FULL, zeroshot_file

    from nfeval.report import time_clock

    results = zeroshot_file(tmp_path / "zs.json", "a" * 64, "nf", 1000, FULL)
    page = tmp_path / "board.md"
    clocks = {
        # the candidate crosses the baseline's best (step 40, 40 s) at step 25, 27.5 s
        time_clock.MEASURED: "0.688",  # 27.5 s / 40 s
        time_clock.PAIRED: "0.656",  # 25 steps × 1.05 / 40 steps
    }
    for clock, expected in clocks.items():
        if clock == time_clock.PAIRED:
            write_records(runs, 1.05)
        assert compare(list(runs))["time_clock"] == clock
        assert main(["compare", *runs]) == 0
        printed = capsys.readouterr().out
        assert main(["leaderboard", results, "--runs", *runs, "--output", str(page)]) == 0
        board = page.read_text()
        groups = ["compare", "--group", f"base={runs[0]}", "--group", f"cand={runs[1]}"]
        assert main(groups) == 0
        grouped = capsys.readouterr().out
        assert time_to_target(printed, "cand") == time_to_target(board, "cand") == expected
        assert time_to_target(grouped, "cand") == expected  # the cand group: one pair, no interval
        definition = f"'time to target': {time_clock.DEFINITIONS[clock]}."
        assert definition in printed and definition in board and definition in grouped
    untimed = {"run": "other", "ratio": None, "against": None}  # not the run the others were timed against
    timed = {"run": "b", "ratio": 1.05, "against": "base"}
    assert time_clock.paired_ratios({"a": untimed, "b": timed}) is None
    with open(runs[1] + ".json", "w") as f:
        json.dump({"name": "cand", "step_ratio": {"ratio": "fast", "baseline": "base"}}, f)
    assert main(["compare", *runs]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{runs[1]}.json: key 'step_ratio.ratio' is 'fast'" in err
