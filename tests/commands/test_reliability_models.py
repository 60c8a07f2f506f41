"""Reading models safely (issue 22 items 3, 5, 8): nfeval reads its own HF export natively, config sizes
are checked against the weights' header before anything is built, every weights file is written through
the one atomic writer with the umask's permissions."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
import torch
from test_reliability import edit_config, run_cli
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval import cli
from nfeval.base import artifacts
from nfeval.base.errors import CheckpointError, OutputError
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.interop.hf_export import export_hf
from nfeval.model_adapters.config import ScoringConfig
from nfeval.zeroshot.config import ZeroShotConfig


@pytest.fixture(scope="module")
def exported(tiny_clm_ckpt, tmp_path_factory):
    """The tiny NormFormer checkpoint exported by export-hf (remote-code format)."""
    out = tmp_path_factory.mktemp("export") / "hf"
    assert export_hf(tiny_clm_ckpt, str(out))["format"] == "nfeval"
    return str(out)


def no_remote_code(monkeypatch):
    import transformers

    def refuse(*_a, **_k):
        pytest.fail("transformers was asked to load the model")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def test_own_export_loads_natively_with_the_same_weights(tiny_clm_ckpt, exported, monkeypatch):
    no_remote_code(monkeypatch)
    ours, back = checkpoint.load(tiny_clm_ckpt), checkpoint.load(exported)
    assert back.fingerprint == ours.fingerprint and back.config == ours.config
    assert (
        back.meta["source"] == "export-hf" and back.meta["exported_from"]["fingerprint"] == ours.fingerprint
    )
    idx = torch.randint(0, ours.config.vocab_size, (1, 12))
    assert torch.equal(back.model(idx), ours.model(idx))


def test_zeroshot_generate_info_on_own_export(tiny_clm_ckpt, exported, tmp_path, monkeypatch, capsys):
    from nfeval.zeroshot import evaluate as zeroshot

    no_remote_code(monkeypatch)
    write_jsonl(tmp_path / "data" / "piqa" / "validation.jsonl", DOCS["piqa"])
    cfg = ZeroShotConfig(
        tasks=["piqa"], data_dir=str(tmp_path / "data"), use_cache=False, scoring=ScoringConfig(device="cpu")
    )
    assert zeroshot.evaluate(exported, cfg)["results"] == zeroshot.evaluate(tiny_clm_ckpt, cfg)["results"]
    printed = []
    for ckpt in (tiny_clm_ckpt, exported):
        capsys.readouterr()
        argv = ["generate", "--ckpt", ckpt, "--prompt", "The cat", "--max-new-tokens", "4"]
        assert cli.main(argv) == 0
        printed.append(capsys.readouterr().out.splitlines()[0])  # the text, not the timing line
    assert printed[0] == printed[1]
    assert cli.main(["info", exported, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (
        info["architecture"] == "normformer"
        and info["fingerprint"] == checkpoint.load(tiny_clm_ckpt).fingerprint
    )


def test_info_on_a_foreign_hf_folder_names_the_format(tmp_path):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    checkpoint.save_weights(str(folder / "model.safetensors"), {"x": torch.zeros(1)}, {"format": "pt"})
    for argv in (["info", str(folder)], ["analyze", "grads", "--ckpt", str(folder)]):
        code, err = run_cli(*argv)
        assert code == 2 and "a Hugging Face model folder (model_type 'gpt2')" in err, (argv, err)
        assert "missing object field 'model'" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "field, value",
    [("n_layer", 1_000_000), ("d_model", 4_000_000), ("vocab_size", 2_000_000_000), ("d_ffn", 10**9)],
)
def test_config_sizes_disagreeing_with_the_weights_are_refused_before_building(
    tiny_clm_ckpt, tmp_path, monkeypatch, field, value
):
    import nfeval.engine.model.model as model

    bad = shutil.copytree(tiny_clm_ckpt, tmp_path / "bad")
    edit_config(bad, **{field: value})
    built = []
    monkeypatch.setattr(
        model.Transformer, "__init__", lambda *a, **k: built.append(1) or pytest.fail("built")
    )
    with pytest.raises(CheckpointError, match=f"config.json: {field}={value}.* disagrees with the weights"):
        checkpoint.load(str(bad))
    for argv in (["info", str(bad)], ["zeroshot", "--ckpt", str(bad), "--tasks", "piqa"]):
        code, err = run_cli(*argv)
        assert code == 2 and f"{field}={value}" in err and err.count("\n") == 1, (argv, err)
    assert not built


def umask_022(fn):
    old = os.umask(0o022)
    try:
        return fn()
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_weights_of_checkpoints_and_exports_follow_the_umask(tiny_clm_ckpt, tmp_path):
    ckpt = checkpoint.load(tiny_clm_ckpt)
    umask_022(lambda: checkpoint.save(str(tmp_path / "ck"), ckpt.model, ckpt.tokenizer))
    umask_022(lambda: export_hf(tiny_clm_ckpt, str(tmp_path / "hf")))
    for path in (tmp_path / "ck" / "model.safetensors", tmp_path / "hf" / "model.safetensors"):
        assert mode(path) == 0o644, path
    assert not [p for p in (tmp_path / "ck").iterdir() if p.name.startswith(".tmp")]


def test_plain_gpt2_export_weights_follow_the_umask(tmp_path, tiny_tokenizer):
    from test_export_hf import save_model

    src = save_model(tmp_path / "src", tiny_tokenizer, "prenorm")
    summary = umask_022(lambda: export_hf(src, str(tmp_path / "hf")))
    assert summary["format"] == "gpt2" and mode(tmp_path / "hf" / "model.safetensors") == 0o644


def test_the_atomic_writer_names_the_path_and_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    artifacts.atomic_write_json(str(target), {"old": 1})

    def disk_full(tmp):
        open(tmp, "wb").write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match=f"{target}: cannot write \\(No space left on device\\)"):
        artifacts.atomic_write_with(str(target), disk_full)
    assert json.loads(target.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temp file left behind
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match=f"{blocker}/out.json: cannot write"):
        artifacts.atomic_write_text(str(blocker / "out.json"), "x")


def test_resume_removes_the_temp_files_a_kill_at_start_left(tmp_path):
    from conftest import make_corpus, tiny_train_args

    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(300))
    run = tmp_path / "run"
    run.mkdir()
    for name in (".tmp-k3j2config.json", ".tmp-model.safetensors", ".tmp-x9tokenizer.json"):
        (run / name).write_bytes(b"half-written")
    code, err = run_cli("train", "--out", str(run), "--resume", *tiny_train_args(str(corpus), max_steps=2))
    assert code == 0, err
    assert not [p for p in run.rglob(".tmp*")] and (run / "complete.json").is_file()


def test_disk_full_at_the_final_save_is_one_line_and_resume_finishes(tmp_path, monkeypatch):
    import errno

    from conftest import make_corpus, tiny_train_args

    corpus = tmp_path / "train.txt"
    corpus.write_text(make_corpus(300))
    run = tmp_path / "run"
    argv = ["train", "--out", str(run), *tiny_train_args(str(corpus), max_steps=2)]
    real = checkpoint.save_file

    def disk_full(state, path, metadata=None):
        open(path, "wb").write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "save_file", disk_full)
    code, err = run_cli(*argv)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{run / 'model.safetensors'}: cannot write (No space left on device)" in err
    monkeypatch.setattr(checkpoint, "save_file", real)  # space freed
    code, err = run_cli(*argv, "--resume")
    assert code == 0, err
    assert (run / "complete.json").is_file() and not [p for p in run.rglob(".tmp*")]
