"""Hostile Hugging Face folders (issue 55): one that asks to run its own code, or whose weights are a
code-running pickle, is refused in one line naming the folder, exit 2, by every command that loads one."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from nfeval.cli import main


def _gpt2_folder(path, **extra) -> str:
    """Writes a whole tiny GPT-2 folder (config and safetensors weights), config.json extended by
    ``extra``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=1, n_head=2, n_embd=8, vocab_size=32, n_positions=16, bos_token_id=0, eos_token_id=0
    )
    GPT2LMHeadModel(config).save_pretrained(str(path))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | extra))
    return str(path)


@pytest.mark.parametrize(
    "argv", [["zeroshot", "--tasks", "piqa", "--data-dir", "embedded"], ["generate", "--prompt", "hi"]]
)
def test_a_folder_asking_to_run_its_code_is_refused_in_one_line(tmp_path, capsys, argv):
    folder = _gpt2_folder(tmp_path / "m", auto_map={"AutoModelForCausalLM": "modeling_x.Evil"})
    (tmp_path / "m" / "modeling_x.py").write_text("raise SystemExit('ran the folder code')\n")
    out = ["--output", str(tmp_path / "r.json")] if argv[0] == "zeroshot" else []
    capsys.readouterr()  # transformers' own bars while the folder was written
    assert main([argv[0], "--ckpt", folder, *argv[1:], *out, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "auto_map asks to run Python code" in err and folder in err, err
    assert not (tmp_path / "r.json").exists()


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_a_code_running_pickle_of_weights_is_refused_in_one_line(tmp_path, capsys):
    folder = _gpt2_folder(tmp_path / "m")
    os.remove(os.path.join(folder, "model.safetensors"))  # the pickle is the folder's only weights
    with open(os.path.join(folder, "pytorch_model.bin"), "wb") as f:
        pickle.dump({"transformer.wte.weight": _RunsCode()}, f)
    argv = ["zeroshot", "--ckpt", folder, "--tasks", "piqa", "--data-dir", "embedded", "--device", "cpu"]
    capsys.readouterr()
    assert main([*argv, "--hf-forward", "transformers", "--output", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a pickle holding Python objects" in err and folder in err, err
