"""A plain Hugging Face generation script: the other side of ``generate_command_vs_hf.py``.

    python benchmarks/hf_generate_script.py HF_DIR PROMPTS.txt MAX_NEW_TOKENS BATCH_SIZE OUT.jsonl

Loads the model and tokenizer with the ``Auto`` classes, generates greedily in batches of
left-padded prompts (EOS ends a row) and writes one ``{"prompt", "completion"}`` line per prompt.
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    model_dir, prompts_path, max_new, batch_size, out = sys.argv[1:6]
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with open(prompts_path, encoding="utf-8") as f:
        prompts = [line for line in f.read().splitlines() if line.strip()]
    records = []
    for start in range(0, len(prompts), int(batch_size)):
        batch = prompts[start : start + int(batch_size)]
        enc = tok(batch, return_tensors="pt", padding=True)
        with torch.no_grad():
            seqs = model.generate(**enc, max_new_tokens=int(max_new), do_sample=False)
        for prompt, row in zip(batch, seqs[:, enc["input_ids"].shape[1] :].tolist()):
            if tok.eos_token_id in row:
                row = row[: row.index(tok.eos_token_id)]
            records.append({"prompt": prompt, "completion": tok.decode(row, skip_special_tokens=True)})
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


if __name__ == "__main__":
    main()
