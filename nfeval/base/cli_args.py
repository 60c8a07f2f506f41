"""Command-line options shared by the commands, so the same thing has the same name and values everywhere.

The rule for outputs: ``--out`` is always a folder (train, glue, tune, demo, export-hf), ``--output``
always a file (zeroshot, generate, leaderboard, compare, compare-scores, analyze). Commands whose file
option used to be spelled ``--out`` still accept it (hidden).
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from collections.abc import Callable

from .errors import ConfigError

# Every command accepts both spellings of a dtype; the value a command sees is the short one.
DTYPE_SPELLINGS = {
    "fp32": "fp32",
    "float32": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "auto": "auto",
}
LONG_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def add_output_file(p: argparse.ArgumentParser, help: str, default: str | None = None, **kwargs) -> None:
    """Adds ``--output FILE`` (and the old spelling ``--out``, hidden) storing into ``args.output``."""
    p.add_argument("--output", default=default, help=help, **kwargs)
    add_old_out_spelling(p)


def add_old_out_spelling(p: argparse.ArgumentParser) -> None:
    """Adds ``--out``, hidden, as the old spelling of a command's ``--output FILE``."""
    p.add_argument("--out", dest="output", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def run_folder_help(default: str) -> str:
    """Returns ``--out``'s help for the output folder of a resumable multi-run command."""
    return f"output folder (default {default}); rerun to resume"


ZEROSHOT_DATA_DIR_HELP = (
    "local zero-shot data (layout of ../shared/data/zeroshot), or 'embedded': the slices shipped in "
    "the package"
)


DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def device_name(text: str) -> str:
    """Returns ``--device``'s value (an argparse ``type``): auto, cpu, cuda or cuda:N; raises
    argparse.ArgumentTypeError naming the spellings for anything else (``gpu``)."""
    if not DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")
    return text


DEVICE_HELP = "auto, cpu, cuda or cuda:N (default: auto, cuda when available)"


def positive_int(text: str) -> int:
    """Returns ``text`` as an integer of at least 1 (an argparse ``type``); raises
    argparse.ArgumentTypeError saying what was expected (argparse names the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_int_or_auto(text: str) -> int | str:
    """Returns ``auto`` or ``text`` as an integer of at least 1 (an argparse ``type``); raises
    argparse.ArgumentTypeError saying what was expected."""
    if text == "auto":
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}") from None


def count_or_all(text: str) -> int | None:
    """Returns ``--limit``'s value (an argparse ``type``): a count of at least 1, or None (all) for 0;
    raises argparse.ArgumentTypeError saying what was expected for anything else."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a count, or 0 for all, got {text!r}")
    return value or None


def limit_help(what: str, default: int | None = None) -> str:
    """Returns ``--limit``'s help: only the first N ``what``, 0 meaning all."""
    return f"only the first N {what}; 0 = all (default {default or 'all'})"


def device_or_none(device: str | None) -> str | None:
    """Returns ``device`` with ``auto`` as None (the library functions' spelling of 'choose for me')."""
    return None if device in (None, "auto") else device


def dtype_spellings(choices: tuple[str, ...]) -> str:
    """Returns the spellings of dtype ``choices`` for a help text, e.g. ``fp32/float32, bf16/bfloat16``."""
    return ", ".join(f"{c}/{LONG_NAMES[c]}" if c in LONG_NAMES else c for c in choices)


def dtype_type(choices: tuple[str, ...]) -> Callable[[str], str]:
    """Returns the argparse ``type`` of a dtype flag taking ``choices`` (short names) in either spelling:
    it returns the short name, or raises argparse.ArgumentTypeError naming the spellings."""

    def parse(text: str) -> str:
        short = DTYPE_SPELLINGS.get(text.strip().lower())
        if short not in choices:
            raise argparse.ArgumentTypeError(f"{text!r}: expected one of {dtype_spellings(choices)}")
        return short

    return parse


def learning_rates(text: str) -> list[float]:
    """Returns the learning rates of a comma-separated ``--lrs`` value (an argparse ``type``); raises
    argparse.ArgumentTypeError naming the flag when it holds none, a non-number, or a rate that is not
    finite and positive (``inf``, ``nan``, ``0``, ``-1e-3``: no step size)."""
    try:
        values = [float(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--lrs {text!r}: expected comma-separated numbers such as 1e-3,3e-3"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("--lrs: expected at least one learning rate")
    bad = [x for x in values if not 0 < x < math.inf]  # nan fails both
    if bad:
        raise argparse.ArgumentTypeError(
            f"--lrs {text!r}: {bad[0]} is not a learning rate; expected finite positive learning rates"
        )
    return values


def tune_seeds_help(default: int) -> str:
    """Returns a pipeline's ``--tune-seeds`` help: the seeds each LR of its tune trains (numbered from 101,
    never among the judged seeds 1 … --seeds), the best LR chosen by their mean."""
    return (
        "seeds per LR of the tune, numbered from 101 so none is judged; the best LR by their mean, and the "
        f"LRs within the tune's noise of it re-checked on the judged seeds (default {default})"
    )


def names(flag: str) -> Callable[[str], tuple[str, ...]]:
    """Returns the argparse ``type`` of a flag whose value is comma-separated names: it returns them, or
    raises argparse.ArgumentTypeError naming ``flag`` when the value names none (an empty selection)."""

    def parse(text: str) -> tuple[str, ...]:
        selected = tuple(t.strip() for t in text.split(",") if t.strip())
        if not selected:
            raise argparse.ArgumentTypeError(
                f"{flag} {text!r}: empty selection; name at least one, or drop the flag"
            )
        return selected

    return parse


# a pipeline's ``--jobs`` (``reproduce``, ``bakeoff``)
PIPELINE_JOBS_HELP = "training runs and tune points at a time, each on its share of the cores (default 1)"
RUNS_PER_GPU_HELP = (
    "training runs and tune points sharing each visible GPU at a time (sets --jobs): N, or auto for as many "
    "as its free memory holds at the scale's estimated memory a run"
)


def check_jobs(jobs: int, runs_per_gpu: int | None) -> None:
    """Raises ConfigError for a pipeline's ``--jobs`` below 1, or given beside ``--runs-per-gpu``."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: expected at least 1")
    if runs_per_gpu is not None and jobs != 1:
        raise ConfigError("--jobs and --runs-per-gpu both say how many runs at a time: give one")


def runs_per_gpu(text: str) -> int:
    """Returns ``--runs-per-gpu``'s value: a positive count, 0 for ``auto``; argparse.ArgumentTypeError
    for anything else."""
    if text.strip().lower() == "auto":
        return 0
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--runs-per-gpu {text!r}: expected a positive count or auto")
    return value


REREAD_HELP = (
    "train and judge nothing: read every tune point and run record the folder holds again under today's "
    "rules and rewrite the report (what would need training is said so in it)"
)


def add_render_only(p: argparse.ArgumentParser) -> None:
    """Adds a pipeline's ``--render-only``: its report.md rewritten from its report.json."""
    p.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite --out's report.md from its report.json (nothing is trained or measured)",
    )


def invoked_command() -> str:
    """Returns this process's ``nfeval ...`` command line, shell-quoted (for reports to reproduce it)."""
    return "nfeval " + " ".join(shlex.quote(a) for a in sys.argv[1:])
