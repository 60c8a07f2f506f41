"""Reliability and security: one error contract, no unpickling without consent, typed config checks,
checkpoint integrity, the umask, and concurrent GLUE sweeps (issues 10 and 11)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys

import pytest
import torch
from test_fairseq_import import fairseq_config, to_fairseq
from test_zeroshot_tasks import DOCS, write_jsonl

from nfeval import cli
from nfeval.base import artifacts
from nfeval.base.errors import CheckpointError, ConfigError, DataError, MissingDataError, UserError
from nfeval.base.fingerprint import fingerprint_model
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.model.config import ModelConfig, preset
from nfeval.engine.model.model import Transformer
from nfeval.model_adapters.config import ScoringConfig
from nfeval.zeroshot.config import ZeroShotConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(*argv: str) -> tuple[int, str]:
    """Returns (exit status, stderr) of ``nfeval ARGV`` run in this process (argparse's errors leave
    through SystemExit, as the executable's exit status)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(list(argv))
        except SystemExit as e:
            code = e.code
    return code, err.getvalue()


@pytest.fixture
def ckpt(tiny_clm_ckpt, tmp_path):
    """A private copy of the tiny checkpoint, safe to damage."""
    return shutil.copytree(tiny_clm_ckpt, tmp_path / "ckpt")


def edit_config(directory, **model_changes) -> None:
    path = os.path.join(directory, "config.json")
    data = json.load(open(path, encoding="utf-8"))
    for k, v in model_changes.items():
        if v is ...:
            del data["model"][k]
        else:
            data["model"][k] = v
    open(path, "w", encoding="utf-8").write(json.dumps(data))


# --- 1. one error contract --------------------------------------------------------------------------


def test_error_kinds_subclass_the_builtins():
    assert issubclass(ConfigError, ValueError) and issubclass(DataError, ValueError)
    assert issubclass(MissingDataError, FileNotFoundError) and issubclass(CheckpointError, UserError)
    import nfeval.tasks.loaders as loaders

    assert loaders.DataError is DataError and issubclass(loaders.MissingData, UserError)


def test_internal_error_shows_traceback_user_error_one_line(tmp_path, monkeypatch):
    import nfeval.commands.info as info

    def bug(*_a, **_k):
        raise ValueError("an internal bug")

    monkeypatch.setattr(info, "describe", bug)
    with pytest.raises(ValueError, match="an internal bug"):  # not swallowed into exit 2
        cli.main(["info", "normformer-tiny"])
    monkeypatch.undo()
    code, err = run_cli("info", str(tmp_path / "nowhere"))
    assert code == 2 and err.count("\n") == 1 and err.startswith("nfeval info: error: ")
    monkeypatch.setenv("NFEVAL_TRACEBACK", "1")
    with pytest.raises(MissingDataError):
        cli.main(["info", str(tmp_path / "nowhere")])


def test_cli_process_internal_error_traceback_bad_input_one_line_exit_2(tmp_path):
    """The real process, as a user sees it: a bug prints its traceback (exit 1); bad input prints one line
    naming the problem (exit 2) and no traceback."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "NFEVAL_TRACEBACK": ""}
    bug = (
        "import sys, nfeval.commands.info as info\n"
        "def describe(*a, **k):\n    raise ValueError('an internal bug')\n"
        "info.describe = describe\n"
        "from nfeval.cli import main\n"
        "sys.exit(main(['info', 'normformer-tiny']))\n"
    )
    internal = subprocess.run([sys.executable, "-c", bug], env=env, capture_output=True, text=True)
    assert internal.returncode == 1
    assert "Traceback (most recent call last)" in internal.stderr
    assert internal.stderr.rstrip().endswith("ValueError: an internal bug")

    missing = str(tmp_path / "nowhere")
    bad = subprocess.run(
        [sys.executable, "-m", "nfeval", "info", missing], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("nfeval info: error: ")
    assert missing in bad.stderr


def test_corrupt_json_same_class_and_shape_everywhere(ckpt, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"max_steps": 1,\n  oops}', encoding="utf-8")
    code, err = run_cli("train", "--out", str(tmp_path / "r"), "--config", str(bad))
    assert code == 2 and f"{bad}: invalid JSON at line 2" in err
    open(os.path.join(ckpt, "config.json"), "w").write('{"model": \n\n[')
    code, err = run_cli("info", str(ckpt))
    assert code == 2 and f"{ckpt}/config.json: invalid JSON at line 3" in err


def test_unreachable_hub_dataset_same_message_in_every_command(monkeypatch):
    import datasets

    from nfeval.engine.text.data import load_hf_corpus
    from nfeval.glue import data as glue_data

    def offline(*_a, **_k):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    errors = []
    for load in (lambda: load_hf_corpus("some/corpus"), lambda: glue_data.load("rte", None)):
        with pytest.raises(MissingDataError) as e:
            load()
        errors.append(str(e.value))
    assert all(
        "could not load the dataset from the Hugging Face Hub (ConnectionError: offline)" in m for m in errors
    )


# --- 2. no unpickling without consent ---------------------------------------------------------------


class Evil:
    """Unpickling this runs a shell command that creates the marker file."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    model = Transformer(preset("normformer-tiny")).eval()
    evil_zip, evil_legacy = tmp_path / "evil.pt", tmp_path / "evil_legacy.pt"
    torch.save({"model": to_fairseq(model), "extra": Evil(str(marker))}, evil_zip)
    with open(evil_legacy, "wb") as f:
        pickle.dump({"model": {}, "extra": Evil(str(marker))}, f, protocol=2)
    for path in (evil_zip, evil_legacy):
        code, err = run_cli("info", str(path))
        assert code == 2 and str(path) in err and "--trust-checkpoint" in err and "Traceback" not in err
        assert not marker.exists()
    assert "system" in run_cli("info", str(evil_zip))[1]  # names what it refused
    # --trust-checkpoint is the explicit opt-in: the pickle then runs (that is what trust means)
    run_cli("info", str(evil_zip), "--trust-checkpoint")
    assert marker.exists()


def test_fairseq_namespace_checkpoint_loads_without_flag(tmp_path):
    import argparse

    model = Transformer(preset("normformer-tiny")).eval()
    path = tmp_path / "model.pt"
    args = argparse.Namespace(**fairseq_config(model.cfg))
    torch.save({"model": to_fairseq(model), "args": args, "cfg": None}, path)
    loaded = checkpoint.load(str(path))
    assert loaded.fingerprint == fingerprint_model(model)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"hello, I am a text file\n", "a text file, not a torch checkpoint"),
        (b'{"model": 1}', "a JSON file"),
        (b"", "an empty file"),
        (b"PK\x03\x04truncated", "truncated or corrupt torch checkpoint"),
    ],
)
def test_non_checkpoint_files_are_rejected_by_header(tmp_path, content, message):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    code, err = run_cli("info", str(path))
    assert code == 2 and f"{path}: {message}" in err and "Traceback" not in err


def test_safetensors_file_passed_as_file(ckpt):
    code, err = run_cli("info", os.path.join(ckpt, "model.safetensors"))
    assert code == 2 and "a safetensors file: pass the folder" in err


# --- 3. tracebacks -> messages: the CLI matrix over the probes --------------------------------


def _probe_cases(ckpt, tmp_path):
    """Yields (argv, text the one-line error must contain) for each probe of issue 10 item 3."""
    trunc = shutil.copytree(ckpt, tmp_path / "trunc")
    weights = trunc / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    yield ["zeroshot", "--ckpt", str(trunc), "--tasks", "piqa"], f"{weights}: truncated or corrupt"
    probes = [
        ("n_head", "four", "n_head='four'"),
        ("n_layer", "2", "n_layer='2'"),
        ("dropout", None, "dropout=None"),
        ("d_model", ..., "['d_model']"),
    ]
    for field, value, shown in probes:
        bad = shutil.copytree(ckpt, tmp_path / f"bad_{field}")
        edit_config(bad, **{field: value})
        yield ["info", str(bad)], shown
        yield ["zeroshot", "--ckpt", str(bad), "--tasks", "piqa"], shown
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"max_steps": "ten"}), encoding="utf-8")
    out = str(tmp_path / "run")
    yield ["train", "--out", out, "--config", str(cfg)], f"{cfg}: max_steps='ten': expected an integer"
    yield ["train", "--out", out, "--max-steps", "1", "--set", "d_model=abc"], "--set d_model=abc"
    yield (
        ["train", "--out", out, "--max-steps", "1", "--beta2", "2"],
        "flag --beta2: beta2=2.0: expected a number in [0, 1)",
    )
    yield (
        ["train", "--out", out, "--max-steps", "1", "--vocab-size", "5"],
        "vocab_size=5: expected at least 261",
    )
    yield (
        ["zeroshot", "--ckpt", str(ckpt), "--batch-size", "0"],
        "argument --batch-size: expected a positive integer or auto, got '0'",
    )
    yield from _probe_cases_round_two(ckpt, tmp_path)


def _probe_cases_round_two(ckpt, tmp_path):
    """Yields the smaller probes of issue 22 item 9: non-finite sampling, a non-UTF-8 prompts file,
    duplicate group names, empty selections."""
    for value in ("nan", "inf", "-inf"):
        argv = ["generate", "--ckpt", str(ckpt), "--prompt", "x", f"--temperature={value}"]
        yield argv, "expected a finite number >= 0"
    latin1 = tmp_path / "prompts.txt"
    latin1.write_bytes("Caf\xe9 au lait\n".encode("latin-1"))
    yield (
        ["generate", "--ckpt", str(ckpt), "--prompts", str(latin1)],
        f"{latin1}: not UTF-8 text (byte 3 is 0xe9)",
    )
    runs = [shutil.copytree(ckpt, tmp_path / f"group_{i}") for i in range(2)]
    argv = ["compare", "--group", f"a={runs[0]}", "--group", f"a={runs[1]}"]
    yield argv, "group name 'a' given twice"
    yield ["zeroshot", "--ckpt", str(ckpt), "--tasks", ""], "--tasks '': empty selection"
    yield ["zeroshot", "--ckpt", str(ckpt), "--tasks", ",", " "], "empty selection"
    yield ["reproduce", "--only", "", "--out", str(tmp_path / "rep")], "--only '': empty selection"
    yield ["reproduce", "--only", " , ", "--out", str(tmp_path / "rep")], "empty selection"


def test_cli_probe_matrix(ckpt, tmp_path, monkeypatch):
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    for argv, expected in _probe_cases(ckpt, tmp_path):
        code, err = run_cli(*argv)
        assert code == 2, (argv, err)
        assert "Traceback" not in err and err.count("\n") == 1, (argv, err)
        assert expected in err, (argv, err)


def test_batch_size_zero_fails_before_loading_the_model(ckpt, monkeypatch):
    from nfeval.engine.checkpoints import loading

    monkeypatch.setattr(loading, "identify", lambda *a, **k: pytest.fail("model was read"))
    code, err = run_cli("zeroshot", "--ckpt", str(ckpt), "--batch-size", "0")
    assert code == 2 and "argument --batch-size: expected a positive integer" in err


@pytest.mark.parametrize(
    "damaged, content",
    [
        ("entry", "{not json"),
        ("entry", '{"results": 5}'),
        ("entry", "[]"),
        ("entry", '{"results": {"piqa": {}}, "extra": {"piqa": 1}}'),
        ("items", '{"x": 1}'),
        ("items", '{"doc_id": [0], "doc_hash": ["h"], "metrics": {"acc,none": {"value": [1, 0]}}}'),
    ],
)
def test_damaged_zeroshot_cache_is_named_and_recomputed(
    tiny_clm_ckpt, tmp_path, monkeypatch, damaged, content
):
    from nfeval.zeroshot import cache, items
    from nfeval.zeroshot import evaluate as zeroshot

    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    write_jsonl(tmp_path / "data" / "piqa" / "validation.jsonl", DOCS["piqa"])
    cfg = ZeroShotConfig(tasks=["piqa"], data_dir=str(tmp_path / "data"), scoring=ScoringConfig(device="cpu"))
    first = zeroshot.evaluate(tiny_clm_ckpt, cfg)
    (entry,) = [
        p for p in (tmp_path / "cache" / "zeroshot").glob("*.json") if not p.name.endswith(".items.json")
    ]
    target = entry if damaged == "entry" else entry.with_name(entry.stem + ".items.json")
    target.write_text(content, encoding="utf-8")
    logged = []
    output = tmp_path / "F.json"
    again = zeroshot.evaluate(tiny_clm_ckpt, dataclasses.replace(cfg, output=str(output)), log=logged.append)
    assert any(str(target) in m and "recomputing" in m for m in logged), logged
    assert again["results"] == first["results"]
    rewritten = json.loads(entry.read_text())
    cache.check_entry(rewritten, str(entry), next(iter(rewritten["results"])))  # both rewritten whole
    items.check_record(json.loads(entry.with_name(entry.stem + ".items.json").read_text()), "items", "")
    # a valid F.items.json for compare-scores, keyed by the task that ran (as stock lm-eval keys it)
    assert set(items.read_sidecar(str(output))) == {"piqa_local"}


def test_model_config_from_dict_validates_types():
    base = dict(vocab_size=64, n_layer=1, d_model=16, n_head=2, d_ffn=32)
    assert ModelConfig.from_dict({**base, "dropout": 0}).dropout == 0.0  # an int where a float is: fine
    with pytest.raises(ConfigError, match=r"src: norm_position='middle': expected one of \['pre', 'post',"):
        ModelConfig.from_dict({**base, "norm_position": "middle"}, source="src")
    with pytest.raises(ConfigError, match="scale_attn=1: expected true or false"):
        ModelConfig.from_dict({**base, "scale_attn": 1})


# --- 4. README paths ------------------------------------------------------------------------------------


def test_local_task_without_data_dir_names_the_lm_eval_way():
    from nfeval.tasks.loaders import MissingData, data_root

    with pytest.raises(MissingData, match=r"""--metadata '\{"data_dir": "DIR"\}'"""):
        data_root(None)


def test_lm_eval_data_dir_reaches_the_task_metadata_unless_that_names_one():
    from nfeval.commands.lm_eval import with_data_dir

    assert with_data_dir(None, "data") == {"data_dir": os.path.abspath("data")}
    assert with_data_dir({"data_dir": "mine", "x": 1}, "data") == {"data_dir": "mine", "x": 1}
    assert with_data_dir({"x": 1}, None) == {"x": 1}


def test_zeroshot_scores_a_fairseq_file(tiny_clm_ckpt, tmp_path, monkeypatch):
    from nfeval.zeroshot import evaluate as zeroshot

    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "cache"))
    ours = checkpoint.load(tiny_clm_ckpt)
    fs_dir = tmp_path / "fairseq"
    fs_dir.mkdir()
    cfg = ours.config
    fs_cfg = {"model": fairseq_config(cfg)}
    torch.save({"model": to_fairseq(ours.model), "args": None, "cfg": fs_cfg}, fs_dir / "model.pt")
    shutil.copy(os.path.join(tiny_clm_ckpt, "tokenizer.json"), fs_dir / "tokenizer.json")
    write_jsonl(tmp_path / "data" / "piqa" / "validation.jsonl", DOCS["piqa"])
    zs = ZeroShotConfig(
        tasks=["piqa"], data_dir=str(tmp_path / "data"), use_cache=False, scoring=ScoringConfig(device="cpu")
    )
    via_fairseq = zeroshot.evaluate(str(fs_dir / "model.pt"), zs)
    direct = zeroshot.evaluate(tiny_clm_ckpt, zs)
    trusted = zeroshot.evaluate(str(fs_dir / "model.pt"), dataclasses.replace(zs, trust_checkpoint=True))
    assert via_fairseq["results"] == direct["results"] == trusted["results"]


# --- 5. checkpoint integrity ------------------------------------------------------------------------------


def test_flipped_weight_bytes_fail_the_fingerprint(ckpt):
    weights = ckpt / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # same size, still a valid safetensors file
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: fingerprint mismatch"):
        checkpoint.load(str(ckpt))
    code, err = run_cli("zeroshot", "--ckpt", str(ckpt), "--tasks", "piqa")
    assert code == 2 and "fingerprint mismatch" in err
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["info", str(ckpt)]) == 0
    assert "fingerprint mismatch" in out.getvalue()


def test_tiny_vocab_size_fails_instead_of_training_261_tokens():
    from nfeval.engine.text.tokenization import train_bpe

    with pytest.raises(ConfigError, match="vocab_size=5: expected at least 261"):
        train_bpe(["some text"], 5)


# --- 6. umask, GLUE point locks, worker devices -----------------------------------------------------------


def test_atomic_writes_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        artifacts.atomic_write_text(str(tmp_path / "a.txt"), "x")
        os.umask(0o077)
        artifacts.atomic_write_text(str(tmp_path / "b.txt"), "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "b.txt").st_mode) == 0o600


def test_point_lock_is_exclusive_and_dies_with_its_process(tmp_path):
    from nfeval.base.sweep_lock import point_lock
    from nfeval.glue.points import claim_and_run

    d = str(tmp_path / "point")
    with point_lock(d) as held:
        assert held
        assert claim_and_run(d, {}, wait=False, run=lambda: pytest.fail("ran a held point")) is None
    code = (
        "import sys, time; from nfeval.base.sweep_lock import point_lock\n"
        "with point_lock(sys.argv[1]) as held: print(held, flush=True); time.sleep(60)"
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    holder = subprocess.Popen([sys.executable, "-c", code, d], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "True"
        with point_lock(d) as held:
            assert not held  # another live process computes this point
    finally:
        holder.kill()  # kill -9: no cleanup runs, yet the lock is free
        holder.wait()
    assert claim_and_run(d, {}, wait=False, run=lambda: {"ran": True}) == {"ran": True}


def test_summary_covers_points_other_sweeps_finished(tiny_mlm_ckpt, tmp_path):
    from test_glue import write_cat_tasks

    from nfeval.glue.config import GlueConfig
    from nfeval.glue.sweep import Recipe, sweep

    glue_dir = write_cat_tasks(tmp_path / "glue_data", n_train=16, n_dev=8)
    kw = dict(
        out_dir=str(tmp_path / "out"),
        glue_dir=glue_dir,
        recipe=Recipe(epochs=1, max_len=32),
        device="cpu",
        progress=False,
    )
    sweep(tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=[1e-3], **kw))
    second = sweep(
        tiny_mlm_ckpt, GlueConfig(tasks=["sst2"], lrs=[2e-3], **kw)
    )  # another grid into the same folder
    assert set(second["tasks"]["sst2"]["per_lr"]) == {"0.001", "0.002"}


def test_a_pool_worker_binds_its_device_and_thread_share(monkeypatch):
    import queue
    import signal

    from tqdm import tqdm

    from nfeval.engine.fast import denormals
    from nfeval.launch import local

    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: chosen.append(str(d)))
    monkeypatch.setattr(tqdm, "_lock", tqdm.get_lock())  # a worker's bars lock, not this process's
    old, ctrl_c = torch.get_num_threads(), signal.getsignal(signal.SIGINT)
    can_flush = torch.set_flush_denormal(False)  # x86 with DAZ: a worker flushes denormals
    try:
        for device in ("cuda:1", "cpu"):
            devices = queue.Queue()
            devices.put(device)
            local.init_worker(devices, 1)  # GLUE's, tune's and the pipelines' pools
            assert local.worker_device() == device and torch.get_num_threads() == 1
            assert denormals.flushing() == can_flush
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # Ctrl-C is the parent's
    finally:
        torch.set_flush_denormal(False)  # a worker's arithmetic, not this test process's
        torch.set_num_threads(old)
        signal.signal(signal.SIGINT, ctrl_c)
        local._DEVICE.clear()
    assert chosen == ["cuda:1"]  # only a CUDA worker selects a GPU


def test_compare_scores_with_nothing_to_pair_is_refused(tmp_path, capsys):
    from test_paired import write_zeroshot

    a = write_zeroshot(tmp_path, "a", [1, 0, 1, 1])
    b = write_zeroshot(tmp_path, "b", [1, 1, 0, 1])
    for path in (b, b.replace(".json", ".items.json")):  # b scored another metric than a
        text = open(path, encoding="utf-8").read().replace('"acc,none"', '"acc_norm,none"')
        open(path, "w", encoding="utf-8").write(text)
    assert cli.main(["compare-scores", a, b]) == 2
    err = capsys.readouterr().err
    assert "nothing to pair" in err and a in err and err.count("\n") == 1


def test_lm_eval_unknown_task_is_one_line_exit_2(tmp_path):
    env = {**os.environ, "NFEVAL_TRACEBACK": ""}
    argv = [sys.executable, "-m", "nfeval", "lm-eval", "--model", "nfeval", "--model_args"]
    argv += [f"pretrained={tmp_path}", "--tasks", "typo_task"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("nfeval lm-eval: error: --tasks: Tasks not found: typo_task")


@pytest.mark.parametrize("fails", [False, True])
def test_every_command_leaves_the_process_group_it_joined(tiny_clm_ckpt, tmp_path, fails):
    """A gloo process left joined at interpreter exit can abort (pytorch/pytorch#190489): that is how
    a torchrun zero-shot rank died in CI. The command line destroys the groups whether it succeeds or
    fails."""
    import torch.distributed as dist

    from nfeval.engine.training import parallel

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    parallel.join_process_group(torch.device("cpu"))
    assert parallel._host_group is not None
    target = str(tmp_path / "missing.pt") if fails else tiny_clm_ckpt
    try:
        assert cli.main(["info", target, "--json"]) == (2 if fails else 0)
        assert not dist.is_initialized() and parallel._host_group is None
    finally:
        parallel.leave_process_group()
