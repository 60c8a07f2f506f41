"""GLUE ensembles: the learning rates of one task and seed trained as one batched model give the
one-at-a-time results (weights, optimizer state, dev metrics, point files), resume after a kill, and
``--ensemble`` is checked."""

import copy
import json

import pytest
import torch
from test_glue import write_cat_tasks

from nfeval import cli
from nfeval.glue import ensemble, finetune
from nfeval.glue import members as stacked
from nfeval.glue import sweep as glue
from nfeval.glue.points import Point

LRS = [3e-4, 1e-3, 3e-3]
RECIPE = glue.Recipe(epochs=3, batch_size=32)  # dropout 0.1: the masks must match too


@pytest.fixture()
def glue_dir(tmp_path):
    return write_cat_tasks(tmp_path / "glue", n_train=160, n_dev=64)


def run(ckpt, glue_dir, out, size, task="sst2", recipe=RECIPE) -> dict:
    return glue.sweep(
        ckpt,
        [task],
        LRS,
        out_dir=str(out),
        glue_dir=glue_dir,
        recipe=recipe,
        progress=False,
        ensemble_size=size,
    )


def point_files(out, task="sst2") -> dict:
    """Returns {lr folder: (history, epoch, predictions)} of every finished point under ``out``."""
    files = {}
    for path in sorted(out.glob(f"glue/{task}/*/seed=0/result.json")):
        result = json.loads(path.read_text())
        preds = json.loads((path.parent / "predictions.json").read_text())
        files[path.parent.parent.name] = (result["history"], result["epoch"], preds["splits"], preds["epoch"])
    return files


def assert_same_points(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and len(a) == len(LRS)
    for lr in a:
        (hist_a, *rest_a), (hist_b, *rest_b) = a[lr], b[lr]
        assert rest_a == rest_b, lr  # reported epoch and its dev predictions
        for x, y in zip(hist_a, hist_b, strict=True):
            assert x["epoch"] == y["epoch"] and x["metrics"] == pytest.approx(y["metrics"], abs=1e-6)
            assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-5)


def saved_states(monkeypatch) -> dict:
    """Returns {(point folder, epoch): state} filled with a copy of every state.pt the run saves."""
    states, real = {}, finetune._save_state

    def keep(path, state):
        kept = {k: state[k] for k in ("model", "optimizer", "scheduler", "rng")}
        states[path, len(state["history"])] = copy.deepcopy(kept)  # the live tensors move on
        real(path, state)

    monkeypatch.setattr(finetune, "_save_state", keep)
    return states


def test_ensemble_equals_three_sequential_runs(tiny_mlm_ckpt, glue_dir, tmp_path, monkeypatch):
    states = saved_states(monkeypatch)
    seq = run(tiny_mlm_ckpt, glue_dir, tmp_path / "seq", 1)
    ens = run(tiny_mlm_ckpt, glue_dir, tmp_path / "ens", 3)
    seq_states = {k: v for k, v in states.items() if k[0].startswith(str(tmp_path / "seq"))}
    ens_states = {k: v for k, v in states.items() if k[0].startswith(str(tmp_path / "ens"))}

    assert_same_points(point_files(tmp_path / "seq"), point_files(tmp_path / "ens"))
    assert ens["tasks"]["sst2"]["best_lr"] == seq["tasks"]["sst2"]["best_lr"]
    for lr, row in seq["tasks"]["sst2"]["per_lr"].items():
        assert ens["tasks"]["sst2"]["per_lr"][lr]["accuracy"] == pytest.approx(row["accuracy"], abs=1e-6)
    assert len(seq_states) == len(ens_states) == 2 * len(LRS)  # after epochs 1 and 2 of each point
    for (path, epoch), s in seq_states.items():
        e = ens_states[path.replace(str(tmp_path / "seq"), str(tmp_path / "ens")), epoch]
        assert torch.equal(s["rng"], e["rng"])  # the ensemble drew exactly the one-at-a-time dropout masks
        assert s["scheduler"] == e["scheduler"]
        assert s["model"].keys() == e["model"].keys()
        # vmap's batched matmuls round differently from one model's, and AdamW (eps 1e-6) turns a rounding
        # difference δ in a near-zero gradient into a step that differs by up to lr·δ/eps: up to 2.9e-3·lr
        # after two epochs on an Intel Xeon (MKL's AVX-512 code), 2e-3·lr on an AMD EPYC; a wrong mask or
        # learning rate moves weights by the order of lr a step
        atol = 1e-2 * s["scheduler"]["base_lrs"][0]
        for name, w in s["model"].items():
            torch.testing.assert_close(e["model"][name], w, rtol=1e-5, atol=atol, msg=name)
        assert s["optimizer"]["param_groups"] == e["optimizer"]["param_groups"]
        assert s["optimizer"]["state"].keys() == e["optimizer"]["state"].keys()
        for i, moments in s["optimizer"]["state"].items():
            for what, value in moments.items():
                torch.testing.assert_close(e["optimizer"]["state"][i][what], value, rtol=1e-5, atol=1e-7)
    by_lr = [s["model"] for (path, epoch), s in sorted(ens_states.items()) if epoch == 1]
    assert any(not torch.equal(by_lr[0][n], by_lr[-1][n]) for n in by_lr[0])  # the members did differ


def test_members_step_their_own_adamw_on_the_stacks_bit_for_bit(tiny_mlm_ckpt):
    torch.manual_seed(0)
    lrs, shape = [1e-3, 3e-2, 1e-1], (4, 5)

    def adamw(model, lr):
        opt = torch.optim.AdamW(model.parameters(), lr, (0.9, 0.98), 1e-6, 0.1, fused=True)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, finetune.lr_lambda(6, 2))

    alone = [torch.nn.Linear(*shape) for _ in lrs]
    together = [copy.deepcopy(m) for m in alone]
    steppers = [adamw(m, lr) for m, lr in zip(alone, lrs)]
    members = [stacked.Member(None, m, *adamw(m, lr), [], {}, None, None) for m, lr in zip(together, lrs)]
    params = stacked.stack_members(members)
    views = [[m.model.get_parameter(n) for n in params] for m in members]
    for _ in range(6):
        grads = {n: torch.randn(len(lrs), *p.shape[1:]) for n, p in params.items()}
        for k, (m, (opt, sched)) in enumerate(zip(alone, steppers)):
            for n, p in m.named_parameters():
                p.grad = grads[n][k].clone()
            opt.step()
            sched.step()
        for n, p in params.items():
            p.grad = grads[n]
        stacked.step_members(members, params, views)
    for k, a in enumerate(alone):
        for n, p in a.named_parameters():
            torch.testing.assert_close(params[n][k], p, rtol=0, atol=0, msg=n)  # the same kernel, bit for bit
    assert not torch.equal(alone[0].weight, alone[2].weight)


def kill_after(monkeypatch, module, name: str, calls: int) -> None:
    """Makes ``module.name`` do its work, then kill the sweep, on its ``calls``-th call."""
    real, count = getattr(module, name), []

    def dies(*args, **kwargs):
        out = real(*args, **kwargs)
        count.append(1)
        if len(count) == calls:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(module, name, dies)


@pytest.mark.parametrize("resume_size", [3, 1])
def test_killed_ensemble_resumes_to_the_uninterrupted_results(
    tiny_mlm_ckpt, glue_dir, tmp_path, monkeypatch, resume_size
):
    run(tiny_mlm_ckpt, glue_dir, tmp_path / "whole", 3)
    whole = point_files(tmp_path / "whole")

    cut = tmp_path / "cut"
    with monkeypatch.context() as m:  # killed after two of the three members saved their first epoch
        kill_after(m, finetune, "_save_state", 2)
        with pytest.raises(KeyboardInterrupt):
            run(tiny_mlm_ckpt, glue_dir, cut, 3)
    states = sorted(cut.glob("glue/sst2/*/seed=0/state.pt"))
    assert len(states) == 2 and not list(cut.glob("glue/sst2/*/seed=0/result.json"))
    run(tiny_mlm_ckpt, glue_dir, cut, resume_size)  # members at epochs 1, 1 and 0; either path resumes
    assert_same_points(point_files(cut), whole)
    assert not list(cut.glob("glue/sst2/*/seed=0/state.pt"))


def test_ensemble_killed_while_writing_results_skips_finished_points(
    tiny_mlm_ckpt, glue_dir, tmp_path, monkeypatch
):
    run(tiny_mlm_ckpt, glue_dir, tmp_path / "whole", 3)
    cut = tmp_path / "cut"
    with monkeypatch.context() as m:
        kill_after(m, ensemble, "atomic_write_json", 1)
        with pytest.raises(KeyboardInterrupt):
            run(tiny_mlm_ckpt, glue_dir, cut, 3)
    (done,) = cut.glob("glue/sst2/*/seed=0/result.json")
    mtime = done.stat().st_mtime_ns
    runs = []
    real = ensemble.run_ensemble
    monkeypatch.setattr(
        ensemble, "run_ensemble", lambda ckpt, enc, pts, *a: runs.append(pts) or real(ckpt, enc, pts, *a)
    )
    run(tiny_mlm_ckpt, glue_dir, cut, 3)
    assert [[p.lr for p in pts] for pts in runs] == [
        [lr for lr in LRS if f"lr={lr!r}" != done.parent.parent.name]
    ]
    assert done.stat().st_mtime_ns == mtime
    assert_same_points(point_files(cut), point_files(tmp_path / "whole"))


def test_units_group_task_and_seed_and_respect_the_size():
    r = glue.Recipe(epochs=1).resolve(glue.glue_data.spec("rte"), 128, "cpu")
    pts = [Point("rte", lr, seed, r, f"{lr}-{seed}", {}) for seed in (0, 1) for lr in (1e-3, 2e-3, 3e-3)]

    def shape(setting, jobs=1, fits=None):
        return [[(p.lr, p.seed) for p in u] for u in ensemble.plan_units(pts, setting, jobs, fits)]

    assert shape(1) == [[(p.lr, p.seed)] for p in pts]
    assert shape(2) == [[(1e-3, 0), (2e-3, 0)], [(3e-3, 0)], [(1e-3, 1), (2e-3, 1)], [(3e-3, 1)]]
    assert shape("auto", fits=10) == [[(lr, s) for lr in (1e-3, 2e-3, 3e-3)] for s in (0, 1)]
    assert shape("auto", fits=1) == shape(1)
    assert [len(u) for u in ensemble.plan_units(pts, "auto", 2, 10)] == [2, 1, 2, 1]  # spread over jobs
    # on a CPU, auto trains one point at a time (the ensemble measured slower there); N still ensembles
    assert glue.plan_ensembles(None, {}, pts, "auto", "cpu", 1) == [[p] for p in pts]
    assert [len(u) for u in glue.plan_ensembles(None, {}, pts, 3, "cpu", 1)] == [3, 3]


def test_member_estimate_grows_with_params_and_batch(tiny_mlm_ckpt):
    from nfeval.engine import checkpoint

    cfg = checkpoint.load(tiny_mlm_ckpt).model.cfg
    small = ensemble.member_bytes(cfg, 1000, 8, 16)
    assert ensemble.member_bytes(cfg, 2000, 8, 16) == small + 16 * 1000
    assert (
        ensemble.member_bytes(cfg, 1000, 16, 16) > small and ensemble.member_bytes(cfg, 1000, 8, 32) > small
    )
    assert ensemble.free_bytes("cpu") > 0


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", ""])
def test_bad_ensemble_values_are_a_usage_error(tiny_mlm_ckpt, glue_dir, tmp_path, capsys, value):
    out = tmp_path / "out"
    argv = ["glue", "--ckpt", tiny_mlm_ckpt, "--glue-dir", glue_dir, "--out", str(out), "--no-progress"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--tasks", "sst2", "--ensemble", value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --ensemble" in err and "expected auto or a positive integer" in err
    with pytest.raises(ValueError, match="expected auto or a positive integer"):
        run(tiny_mlm_ckpt, glue_dir, out, value)
    assert not out.exists()


def test_regression_ensemble_equals_sequential_runs(tiny_mlm_ckpt, glue_dir, tmp_path):
    recipe = glue.Recipe(epochs=2, batch_size=32)
    for size in (1, 3):
        run(tiny_mlm_ckpt, glue_dir, tmp_path / str(size), size, task="stsb", recipe=recipe)
    seq, ens = point_files(tmp_path / "1", "stsb"), point_files(tmp_path / "3", "stsb")
    assert seq.keys() == ens.keys() and len(seq) == len(LRS)
    for lr, (history, epoch, splits, _) in seq.items():
        e_history, e_epoch, e_splits, _ = ens[lr]
        assert e_epoch == epoch
        for x, y in zip(history, e_history, strict=True):
            # a correlation of nearly constant scores magnifies their 1e-6 float differences
            assert y["metrics"] == pytest.approx(x["metrics"], abs=1e-4)
            assert y["train_loss"] == pytest.approx(x["train_loss"], rel=1e-5)
        assert e_splits["dev"]["preds"] == pytest.approx(splits["dev"]["preds"], abs=1e-5)  # STS-B scores
        assert len(set(splits["dev"]["preds"])) > 1
