"""Token sensitivity at initialisation (``nfeval.analysis.token_sensitivity``) of several presets on one
batch of a corpus: one report line per architecture, and the records as JSON with --json.

    python benchmarks/token_sensitivity.py --train-data ../shared/data/corpus/train.txt \
        --tokenizer docs/bakeoff_small/tokenizer.json --size small --init fairseq \
        --archs prenorm normformer postnorm hybridnorm hybridnormstar
"""

from __future__ import annotations

import argparse
import json

import torch

from nfeval.analysis.token_sensitivity import sensitivity_at_init, token_batch
from nfeval.engine.model.config import preset
from nfeval.engine.text.data import load_text_corpus, token_shards
from nfeval.engine.text.tokenization import load_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-data", required=True)
    parser.add_argument("--valid-data", default=None)
    parser.add_argument("--tokenizer", required=True, help="the tokenizer.json the runs use")
    parser.add_argument("--archs", nargs="+", default=["prenorm", "postnorm", "hybridnorm"])
    parser.add_argument("--size", default="small")
    parser.add_argument("--init", default=None, help="ModelConfig.init (default: the preset's recipe)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="also print the records as JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)
    tok = load_tokenizer(args.tokenizer)
    tokens = token_shards(load_text_corpus(args.train_data, args.valid_data), tok).train
    idx = token_batch(tokens, args.batch, args.seq_len, seed=args.seed)
    init = {"init": args.init} if args.init else {}
    records = []
    for arch in args.archs:
        cfg = preset(f"{arch}-{args.size}", vocab_size=tok.get_vocab_size(), **init)
        result = sensitivity_at_init(cfg, idx, seed=args.seed, samples=args.samples, name=arch)
        print(result.text(), flush=True)
        records.append({**result.to_dict(), "init": cfg.init, "size": args.size})
    if args.json:
        print(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
