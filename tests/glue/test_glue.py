"""GLUE runner: input encoding, batching, fine-tuning that learns, sweep resume, CLI errors."""

import json
import os
import random

import pytest
import torch
from conftest import WORDS

from nfeval import cli
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.text.tokenization import special_ids
from nfeval.glue import finetune
from nfeval.glue import sweep as glue
from nfeval.glue.config import GlueConfig
from nfeval.glue.summary import format_table

WORDS_NO_CAT = [w for w in WORDS if w != "cat"]
FAST = dict(epochs=3, batch_size=16, warmup_ratio=0.06)


def sentence(rng: random.Random, cat: bool) -> str:
    words = [rng.choice(WORDS_NO_CAT) for _ in range(rng.randint(4, 10))]
    if cat:
        words.insert(rng.randrange(len(words) + 1), "cat")
    return " ".join(words)


def write_cat_tasks(root, n_train: int = 400, n_dev: int = 200):
    """Writes learnable GLUE-format tasks: SST-2 (label = 'cat' occurs) and STS-B (score = 2.5 × #texts
    with 'cat')."""
    for name, n, seed in (("train", n_train, 1), ("dev", n_dev, 2)):
        rng = random.Random(seed)
        sst = "".join(f"{sentence(rng, i % 2 == 1)} \t{i % 2}\n" for i in range(n))
        (root / "SST-2").mkdir(parents=True, exist_ok=True)
        (root / "SST-2" / f"{name}.tsv").write_text("sentence\tlabel\n" + sst)
        rows = []
        for i in range(n):
            a, b = i % 2 == 1, (i // 2) % 2 == 1
            fields = [
                i,
                "g",
                "f",
                "y",
                i,
                "none",
                "none",
                sentence(rng, a),
                sentence(rng, b),
                f"{2.5 * (a + b):.3f}",
            ]
            rows.append("\t".join(map(str, fields)) + "\n")
        (root / "STS-B").mkdir(parents=True, exist_ok=True)
        (root / "STS-B" / f"{name}.tsv").write_text(
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
            + "".join(rows)
        )
    return str(root)


@pytest.fixture()
def glue_dir(tmp_path):
    return write_cat_tasks(tmp_path / "glue")


def test_encode_single_and_pair_roberta_style(tiny_tokenizer):
    sp = special_ids(tiny_tokenizer)
    ids_a = tiny_tokenizer.encode("the cat sat", add_special_tokens=False).ids
    ids_b = tiny_tokenizer.encode("a dog ran", add_special_tokens=False).ids
    single = glue.glue_data.Split("dev", "x", "h", ["the cat sat"], None, [0])
    pair = glue.glue_data.Split("dev", "x", "h", ["the cat sat"], ["a dog ran"], [0])
    assert finetune.encode(tiny_tokenizer, single, 64) == [[sp.bos, *ids_a, sp.eos]]
    assert finetune.encode(tiny_tokenizer, pair, 64) == [[sp.bos, *ids_a, sp.eos, sp.eos, *ids_b, sp.eos]]

    long = glue.glue_data.Split("dev", "x", "h", ["the cat sat " * 20], ["a dog ran"], [0])
    assert len(ids_b) < 14
    (out,) = finetune.encode(tiny_tokenizer, long, 32)
    assert len(out) == 32 and out[-1 - len(ids_b) :] == [*ids_b, sp.eos]  # the short text is kept whole
    both = glue.glue_data.Split("dev", "x", "h", ["the cat sat " * 20], ["a dog ran " * 20], [0])
    (out,) = finetune.encode(tiny_tokenizer, both, 16)
    assert len(out) == 16 and out.index(sp.eos) == 1 + 6  # longest-first leaves 6 + 6 text tokens
    (out,) = finetune.encode(
        tiny_tokenizer, glue.glue_data.Split("d", "x", "h", ["cat " * 50], None, [0]), 10
    )
    assert len(out) == 10 and out[0] == sp.bos and out[-1] == sp.eos


def test_length_batches_cover_everything_and_group_lengths():
    lengths = [random.Random(i).randint(1, 50) for i in range(1000)]
    train = finetune.length_batches(lengths, 16, torch.Generator().manual_seed(0), pool=10)
    assert sorted(i for b in train for i in b) == list(range(1000))
    assert sorted(len(b) for b in train) == [8] + [16] * 62  # 6 full pools of 160, then 40 = 16 + 16 + 8
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in train) / len(train)
    assert spread < 10  # bucketing: a random batch of 16 would spread over ~45
    again = finetune.length_batches(lengths, 16, torch.Generator().manual_seed(0), pool=10)
    other = finetune.length_batches(lengths, 16, torch.Generator().manual_seed(1), pool=10)
    assert train == again and train != other
    evaluation = finetune.length_batches(lengths, 64)
    flat = [i for b in evaluation for i in b]
    assert sorted(flat) == list(range(1000)) and [lengths[i] for i in flat] == sorted(lengths)


def test_warmup_then_linear_decay():
    f = finetune.lr_lambda(total=100, warmup=6)
    assert f(0) == pytest.approx(1 / 6) and f(5) == 1.0 and f(6) == 1.0
    assert f(53) == pytest.approx(0.5) and f(100) == 0.0
    assert finetune.lr_lambda(10, 0)(0) == 1.0


def fast_sweep(ckpt: str, task: str, glue_dir: str, out, **recipe) -> dict:
    """Returns the summary of a one-point sweep (lr 1e-3) of ``task`` with the FAST recipe (+ ``recipe``)."""
    fast = glue.Recipe(**{**FAST, **recipe})
    return glue.sweep(
        ckpt,
        GlueConfig(
            tasks=[task], lrs=[1e-3], out_dir=str(out), glue_dir=glue_dir, recipe=fast, progress=False
        ),
    )


def test_tiny_masked_lm_learns_and_writes_the_sweep_layout(tiny_mlm_ckpt, glue_dir, tmp_path):
    out = tmp_path / "results"
    summary = fast_sweep(tiny_mlm_ckpt, "sst2", glue_dir, out)
    result = json.loads((out / "glue" / "sst2" / "lr=0.001" / "seed=0" / "result.json").read_text())
    assert result["metrics"]["accuracy"] >= 0.9  # chance is 0.5
    assert len(result["history"]) == 3 and result["epoch"] in (1, 2, 3)
    assert result["metrics"] == max((h["metrics"] for h in result["history"]), key=lambda m: m["accuracy"])
    assert result["train"]["padded_tokens"] < 1.3 * result["train"]["tokens"]  # dynamic padding + bucketing
    assert not (out / "glue" / "sst2" / "lr=0.001" / "seed=0" / "state.pt").exists()

    on_disk = json.loads((out / "glue.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    task = on_disk["tasks"]["sst2"]
    assert task["metric"] == "accuracy" and task["best_lr"] == 1e-3
    assert task["per_lr"]["0.001"] == {"accuracy": result["metrics"]["accuracy"], "seeds": 1}
    assert on_disk["glue_average"] == task["score"] == task["best"]["accuracy"]
    meta = on_disk["nfeval"]
    assert meta["model"]["fingerprint"] == checkpoint.load(tiny_mlm_ckpt).fingerprint
    recipe = meta["recipe"]["sst2"]
    assert recipe["batch_size"] == 16 and recipe["max_len"] == 128  # capped at the model's max_seq_len
    assert recipe["betas"] == [0.9, 0.98] and recipe["lrs"] == [1e-3] and recipe["seeds"] == 1
    assert recipe["dtype"] == "fp32" and "git_hash" in meta["provenance"]
    assert meta["data"]["sst2"]["sha256"].keys() == {"train", "dev"}


def test_causal_lm_pools_last_token_and_learns(tiny_clm_ckpt, glue_dir, tmp_path):
    # First-token pooling would sit at chance (0.5): in a causal model <s> sees nothing after it.
    summary = fast_sweep(tiny_clm_ckpt, "sst2", glue_dir, tmp_path, epochs=5)
    assert summary["tasks"]["sst2"]["best"]["accuracy"] >= 0.9


def test_ngpt_fine_tunes_on_the_hypersphere(tiny_tokenizer, glue_dir, tmp_path, monkeypatch):
    """An nGPT checkpoint's fine-tuning renormalises its weights after every update, as its training."""
    cfg = preset("ngpt-tiny", vocab_size=tiny_tokenizer.get_vocab_size(), max_seq_len=128)
    torch.manual_seed(0)
    checkpoint.save(str(tmp_path / "ngpt"), Transformer(cfg), tiny_tokenizer)
    built, build = [], finetune.build_classifier
    monkeypatch.setattr(finetune, "build_classifier", lambda *a: built.append(build(*a)) or built[-1])
    fast_sweep(str(tmp_path / "ngpt"), "sst2", glue_dir, tmp_path / "out", epochs=1)
    blocks = built[0].transformer.blocks
    for w, dim in ((blocks[0].fc1.weight, 1), (blocks[-1].fc2.weight, 0)):
        torch.testing.assert_close(w.norm(dim=dim), torch.ones(w.shape[1 - dim]))


def test_stsb_regression_learns_correlation(tiny_tokenizer, glue_dir, tmp_path):
    # A random-weight encoder under GPT-2's init (residual projections scaled down) learns this in 3
    # fast epochs; under the MLM recipe's (RoBERTa's unscaled N(0, 0.02)) it needs ~8 (measured Pearson
    # 0.38 at 3, 0.82 at 8), too slow here: the regression head, loss and metrics are what is tested.
    torch.manual_seed(0)
    vocab = tiny_tokenizer.get_vocab_size()
    cfg = preset("normformer-tiny", vocab_size=vocab, objective="mlm", max_seq_len=128, init="gpt2")
    checkpoint.save(str(tmp_path / "mlm"), Transformer(cfg), tiny_tokenizer)
    summary = fast_sweep(str(tmp_path / "mlm"), "stsb", glue_dir, tmp_path / "out")
    best = summary["tasks"]["stsb"]["best"]
    assert best["pearson"] > 0.5 and best["spearman"] > 0.5
    assert summary["tasks"]["stsb"]["score"] == pytest.approx((best["pearson"] + best["spearman"]) / 2)


def test_killed_sweep_resumes_without_redoing_points(tiny_mlm_ckpt, glue_dir, tmp_path, monkeypatch):
    out, lrs = tmp_path / "results", [3e-4, 1e-3, 3e-3]
    recipe = glue.Recipe(epochs=1, batch_size=32)
    real, calls = glue.run_point, []
    args = dict(out_dir=str(out), glue_dir=glue_dir, recipe=recipe, progress=False)

    def dies_after_two(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt  # the sweep is killed during its third point
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(glue, "run_point", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        glue.sweep(tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=lrs, **args))
    done = sorted(out.glob("glue/sst2/*/seed=0/result.json"))
    assert len(done) == 2 and not (out / "glue.json").exists()
    mtimes = {p: p.stat().st_mtime_ns for p in done}

    calls.clear()
    monkeypatch.setattr(glue, "run_point", lambda *a, **k: (calls.append(a[2]), real(*a, **k))[1])
    summary = glue.sweep(tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=lrs, **args))
    assert calls == [3e-3]  # only the unfinished point ran
    assert {p: p.stat().st_mtime_ns for p in done} == mtimes
    assert set(summary["tasks"]["sst2"]["per_lr"]) == {"0.0003", "0.001", "0.003"}

    calls.clear()
    glue.sweep(tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=lrs, **args))
    assert calls == []  # a rerun of a finished sweep trains nothing


def test_point_killed_mid_training_resumes_from_its_last_epoch(
    tiny_mlm_ckpt, glue_dir, tmp_path, monkeypatch
):
    recipe = glue.Recipe(epochs=2, batch_size=16)
    args = dict(out_dir=None, glue_dir=glue_dir, recipe=recipe, progress=False)
    whole = glue.sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=[1e-3], **{**args, "out_dir": str(tmp_path / "whole")})
    )

    real_save = finetune._save_state

    def save_then_die(path, state):
        real_save(path, state)
        raise KeyboardInterrupt  # killed right after its first epoch

    monkeypatch.setattr(finetune, "_save_state", save_then_die)
    point = tmp_path / "cut" / "glue" / "sst2" / "lr=0.001" / "seed=0"
    with pytest.raises(KeyboardInterrupt):
        glue.sweep(
            tiny_mlm_ckpt,
            GlueConfig(tasks=["sst2"], lrs=[1e-3], **{**args, "out_dir": str(tmp_path / "cut")}),
        )
    assert (point / "state.pt").exists() and not (point / "result.json").exists()
    monkeypatch.setattr(finetune, "_save_state", real_save)
    resumed = glue.sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=[1e-3], **{**args, "out_dir": str(tmp_path / "cut")})
    )
    assert not (point / "state.pt").exists()

    def trace(path):
        return [(h["epoch"], h["train_loss"], h["metrics"]) for h in json.loads(path.read_text())["history"]]

    assert trace(point / "result.json") == trace(
        tmp_path / "whole" / "glue" / "sst2" / "lr=0.001" / "seed=0" / "result.json"
    )
    assert resumed["tasks"] == whole["tasks"]


def test_rerun_with_another_recipe_is_refused(tiny_mlm_ckpt, glue_dir, tmp_path):
    def sweep(epochs: int) -> dict:
        recipe = glue.Recipe(epochs=epochs)
        kw = {"out_dir": str(tmp_path), "glue_dir": glue_dir, "recipe": recipe, "progress": False}
        return glue.sweep(tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=[1e-3], **kw))

    sweep(epochs=1)
    with pytest.raises(ValueError, match=r"seed=0/result\.json: written for a different recipe"):
        sweep(epochs=2)


def test_cli_bad_input_fails_before_training(tiny_mlm_ckpt, glue_dir, tmp_path, capsys):
    dev = os.path.join(glue_dir, "STS-B", "dev.tsv")
    with open(dev, "a") as f:
        f.write("bad\trow\n")
    out = tmp_path / "results"
    argv = ["glue", "--ckpt", tiny_mlm_ckpt, "--glue-dir", glue_dir, "--out", str(out), "--no-progress"]
    assert cli.main([*argv, "--tasks", "sst2,stsb"]) == 2
    err = capsys.readouterr().err
    assert "STS-B/dev.tsv:202: expected 10 tab-separated columns, got 2" in err
    assert not out.exists()  # nothing trained, not even the valid sst2 task
    assert cli.main([*argv, "--tasks", "sst2,wnli"]) == 2
    assert "unknown GLUE task 'wnli'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([*argv, "--tasks", "sst2", "--lrs", "fast"])


def test_cli_parallel_sweep_prints_table(tiny_mlm_ckpt, glue_dir, tmp_path, capsys):
    out = tmp_path / "results"
    argv = [
        "glue",
        "--ckpt",
        tiny_mlm_ckpt,
        "--glue-dir",
        glue_dir,
        "--out",
        str(out),
        "--tasks",
        "sst2",
        "--sweep",
        "--lrs",
        "1e-3,3e-3",
        "--epochs",
        "2",
        "--jobs",
        "2",
        "--no-progress",
    ]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "2 point(s), 0 already finished, 2 to run" in text and "GLUE average over 1 task(s)" in text
    summary = json.loads((out / "glue.json").read_text())
    assert summary["tasks"]["sst2"]["per_lr"].keys() == {"0.001", "0.003"}
    assert summary["nfeval"]["recipe"]["sst2"]["lrs"] == [1e-3, 3e-3]
    assert summary["nfeval"]["recipe"]["sst2"]["epochs"] == 2


def test_tasks_of_separate_invocations_share_one_summary(tiny_mlm_ckpt, tiny_clm_ckpt, glue_dir, tmp_path):
    args = dict(out_dir=str(tmp_path), glue_dir=glue_dir, progress=False)
    first = glue.sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=[1e-3], recipe=glue.Recipe(epochs=1), **args)
    )
    both = glue.sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["stsb"], lrs=[1e-3, 3e-3], recipe=glue.Recipe(epochs=2), **args)
    )
    assert list(both["tasks"]) == ["sst2", "stsb"] and both["tasks"]["sst2"] == first["tasks"]["sst2"]
    assert both["nfeval"]["recipe"]["sst2"]["epochs"] == 1 and both["nfeval"]["recipe"]["stsb"]["epochs"] == 2
    scores = [both["tasks"][t]["score"] for t in ("sst2", "stsb")]
    assert both["glue_average"] == pytest.approx(sum(scores) / 2)
    # Another checkpoint's summary in the same folder does not absorb the first one's tasks.
    other = glue.sweep(
        tiny_clm_ckpt, GlueConfig(tasks=["sst2"], lrs=[2e-3], recipe=glue.Recipe(epochs=1), **args)
    )
    assert list(other["tasks"]) == ["sst2"] and list(other["tasks"]["sst2"]["per_lr"]) == ["0.002"]
    assert "sst2" in format_table(both) and "GLUE average over 2 task(s)" in format_table(both)


def test_cli_glue_dir_embedded_reads_the_shipped_stsb_slice(tiny_mlm_ckpt, tmp_path, capsys):
    """``--glue-dir embedded``: the STS-B slice shipped in the package; --tasks defaults to it (issue 40)."""
    out = tmp_path / "results"
    argv = ["glue", "--ckpt", tiny_mlm_ckpt, "--glue-dir", "embedded", "--out", str(out), "--no-progress"]
    assert cli.main([*argv, "--lrs", "1e-3", "--epochs", "1", "--limit", "8"]) == 0
    summary = json.loads((out / "glue.json").read_text())
    assert list(summary["tasks"]) == ["stsb"]
    assert "GLUE average over 1 task(s)" in capsys.readouterr().out
