"""The nfeval lm-eval adapter: same scores as lm-eval's HFLM on a HF model; folding changes nothing."""

from __future__ import annotations

import pytest
import torch
from conftest import make_text
from lm_eval.api.instance import Instance

from nfeval.engine.checkpoints.loading import identify
from nfeval.engine.text.tokenization import train_bpe
from nfeval.model_adapters import NFEvalLM, TokenLogLik
from nfeval.model_adapters.config import ScoringConfig


def build_hf_gpt2(path, seed: int = 0, n_positions: int = 64) -> str:
    """Saves a tiny random GPT2LMHeadModel (a context window of ``n_positions`` tokens) with a locally
    trained BPE tokenizer to ``path``."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = train_bpe(make_text(300, seed=1), vocab_size=280)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=tok.get_vocab_size(),
        n_positions=n_positions,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=2,
    )
    GPT2LMHeadModel(cfg).save_pretrained(str(path))
    hf_tok.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return build_hf_gpt2(tmp_path_factory.mktemp("hf_gpt2"))


def requests_for(pairs):
    return [
        Instance("loglikelihood", doc={}, arguments=p, idx=i, metadata=("t", i, 1))
        for i, p in enumerate(pairs)
    ]


PAIRS = [
    ("The cat sat on the", " mat."),
    ("The cat sat on the ", "mat."),  # trailing space moves into the continuation
    ("", "A dog ran under the tree."),  # empty context: prefix token as context
    ("Question: is the river big?\nAnswer:", " yes"),
    (
        "When the dog ran quickly and the cat sat slowly on a small red mat then",
        " it was good because the answer is no.",
    ),
    ("a", " b"),
]


def greedy_continuation(lm_model, context_ids, n):
    """Returns the n tokens the model itself picks greedily after ``context_ids``."""
    ids = list(context_ids)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(lm_model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(context_ids) :]


FORWARDS = {"engine": "nfeval engine (GPT-2 weights)", "transformers": "transformers"}


@pytest.mark.parametrize("hf_forward", FORWARDS)
def test_hf_model_scores_equal_hflm(hf_dir, hf_forward):
    from lm_eval.models.huggingface import HFLM

    ref = HFLM(pretrained=hf_dir, device="cpu", batch_size=3, dtype="float32")
    ours = NFEvalLM(
        hf_dir,
        ScoringConfig(device="cpu", batch_size=4, dtype="float32", progress=False, hf_forward=hf_forward),
    )
    assert ours.model_backend.forward_by == FORWARDS[hf_forward]
    assert (ours.eot_token_id, ours.prefix_token_id, ours.max_length) == (
        ref.eot_token_id, ref.prefix_token_id, ref.max_length
    )  # fmt: skip
    want = ref.loglikelihood(requests_for(PAIRS), disable_tqdm=True)
    got = ours.loglikelihood(requests_for(PAIRS), disable_tqdm=True)
    for (ll_ref, g_ref), (ll, g) in zip(want, got):
        assert abs(ll_ref - ll) <= 1e-4
        assert g_ref == g
    assert all(isinstance(ll, TokenLogLik) and ll.n_tokens >= 1 for ll, _ in got)

    # token-level requests whose continuations are greedy, so the greedy flag is really compared
    ctx = ref.tok_encode("The dog sat on the")
    token_reqs = [
        (("", ""), ctx, greedy_continuation(ref.model, ctx, 3)),
        (("", ""), ctx, [5, 6, 7]),
        (("", ""), ctx[:2], greedy_continuation(ref.model, ctx[:2], 1)),
    ]
    want = ref._loglikelihood_tokens(token_reqs, disable_tqdm=True)
    got = ours._loglikelihood_tokens(token_reqs, disable_tqdm=True)
    assert [g for _, g in want] == [True, False, True] == [g for _, g in got]
    assert max(abs(a - b) for (a, _), (b, _) in zip(want, got)) <= 1e-4


@pytest.mark.parametrize("hf_forward", FORWARDS)
def test_hf_rolling_loglikelihood_equals_hflm(hf_dir, hf_forward):
    from lm_eval.models.huggingface import HFLM

    ref = HFLM(pretrained=hf_dir, device="cpu", batch_size=2, dtype="float32", max_length=16)
    scoring = ScoringConfig(device="cpu", batch_size=2, max_length=16, progress=False, hf_forward=hf_forward)
    ours = NFEvalLM(hf_dir, scoring)
    assert ours.model_backend.forward_by == FORWARDS[hf_forward]
    text = " ".join(make_text(6, seed=3))  # longer than 16 tokens: several windows
    reqs = [Instance("loglikelihood_rolling", doc={}, arguments=(text,), idx=0, metadata=("t", 0, 1))]
    assert (
        abs(
            ref.loglikelihood_rolling(reqs, disable_tqdm=True)[0]
            - ours.loglikelihood_rolling(reqs, disable_tqdm=True)[0]
        )
        <= 1e-3
    )


def test_nfeval_checkpoint_prefixes_eos_and_fold_is_exact(tiny_clm_ckpt):
    folded = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", progress=False))
    unfolded = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", fold_head_scale=False, progress=False))
    assert (
        folded.model_backend.model.cfg.scale_heads is False
        and unfolded.model_backend.model.cfg.scale_heads is True
    )
    ids = folded.tok_encode("The cat sat.")
    assert ids[0] == folded.prefix_token_id == 2  # fairseq: </s> starts every scored text
    a = folded.loglikelihood(requests_for(PAIRS), disable_tqdm=True)
    b = unfolded.loglikelihood(requests_for(PAIRS), disable_tqdm=True)
    assert max(abs(x - y) for (x, _), (y, _) in zip(a, b)) <= 1e-4


def test_scores_do_not_depend_on_batching(tiny_clm_ckpt):
    one = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", batch_size=1, progress=False))
    many = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", batch_size=64, progress=False))
    a = one.loglikelihood(requests_for(PAIRS), disable_tqdm=True)
    b = many.loglikelihood(requests_for(PAIRS), disable_tqdm=True)
    assert max(abs(x - y) for (x, _), (y, _) in zip(a, b)) <= 1e-4


def test_generate_until_stops_at_stop_sequence(tiny_clm_ckpt):
    lm = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", progress=False))
    req = Instance(
        "generate_until",
        doc={},
        arguments=("The cat", {"until": ["."], "max_gen_toks": 5}),
        idx=0,
        metadata=("t", 0, 1),
    )
    (text,) = lm.generate_until([req], disable_tqdm=True)
    assert isinstance(text, str) and "." not in text


def test_identify_fingerprints_without_loading(tiny_clm_ckpt, hf_dir):
    from nfeval.engine.checkpoints import checkpoint

    ident = identify(tiny_clm_ckpt)
    assert ident.kind == "nfeval" and ident.fingerprint == checkpoint.load(tiny_clm_ckpt).fingerprint
    assert ident.summary["parameters"] > 0 and ident.summary["compute"]["tokens"] == 1000
    hf = identify(hf_dir)
    assert hf.kind == "hf" and len(hf.fingerprint) == 64 and hf.summary["parameters"] > 0


def test_mlm_checkpoint_is_refused(tiny_mlm_ckpt):
    with pytest.raises(ValueError, match="causal LM"):
        NFEvalLM(tiny_mlm_ckpt, ScoringConfig(device="cpu"))
