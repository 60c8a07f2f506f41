"""``nfeval analyze grads|gains|stability``: the command line over ``nfeval.analysis.runs``."""

from __future__ import annotations

import argparse
import json
import sys

from ..analysis import tables
from ..analysis.runs import add_arguments, analyze, json_path

__all__ = ["add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    """Runs ``nfeval analyze``: the analysis, then its table (or JSON) and where the files went."""
    result = analyze(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(tables.TABLES[args.analysis](result)))
    print(f"wrote {args.output}, {json_path(args.output)}", file=sys.stderr)
    return 0
