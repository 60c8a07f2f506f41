"""Round four of hostile input (issue 55's last deliverable): what the commands changed since round three
did with an empty, huge or malformed input, a read-only cache, a failed start, each run as a user runs
it. Every case here was a traceback, or a folder a corrected rerun refused, before its fix; each is now
one line naming the file and what was expected, exit status 2, nothing written."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest
import torch
from test_fairseq_import import fairseq_config, to_fairseq

from nfeval import cli

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs")
PIQA = os.path.join(os.path.dirname(__file__), "..", "..", "nfeval", "embedded", "zeroshot", "piqa")
DEEP = "[" * 100_000 + "]" * 100_000  # past json's recursion limit
HUGE_INT = "9" * 5000  # past sys.get_int_max_str_digits


def nfeval(*argv: str) -> tuple[int, str]:
    """Returns (exit status, stderr) of ``nfeval ARGV`` run in this process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(list(argv))
        except SystemExit as e:  # argparse's errors
            code = e.code
    return code, err.getvalue()


def refused(*argv: str) -> str:
    """Returns the one line ``nfeval ARGV`` printed, checked to be a refusal (exit 2, no traceback)."""
    code, err = nfeval(*argv)
    lines = [line for line in err.splitlines() if line.strip() and "%|" not in line]  # not a progress bar
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def piqa_rows(n: int = 6) -> list[str]:
    with open(os.path.join(PIQA, "validation.jsonl"), encoding="utf-8") as f:
        return f.read().splitlines()[:n]


# ---------------------------------------------------------------- JSON past the parser's limits


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"results": ' + DEEP + "}", "JSON nested too deeply to read"),
        ('{"results": {"piqa": {"acc,none": ' + HUGE_INT + "}}}", "JSON beyond what can be read (Exceeds"),
        (b'{"results": "\xff"}', "not UTF-8 text (byte 13)"),
    ],
)
def test_a_results_file_past_the_json_parsers_limits_is_one_line(tmp_path, text, expected):
    path = tmp_path / "r.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for command in (["leaderboard", str(path)], ["compare-scores", str(path), str(path)]):
        assert f"{path}: {expected}" in refused(*command)


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"config": {}}, "key 'results' (zero-shot results) or 'tasks' (GLUE summary) is missing"),
        ({"tasks": {"sst2": {"best": {}}}}, "key 'best_lr' is missing; expected the GLUE summary"),
        ({"tasks": {"sst2": {"best_lr": 1e-3, "per_lr": []}}}, "a value is not of the shape read"),
        ({"tasks": ["sst2"]}, "a value is not of the shape read (AttributeError"),
    ],
)
def test_compare_scores_names_a_results_file_of_neither_kind_or_a_malformed_glue_summary(
    tmp_path, data, expected
):
    """compare-scores took a file without 'results' for a GLUE summary ('holds glue results ...; nothing to
    pair') and a GLUE summary without 'best_lr' or 'per_lr' was a traceback."""
    (tmp_path / "a.json").write_text(json.dumps(data))
    (tmp_path / "b.json").write_text(json.dumps({"tasks": {}}))
    assert f"{tmp_path / 'a.json'}: {expected}" in refused(
        "compare-scores", str(tmp_path / "a.json"), str(tmp_path / "b.json")
    )


@pytest.mark.parametrize(
    "line, expected",
    [
        (DEEP, ":7: JSON nested too deeply to read"),
        ('{"goal": ' + HUGE_INT + "}", ":7: JSON beyond what can be read"),
        (b"\xff", ": not UTF-8 text"),
    ],
)
def test_a_task_file_past_the_json_parsers_limits_is_one_line_and_writes_nothing(
    tmp_path, tiny_clm_ckpt, line, expected
):
    (tmp_path / "data" / "piqa").mkdir(parents=True)
    text = ("\n".join(piqa_rows()) + "\n").encode()
    (tmp_path / "data" / "piqa" / "validation.jsonl").write_bytes(
        text + (line if isinstance(line, bytes) else line.encode()) + b"\n"
    )
    out = tmp_path / "out" / "r.json"
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--data-dir", str(tmp_path / "data"), "--tasks", "piqa"]
    error = refused(*argv, "--output", str(out), "--no-progress", "--device", "cpu")
    assert f"piqa/validation.jsonl{expected}" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["labels_not_utf8", "csv_not_utf8", "csv_field_past_the_limit"])
def test_a_task_file_that_is_not_utf8_or_past_the_csv_limit_is_one_line(tmp_path, tiny_clm_ckpt, damage):
    data = tmp_path / "data"
    if damage == "labels_not_utf8":
        (data / "piqa").mkdir(parents=True)
        rows = [json.dumps({k: v for k, v in json.loads(r).items() if k != "label"}) for r in piqa_rows()]
        (data / "piqa" / "valid.jsonl").write_text("\n".join(rows) + "\n")
        (data / "piqa" / "valid-labels.lst").write_bytes(b"0\n1\n\xff\n0\n1\n0\n")
        task, name = "piqa", "piqa/valid-labels.lst: not UTF-8 text (byte 4)"
    else:
        (data / "storycloze").mkdir(parents=True)
        header = "InputStoryid,InputSentence1,InputSentence2,InputSentence3,InputSentence4,"
        header += "RandomFifthSentenceQuiz1,RandomFifthSentenceQuiz2,AnswerRightEnding\n"
        row = "s1,A b.,C d.,E f.,G h.,I j.,K l.,1\n"
        body = (header + row).encode()
        if damage == "csv_not_utf8":
            body += b"s2,\xff,C d.,E f.,G h.,I j.,K l.,1\n"
            name = "not UTF-8 text"
        else:  # a field longer than the csv module's limit (131072 characters)
            body += ("s2," + "x" * 200_000 + ",C d.,E f.,G h.,I j.,K l.,1\n").encode()
            name = ":3: not a StoryCloze CSV row (field larger than field limit"
        (data / "storycloze" / "cloze_test_val__spring2016 - cloze_test_ALL_val.csv").write_bytes(body)
        task = "storycloze_2016"
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--data-dir", str(data), "--tasks", task, "--no-cache"]
    assert name in refused(*argv, "--output", str(tmp_path / "r.json"), "--no-progress", "--device", "cpu")
    assert not (tmp_path / "r.json").exists()


# ---------------------------------------------------------------- an unwritable cache (a read-only home)


def test_zeroshot_scores_with_an_unwritable_cache_keeping_nothing_there(tmp_path, tiny_clm_ckpt, monkeypatch):
    """The results cache and the request cache only save time: with a cache folder that cannot be made
    (a read-only home; even root cannot make a folder under a file) zeroshot scores and writes its
    results, in both layouts; it was a traceback-free refusal naming the request cache before."""
    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.setenv("NFEVAL_CACHE", str(tmp_path / "afile" / "cache"))
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--data-dir", "embedded", "--tasks", "piqa", "--limit", "4"]
    code, err = nfeval(*argv, "--output", str(tmp_path / "r.json"), "--no-progress", "--device", "cpu")
    assert code == 0 and "Traceback" not in err, err[-3000:]
    assert (tmp_path / "r.json").is_file() and (tmp_path / "r.items.json").is_file()
    code, err = nfeval(*argv, "--output_path", str(tmp_path / "lm"), "--log_samples", "--no-progress")
    assert code == 0, err[-3000:]
    assert len([p for p in (tmp_path / "lm").rglob("*") if p.is_file()]) == 2  # results + samples


# ---------------------------------------------------------------- fairseq checkpoints of another shape


def _fairseq_file(path, tiny_tokenizer, change) -> str:
    from nfeval.engine.model.config import preset
    from nfeval.engine.model.model import Transformer

    torch.manual_seed(0)
    model = Transformer(preset("prenorm-tiny", vocab_size=tiny_tokenizer.get_vocab_size(), max_seq_len=64))
    ckpt = {"model": to_fairseq(model), "cfg": {"model": fairseq_config(model.cfg)}}
    change(ckpt)
    torch.save(ckpt, path)
    tiny_tokenizer.save(str(path.parent / "tokenizer.json"))
    return str(path)


FAIRSEQ_DAMAGE = {
    "model_tensor": (lambda c: c.update(model=torch.zeros(3)), "key 'model' is a Tensor"),
    "cfg_list": (lambda c: c.update(cfg=[]), "key 'cfg' is a list; expected fairseq's config"),
    "cfg_model_str": (lambda c: c["cfg"].update(model="x"), "cfg['model'] is a str"),
    "entry_not_tensor": (
        lambda c: c["model"].update({"decoder.embed_tokens.weight": 3}),
        "model['decoder.embed_tokens.weight'] is a int; expected a tensor",
    ),
    "no_fc1": (
        lambda c: c["model"].pop("decoder.layers.0.fc1.weight"),
        "tensor 'decoder.layers.0.fc1.weight' is missing",
    ),
    "fc1_scalar": (
        lambda c: c["model"].update({"decoder.layers.0.fc1.weight": torch.zeros(())}),
        "tensor 'decoder.layers.0.fc1.weight' has shape (); expected 2 dimensions",
    ),
    "q_shape": (
        lambda c: c["model"].update({"decoder.layers.0.self_attn.q_proj.weight": torch.zeros(5, 7)}),
        "have shapes [(5, 7), (64, 64), (64, 64)]; expected one shape",
    ),
    "pad_str": (lambda c: c["cfg"]["model"].update(pad="x"), "pad='x': expected a whole number"),
    "positions_str": (
        lambda c: c["cfg"]["model"].update(max_target_positions="abc"),
        "max_target_positions='abc': expected a whole number",
    ),
    "activation_list": (lambda c: c["cfg"]["model"].update(activation_fn=["gelu"]), "activation_fn=['gelu']"),
}


@pytest.mark.parametrize("damage", sorted(FAIRSEQ_DAMAGE))
def test_a_fairseq_file_of_another_shape_is_one_line_naming_it(tmp_path, tiny_tokenizer, damage):
    change, expected = FAIRSEQ_DAMAGE[damage]
    path = _fairseq_file(tmp_path / "copy.pt", tiny_tokenizer, change)
    error = refused("info", path)
    assert f"{path}: " in error and expected in error
    if damage == "q_shape":  # the analysis the fairseq settings were made for refuses it the same way
        out = tmp_path / "grads.png"
        assert expected in refused("analyze", "grads", "--ckpt", path, "--output", str(out))
        assert not out.exists() and not (tmp_path / "grads.json").exists()


# ---------------------------------------------------------------- HF folders transformers cannot load


def _gpt2_folder(path, tiny_tokenizer) -> str:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=1, n_head=2, n_embd=8, vocab_size=tiny_tokenizer.get_vocab_size(), n_positions=32
    )
    GPT2LMHeadModel(config).save_pretrained(str(path))
    tiny_tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return str(path)


def _edit(path, **changes) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data | changes))


HF_DAMAGE = {
    "weights_empty": (
        lambda d: (d / "model.safetensors").write_bytes(b""),
        "truncated or corrupt safetensors",
    ),
    "tokenizer_empty": (
        lambda d: (d / "tokenizer.json").write_text(""),
        "transformers cannot load its tokenizer",
        "tokenizer.json: not a valid tokenizer.json",  # the engine reads it first
    ),
    "model_type_unknown": (
        lambda d: _edit(d / "config.json", model_type="nosuchmodel"),
        "transformers cannot load its model (ValueError",
    ),
    "field_mistyped": (lambda d: _edit(d / "config.json", n_embd="x"), "transformers cannot load its model"),
    "config_deep": (lambda d: (d / "config.json").write_text('{"a": ' + DEEP + "}"), "nested too deeply"),
}


@pytest.mark.parametrize("hf_forward", ["engine", "transformers"])
@pytest.mark.parametrize("damage", sorted(HF_DAMAGE))
def test_a_hugging_face_folder_transformers_cannot_load_is_one_line_naming_it(
    tmp_path, tiny_tokenizer, capsys, damage, hf_forward
):
    """The engine reads a GPT-2 folder first (a field it cannot read sends the folder on to transformers)."""
    folder = _gpt2_folder(tmp_path / "m", tiny_tokenizer)
    damage_it, expected, *by_engine = HF_DAMAGE[damage]
    damage_it(tmp_path / "m")
    capsys.readouterr()  # transformers' bars while the folder was written
    error = refused(
        "generate", "--ckpt", folder, "--prompt", "the cat", "--max-new-tokens", "2", "--device", "cpu",
        "--hf-forward", hf_forward,
    )  # fmt: skip
    expected = by_engine[0] if by_engine and hf_forward == "engine" else expected
    assert folder in error and expected in error


# ---------------------------------------------------------------- stored reports of another shape


@pytest.mark.parametrize(
    "command, folder, change, expected",
    [
        ("reproduce", "reproduce_tiny", lambda r: r.pop("header"), "key 'header' is missing"),
        ("reproduce", "reproduce_tiny", lambda r: r.update(sections="x"), "a value is not of the shape read"),
        ("reproduce", "budget_tiny", lambda r: r.pop("fit"), "key 'fit' is missing"),
        ("reproduce", "budget_tiny", lambda r: r.update(budgets="x"), "a value is not of the shape read"),
        ("bakeoff", "bakeoff_tiny", lambda r: r.pop("ranking"), "key 'ranking' is missing"),
        ("bakeoff", "bakeoff_tiny", lambda r: r.update(ppl_tests="x"), "a value is not of the shape read"),
    ],
)
def test_render_only_reads_a_report_of_another_shape_in_one_line(tmp_path, command, folder, change, expected):
    report = json.load(open(os.path.join(DOCS, folder, "report.json"), encoding="utf-8"))
    change(report)
    (tmp_path / "report.json").write_text(json.dumps(report))
    error = refused(command, "--out", str(tmp_path), "--render-only")
    assert f"{tmp_path / 'report.json'}: {expected}" in error and f"that nfeval {command}" in error
    assert not (tmp_path / "report.md").exists()


def _committed_folder(out) -> None:
    """Writes what ``reproduce --verify`` reads of a committed folder (its settings, Figure 2's data and the
    report header), as a reproduce at the smoke scale without a tune writes them."""
    (out / "experiments" / "fig2-clm").mkdir(parents=True)
    (out / "reproduce.json").write_text(
        json.dumps({"scale": "smoke", "budget": {"max_steps": 4}, "tune": False})
    )
    data = {"comparisons": {"1": {"runs": [{"final_val_ppl": 300.0}]}}}
    (out / "experiments" / "fig2-clm" / "data.json").write_text(json.dumps(data))
    (out / "report.json").write_text(json.dumps({"header": {"compute_paths": []}}))


@pytest.mark.parametrize(
    "file, change, expected",
    [
        ("reproduce.json", lambda d: d.pop("scale"), "key 'scale' is None; expected one of"),
        ("reproduce.json", lambda d: d.update(scale="huge"), "key 'scale' is 'huge'; expected one of"),
        ("reproduce.json", lambda d: d.pop("budget"), "key 'budget' is missing"),
        ("experiments/fig2-clm/data.json", lambda d: d["comparisons"]["1"].update(runs=[]), "IndexError"),
        (
            "experiments/fig2-clm/data.json",
            lambda d: d["comparisons"]["1"]["runs"][0].update(final_val_ppl="x"),
            "key 'comparisons.1.runs.0.final_val_ppl' is 'x'; expected a positive number",
        ),
        ("report.json", lambda d: d.pop("header"), "key 'header' is missing"),
    ],
)
def test_verify_reads_a_committed_folder_of_another_shape_in_one_line_before_training(
    tmp_path, monkeypatch, file, change, expected
):
    from nfeval.pipelines import verify

    monkeypatch.setattr(verify, "train", lambda *a, **k: pytest.fail("verify trained"))
    _committed_folder(tmp_path)
    data = json.loads((tmp_path / file).read_text())
    change(data)
    (tmp_path / file).write_text(json.dumps(data))
    assert f"{tmp_path / file}: " in (error := refused("reproduce", "--out", str(tmp_path), "--verify"))
    assert expected in error


def test_a_landed_token_budget_of_another_shape_is_one_line(tmp_path):
    """--token-budgets reads a finished budget's report instead of re-running it: a report.json there
    without what the reading needs is named in one line, nothing trained."""
    budget = tmp_path / "axis" / "tokens=128"  # the smoke scale: 128 tokens are 4 updates
    budget.mkdir(parents=True)
    (budget / "reproduce.json").write_text(json.dumps({"budget": {"max_steps": 4}}))
    (budget / "report.json").write_text(json.dumps({"header": {"eval_seeds": [1]}}))
    argv = ["reproduce", "--out", str(tmp_path / "axis"), "--scale", "smoke", "--token-budgets", "128,512"]
    error = refused(*argv, "--no-progress")
    assert f"{budget / 'report.json'}: key 'sections' is missing" in error
    assert sorted(os.listdir(tmp_path / "axis")) == ["tokens=128"]  # nothing written, no lock file left


# ---------------------------------------------------------------- a failed start records nothing


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["bakeoff", "--clip-grad", "inf"], "--clip-grad inf: expected a finite gradient norm"),
        (["bakeoff", "--clip-grad", "nan"], "--clip-grad nan: expected a finite gradient norm"),
        (["bakeoff", "--minutes", "inf"], "--minutes inf: expected a finite positive number"),
        (["bakeoff", "--lrs", "1e-3,inf"], "expected finite positive learning rates"),
        (["reproduce", "--scale", "smoke", "--minutes", "inf"], "expected a finite positive number"),
        (["reproduce", "--scale", "smoke", "--lrs", "1e-3,inf"], "expected finite positive learning rates"),
    ],
)
def test_a_non_finite_pipeline_setting_is_refused_before_the_folder_is_made(tmp_path, argv, expected):
    """``--clip-grad inf`` passed the bakeoff's check, recorded itself in bakeoff.json and failed at the
    first tune point; the folder then refused every rerun with another value."""
    extra = ["--size", "smoke"] if argv[0] == "bakeoff" else []
    assert expected in refused(*argv, *extra, "--out", str(tmp_path / "o"), "--no-progress")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["bakeoff", "reproduce"])
def test_a_start_refused_for_its_corpus_records_nothing_so_a_rerun_with_other_data_goes_on(tmp_path, command):
    """The folder's settings (bakeoff.json, reproduce.json) were recorded before the corpus was read, so
    after an empty training file was refused, the rerun with the right file was refused as a folder 'made
    with' the empty one; they are now recorded once the shared tokenizer is built from the corpus."""
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "no_text").mkdir()
    out = tmp_path / "o"
    base = [command, "--out", str(out), "--no-progress"]
    base += ["--size", "smoke"] if command == "bakeoff" else ["--scale", "smoke", "--only", "fig2-clm"]
    assert "empty.txt: empty (no text)" in refused(*base, "--train-data", str(tmp_path / "empty.txt"))
    assert not out.exists()
    error = refused(*base, "--train-data", str(tmp_path / "no_text"))  # the rerun reads its own data
    assert "folder holds no text files" in error and "made with" not in error
    assert not out.exists()


def test_a_failed_lm_eval_layout_write_leaves_no_folder_it_made(tmp_path, tiny_clm_ckpt, monkeypatch):
    from nfeval.zeroshot import lm_eval_layout

    monkeypatch.setattr(lm_eval_layout, "_staged_files", lambda *a: None)  # a line lm-eval lost
    argv = ["zeroshot", "--ckpt", tiny_clm_ckpt, "--data-dir", "embedded", "--tasks", "piqa", "--limit", "4"]
    out = tmp_path / "new" / "lm"
    error = refused(*argv, "--output_path", str(out), "--log_samples", "--no-cache", "--no-progress")
    assert "lm-eval could not write its files" in error and not (tmp_path / "new").exists()
