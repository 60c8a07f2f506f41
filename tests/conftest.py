"""Shared fixtures: a tiny tokenizer and tiny checkpoints built in the test, never downloaded."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.model.config import preset
from nfeval.engine.model.model import Transformer
from nfeval.engine.text.tokenization import train_bpe

WORDS = (
    "the a cat dog sat ran on under mat tree house river quickly slowly red blue green big small "
    "when then because and but or if it is was were will be question answer yes no good bad"
).split()


def make_text(n_sentences: int = 400, seed: int = 0) -> list[str]:
    """Returns simple English-like sentences, deterministic for a seed."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))).capitalize() + "."
        for _ in range(n_sentences)
    ]


def make_corpus(n_sentences: int, per_doc: int = 6, line_sep: str = "\n", seed: int = 0) -> str:
    """Returns a corpus file's text: ``make_text``'s sentences, ``per_doc`` to a document (its sentences
    joined by ``line_sep``), documents separated by a blank line."""
    sentences = make_text(n_sentences, seed)
    docs = (line_sep.join(sentences[i : i + per_doc]) for i in range(0, len(sentences), per_doc))
    return "\n\n".join(docs) + "\n"


@pytest.fixture
def small_corpus(tmp_path) -> str:
    """Returns the path of a 300-sentence corpus file of this test's own (``make_corpus``)."""
    path = tmp_path / "train.txt"
    path.write_text(make_corpus(300), encoding="utf-8")
    return str(path)


# A tiny NormFormer training run: the shared settings of the tests' TrainConfigs and `nfeval train` flags.
TINY_RUN = {
    "preset": "normformer-tiny",
    "vocab_size": 300,
    "batch_size": 2,
    "seq_len": 32,
    "max_steps": 8,
    "log_interval": 1,
    "eval_interval": 0,
    "eval_samples": 8,
    "peak_flops": 1e12,
}


def tiny_train_config(corpus: str, **changes):
    """Returns a TrainConfig for a tiny run on ``corpus`` (no checkpoints, no progress bar) with
    ``changes``."""
    from nfeval.engine.training.train_config import TrainConfig

    return TrainConfig(**{**TINY_RUN, "train_data": corpus, "ckpt_interval": 0, "progress": False, **changes})


def tiny_train_args(corpus: str, **flags) -> list[str]:
    """Returns ``nfeval train`` flags for a tiny run on ``corpus`` (no progress bar); ``flags``
    (``max_steps=300``) override or add to the defaults, ``None`` drops one."""
    given = {**TINY_RUN, "train_data": corpus, **flags}
    argv = [x for k, v in given.items() if v is not None for x in ("--" + k.replace("_", "-"), str(v))]
    return [*argv, "--no-progress"]


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Points nfeval's caches (token shards, tokenizers, zero-shot results, peak FLOPs) at a temp dir."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NFEVAL_CACHE", str(tmp_path_factory.mktemp("nfeval_cache")))
        yield


@pytest.fixture(autouse=True)
def hub_answers(monkeypatch):
    """The Hugging Face Hub probe (``base.hub``) touches no network in a test: the Hub "answers", and the
    tests that load from it replace ``datasets.load_dataset``; a test of the offline path patches it."""
    from nfeval.base import hub

    monkeypatch.setattr(hub, "reachable", lambda host, port: True)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, which also stays fast on a busy machine and keeps
    bitwise comparisons with one-thread subprocesses valid."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def ieee_denormals():
    """nfeval flushes denormals only in processes it owns (``engine.fast.denormals``); a test that turns
    flushing on in this one must turn it off again, or the tests after it would compute differently."""
    yield
    tiny = torch.full((1 << 20,), 1 << 20, dtype=torch.int32).view(torch.float32)  # 2^20 denormals
    survivors = int((tiny * 1.5).count_nonzero())  # a chunk per thread: a leak into any thread shows
    assert survivors == tiny.numel(), "the test left this process flushing denormals"


@contextlib.contextmanager
def flushed_denormals():
    """Runs the block on one thread flushing denormals, as a one-thread ``nfeval`` process computes."""
    assert torch.get_num_threads() == 1, "only this thread is switched"
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


ROOT = str(Path(__file__).resolve().parents[1])
HOLD = (
    "import sys, time; from nfeval.base import sweep_lock\n"
    "with getattr(sweep_lock, sys.argv[2])(sys.argv[1]): print('held', flush=True); time.sleep(120)"
)


@contextlib.contextmanager
def held_elsewhere(path, lock: str = "folder_lock"):
    """Another process holds ``path``'s lock (``sweep_lock.folder_lock`` of a folder, or ``file_lock`` of
    an output file) while the block runs; yields its pid."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), lock], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return train_bpe(make_text(), vocab_size=300)


def _save_tiny(path, tokenizer, arch: str, objective: str, seed: int = 0):
    torch.manual_seed(seed)
    cfg = preset(f"{arch}-tiny", vocab_size=tokenizer.get_vocab_size(), objective=objective, max_seq_len=128)
    model = Transformer(cfg)
    if cfg.scale_heads:  # non-trivial gains so folding and scaling are really exercised
        for block in model.blocks:
            block.attn.head_gain.data.uniform_(0.5, 1.5)
    checkpoint.save(
        str(path), model, tokenizer, meta={"compute": {"tokens": 1000, "flops": 1e9, "wall_s": 1.0}}
    )
    return str(path)


@pytest.fixture(scope="session")
def tiny_clm_ckpt(tmp_path_factory, tiny_tokenizer):
    """A random-weight NormFormer causal-LM checkpoint directory."""
    return _save_tiny(tmp_path_factory.mktemp("clm"), tiny_tokenizer, "normformer", "clm")


@pytest.fixture(scope="session")
def tiny_mlm_ckpt(tmp_path_factory, tiny_tokenizer):
    """A random-weight NormFormer masked-LM checkpoint directory."""
    return _save_tiny(tmp_path_factory.mktemp("mlm"), tiny_tokenizer, "normformer", "mlm")
