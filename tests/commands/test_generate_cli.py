"""``nfeval generate`` and the lm-eval adapter's batched ``generate_until``."""

from __future__ import annotations

import json

import pytest
import torch
from lm_eval.api.instance import Instance
from test_zeroshot_adapter import build_hf_gpt2

from nfeval.cli import main
from nfeval.engine.checkpoints import checkpoint
from nfeval.engine.fast import cpu_linear
from nfeval.model_adapters import NFEvalLM
from nfeval.model_adapters.config import ScoringConfig

CONTEXTS = ["The cat", "A dog ran under the big red", "Question: is it good?\nAnswer:", "When"]


def gen_requests(until, max_gen_toks=8, **extra):
    kwargs = {"until": until, "max_gen_toks": max_gen_toks, **extra}
    return [
        Instance("generate_until", doc={}, arguments=(c, dict(kwargs)), idx=i, metadata=("t", i, 1))
        for i, c in enumerate(CONTEXTS)
    ]


def greedy_text(lm, context, n):
    """The old one-token-at-a-time path: full forward per token, greedy, stop at EOS."""
    ids, new = lm.tok_encode(context), []
    with torch.no_grad():
        for _ in range(n):
            token = int(lm.model_backend.model(torch.tensor([ids + new]))[0, -1].argmax())
            if token == lm.eot_token_id:
                break
            new.append(token)
    return lm.tok_decode(new)


def test_generate_until_batched_equals_one_at_a_time(tiny_clm_ckpt):
    lm = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", batch_size=3, progress=False))
    got = lm.generate_until(gen_requests([]), disable_tqdm=True)
    assert got == [greedy_text(lm, c, 8) for c in CONTEXTS]
    stop = got[1][len(got[1]) // 2 :][:2]  # a string row 1 produces midway
    cut = lm.generate_until(gen_requests([stop]), disable_tqdm=True)
    assert cut == [text.split(stop)[0] for text in got] and len(cut[1]) < len(got[1])


def test_generate_until_groups_settings_and_keeps_order(tiny_clm_ckpt):
    lm = NFEvalLM(tiny_clm_ckpt, ScoringConfig(device="cpu", batch_size=2, progress=False))
    short, long = gen_requests([], max_gen_toks=3), gen_requests([], max_gen_toks=8)
    mixed = [short[0], long[1], short[2], long[3]]
    want = [lm.generate_until([r], disable_tqdm=True)[0] for r in mixed]
    assert lm.generate_until(mixed, disable_tqdm=True) == want


@pytest.mark.parametrize("hf_forward", ["engine", "transformers"])
def test_hf_backend_generates_the_hf_models_greedy_text(tmp_path, hf_forward):
    hf_dir = build_hf_gpt2(tmp_path / "hf")
    lm = NFEvalLM(hf_dir, ScoringConfig(device="cpu", batch_size=4, progress=False, hf_forward=hf_forward))
    stock = NFEvalLM(
        hf_dir, ScoringConfig(device="cpu", progress=False, hf_forward="transformers")
    ).model_backend
    got = lm.generate_until(gen_requests([]), disable_tqdm=True)
    want = []
    for c in CONTEXTS:
        ids, new = lm.tok_encode(c), []
        with torch.no_grad():
            for _ in range(8):
                token = int(stock.model(torch.tensor([ids + new])).logits[0, -1].argmax())
                if token == lm.eot_token_id:
                    break
                new.append(token)
        want.append(lm.tok_decode(new))
    assert got == want
    stop = got[0][len(got[0]) // 2 :][:2]  # the stop strings end that row; the text is cut there
    assert lm.generate_until(gen_requests([stop]), disable_tqdm=True) == [t.split(stop)[0] for t in got]


def test_cli_prints_and_writes_jsonl_with_provenance(tiny_clm_ckpt, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The cat\n\nA dog ran\n", encoding="utf-8")
    out = tmp_path / "gen.jsonl"
    argv = [
        "generate",
        "--ckpt",
        tiny_clm_ckpt,
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        "5",
        "--temperature",
        "0.8",
        "--top-k",
        "50",
        "--seed",
        "3",
        "--batch-size",
        "1",
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    header, *rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert header["kind"] == "header"
    assert header["provenance"]["model"]["fingerprint"] == checkpoint.load(tiny_clm_ckpt).fingerprint
    assert header["provenance"]["settings"]["seed"] == 3 and header["provenance"]["git_hash"] is not None
    assert header["provenance"]["compute"]["cpu_linear_kernel"] == cpu_linear.describe(decoding_rows=1)
    assert [r["prompt"] for r in rows] == ["The cat", "A dog ran"]
    assert all(r["new_tokens"] <= 5 and r["completion"] in printed for r in rows)
    assert main(argv) == 0 and [json.loads(x) for x in out.read_text().splitlines()][1:] == rows  # seeded


@pytest.mark.parametrize(
    "args,message",
    [
        (["--prompt", "x", "--top-p", "1.5"], "top_p"),
        (["--prompt", "x", "--temperature", "-1"], "temperature"),
        (["--prompts", "missing.txt"], "missing.txt: prompts file not found"),
        (["--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["--prompt", "x", "--output", "out.json"], ".jsonl"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tiny_clm_ckpt, args, message, capsys):
    try:
        code = main(["generate", "--ckpt", tiny_clm_ckpt, *args])
    except SystemExit as e:  # a flag's own type (--max-new-tokens 0) is refused by argparse
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_cli_bad_jsonl_names_the_line(tiny_clm_ckpt, tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n', encoding="utf-8")
    assert main(["generate", "--ckpt", tiny_clm_ckpt, "--prompts", str(path)]) == 2
    assert f"{path}: line 2" in capsys.readouterr().err


def test_cli_fairseq_checkpoint_needs_and_takes_a_tokenizer(tiny_clm_ckpt, tiny_tokenizer, tmp_path, capsys):
    from test_fairseq_import import fairseq_config, to_fairseq

    ckpt = checkpoint.load(tiny_clm_ckpt)
    cfg = ckpt.config
    path = tmp_path / "checkpoint_last.pt"
    torch.save({"model": to_fairseq(ckpt.model), "cfg": {"model": fairseq_config(cfg)}}, path)
    assert main(["generate", "--ckpt", str(path), "--prompt", "The cat"]) == 2
    assert "--tokenizer" in capsys.readouterr().err
    tok = tmp_path / "tokenizer.json"
    tok.write_text(tiny_tokenizer.to_str(), encoding="utf-8")
    assert main(["generate", "--ckpt", str(path), "--prompt", "The cat", "--tokenizer", str(tok)]) == 0
    from_dir = main(["generate", "--ckpt", tiny_clm_ckpt, "--prompt", "The cat"])
    printed = capsys.readouterr().out.splitlines()
    assert from_dir == 0 and printed[1] == printed[4]  # same weights, same continuation


def test_cli_generates_in_fp32_unless_bf16_is_asked_for(tiny_clm_ckpt, tmp_path):
    out = tmp_path / "gen.jsonl"
    base = ["generate", "--ckpt", tiny_clm_ckpt, "--prompt", "The cat", "--max-new-tokens", "3"]
    assert main([*base, "--output", str(out)]) == 0
    header = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert header["provenance"]["settings"]["dtype"] == "float32"
    assert main([*base, "--dtype", "bf16", "--output", str(out)]) == 0
    header = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert header["provenance"]["settings"]["dtype"] == "bfloat16"
    assert header["provenance"]["compute"]["cpu_linear_kernel"] == "torch: bfloat16 weights"  # not oneDNN's


def generate_hf_dir(hf_dir, tmp_path, name, *flags):
    """Runs ``nfeval generate`` on ``hf_dir`` (prompts of different lengths, batches of 3: left padding)
    and returns (the header's model block, the generation rows)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(c.replace("\n", " ") for c in CONTEXTS) + "\n", encoding="utf-8")
    out = tmp_path / f"{name}.jsonl"
    argv = ["generate", "--ckpt", hf_dir, "--prompts", str(prompts), "--max-new-tokens", "12"]
    assert main([*argv, "--batch-size", "3", "--output", str(out), *flags]) == 0
    header, *rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return header["provenance"]["model"] | header["provenance"]["compute"], rows


def test_cli_generates_a_hf_gpt2_in_the_engine_with_the_hf_models_own_text(tmp_path):
    hf_dir = build_hf_gpt2(tmp_path / "hf")
    engine, rows = generate_hf_dir(hf_dir, tmp_path, "engine")
    stock, want = generate_hf_dir(hf_dir, tmp_path, "transformers", "--hf-forward", "transformers")
    assert (engine["forward_by"], stock["forward_by"]) == ("nfeval engine (GPT-2 weights)", "transformers")
    kernels = (engine["cpu_linear_kernel"], stock["cpu_linear_kernel"])
    assert kernels == (cpu_linear.describe(decoding_rows=3), "none: transformers generates")
    assert engine["kind"] == stock["kind"] == "hf"
    assert [(r["completion"], r["new_tokens"], r["finish"]) for r in rows] == [
        (r["completion"], r["new_tokens"], r["finish"]) for r in want
    ]
    assert any(r["new_tokens"] > 0 for r in rows)


def test_a_hf_gpt2_samples_in_the_engine_reproducibly_under_hfs_default_top_k(tmp_path):
    from nfeval.engine.fast.hf_gpt2_backend import HF_TOP_K
    from nfeval.engine.inference.generate import Sampling
    from nfeval.model_adapters.backends import open_backend

    backend = open_backend(build_hf_gpt2(tmp_path / "hf"), torch.device("cpu"), torch.float32)
    assert backend.forward_by == "nfeval engine (GPT-2 weights)" and backend.ckpt.config.vocab_size > HF_TOP_K
    prompts = [backend.encode(c, None) for c in CONTEXTS]

    def sample(**how):
        return backend.generate(prompts, 16, Sampling(temperature=1.5, seed=3, **how), [], 2)

    unset = sample()
    assert unset == sample()  # the same seed, the same text
    assert unset == sample(top_k=HF_TOP_K)  # no --top-k: HF's own default, as its generate samples
    assert unset != sample(top_k=backend.ckpt.config.vocab_size)  # the default is a real cut here


@pytest.mark.parametrize(
    "file,setting",
    [("generation_config.json", {"repetition_penalty": 1.3}), ("generation_config.json", {"new_option": 1}),
     ("config.json", {"no_repeat_ngram_size": 2})],
)  # fmt: skip
def test_a_hf_gpt2_whose_settings_change_hfs_generate_goes_to_transformers(tmp_path, file, setting):
    hf_dir = build_hf_gpt2(tmp_path / "hf")
    path = tmp_path / "hf" / file
    path.write_text(json.dumps(json.loads(path.read_text()) | setting))
    model, rows = generate_hf_dir(hf_dir, tmp_path, "out")
    assert model["forward_by"] == "transformers" and len(rows) == len(CONTEXTS)


@pytest.mark.parametrize("hf_forward", ["engine", "transformers"])
def test_an_empty_prompt_to_a_hf_directory_is_one_line_either_way(tmp_path, hf_forward, capsys):
    hf_dir = build_hf_gpt2(tmp_path / "hf")
    capsys.readouterr()
    argv = ["generate", "--ckpt", hf_dir, "--prompt", "", "--max-new-tokens", "2", "--hf-forward", hf_forward]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # above it: transformers' loading bar, if any
    assert last == "nfeval generate: error: prompt 0 is empty: expected at least one token"
