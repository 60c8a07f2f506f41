"""The ``nfeval`` command. Thin: picks a subcommand, lets its module add arguments, calls its ``run``.

Each subcommand lives in its own module with two functions: ``add_arguments(parser)`` and
``run(args) -> int``. Only the chosen module is imported, so ``nfeval info`` does not pay for lm-eval.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys

from .base import env, home, interrupts
from .base.errors import UserError, environment_error
from .base.progress import quiet_library_bars

COMMANDS: dict[str, str] = {  # command -> what it does; its module is nfeval.commands.<name>
    "info": "architecture, parameter counts and fingerprint of a checkpoint or preset",
    "train": "pretrain a causal or masked LM under a compute budget",
    "zeroshot": "score a checkpoint zero-shot through lm-evaluation-harness",
    "generate": "continue prompts with a checkpoint (batched, KV cache), write JSONL",
    "lm-eval": "lm-eval's own CLI with nfeval's model and tasks registered",
    "tune": "pretraining learning-rate sweep per architecture: the best LR of each preset",
    "glue": "fine-tune on GLUE, sweeping learning rates",
    "compare": "compute-matched comparison of training runs",
    "compare-scores": "paired significance of two results files",
    "leaderboard": "markdown/CSV/JSON leaderboard from zero-shot and GLUE results",
    "analyze": "the paper's analyses: gradient norms, learned gains, LR stability",
    "export-hf": "export a causal LM as a Hugging Face model directory",
    "demo": "the whole mission offline: Pre-LN vs NormFormer at equal time, zero-shot, GLUE, leaderboard",
    "reproduce": "the paper's tables and figures from one command, at the scale the hardware allows",
    "bakeoff": "rank normalisation placements: tuned, equal-time, seed-paired, with significance",
}
# command -> how to go on after a Ctrl-C or SIGTERM, for the commands that pick up where they stopped
RESUME = {
    "train": "run the same command with --resume to continue from its last checkpoint",
    **dict.fromkeys(
        ("zeroshot", "tune", "glue", "demo", "reproduce", "bakeoff"), "run the same command again to resume"
    ),
}


def command_module(name: str):
    """Returns command ``name``'s module, imported on demand (``nfeval info`` does not pay for lm-eval)."""
    return importlib.import_module("nfeval.commands." + name.replace("-", "_"))


class Parser(argparse.ArgumentParser):
    """argparse under the one error contract: a bad flag or value is one line, ``nfeval CMD: error: …``,
    and exit status 2, before any work (``--help`` shows the usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """Returns the parser; only ``command``'s module is imported to add its arguments."""
    from . import __version__

    parser = Parser(prog="nfeval", description="NormFormer evaluation and benchmarking harness")
    parser.add_argument("--version", action="version", version=f"nfeval {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            command_module(name).add_arguments(p)
    return parser


def console() -> int:
    """The ``nfeval`` executable: ``main`` in a process of its own; returns the exit status. Only here
    are other libraries' bars turned off in logs (``quiet_library_bars``, before they are imported),
    matplotlib given a temp folder when the home cannot be written (``home.matplotlib_dirs_elsewhere``,
    so it does not warn) and does a command's CPU arithmetic flush denormals (``engine.fast.denormals``)
    and SIGTERM stop it as Ctrl-C does (``base.interrupts``): ``main`` called from another program leaves
    that program's settings alone."""
    quiet_library_bars()
    home.matplotlib_dirs_elsewhere()
    interrupts.raise_on_sigterm()
    return main(own_process=True)


def main(argv: list[str] | None = None, own_process: bool = False) -> int:
    """Runs the command line; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return run_command(argv, own_process)
    finally:
        leave_process_groups()


def run_command(argv: list[str], own_process: bool = False) -> int:
    """Runs the command ``argv`` names; returns its exit status: 2 with a one-line message for a user
    error (a mistyped command, a bad flag, a ``--device`` this machine lacks: before any work), 130 or 143
    with one line when Ctrl-C or SIGTERM stops it. In a process of its own, a command that imported torch
    flushes denormals before torch starts its threads."""
    command = next((a for a in argv if not a.startswith("-")), None)
    prog = f"nfeval {command}" if command in COMMANDS else "nfeval"
    try:
        env.check_switches()  # a mistyped switch fails before any work
    except UserError as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return 2
    if command is not None and command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        if close:
            print(f"nfeval: error: unknown command {command!r}; did you mean {close[0]!r}?", file=sys.stderr)
            return 2
    lm_eval = command == "lm-eval"  # everything after it belongs to lm-eval's own parser
    try:
        if not lm_eval:
            parser = build_parser(command if command in COMMANDS else None)
            args = parser.parse_args(argv)
            if args.command is None:
                parser.print_help()
                return 2
        if own_process and (lm_eval or "torch" in sys.modules):  # lm-eval imports it; --help does not
            from .engine.fast import denormals

            denormals.flush_in_this_process()
        if lm_eval:
            return command_module(command).main(argv[argv.index(command) + 1 :])
        return run_parsed(args)
    except interrupts.STOPS as stop:  # a rerun resumes: a traceback would only hide that
        how = "interrupted" if isinstance(stop, KeyboardInterrupt) else "terminated"
        hint = f"; {RESUME[command]}" if command in RESUME else ""
        print(f"{prog}: {how}{hint}", file=sys.stderr)
        return interrupts.exit_status(stop)


def run_parsed(args: argparse.Namespace) -> int:
    """Runs the parsed command ``args``; returns its exit status (2 with a one-line message for a user
    error). A ``--device`` of this machine is checked first, before the command writes anything (with
    ``--launcher slurm`` it is the nodes' of the jobs)."""
    try:
        try:
            if hasattr(args, "device") and getattr(args, "launcher", "local") == "local":
                from .engine.training.parallel import check_device

                check_device(args.device)
            return int(command_module(args.command).run(args) or 0)
        except OSError as e:  # a full or read-only disk, a file in the way: the user's, not a bug
            user = environment_error(e)
            if user is None:
                raise
            raise user from e
    except UserError as e:  # any other exception is a bug: its traceback shows
        if env.enabled(env.TRACEBACK):
            raise
        print(f"nfeval {args.command}: error: {one_line(e)}", file=sys.stderr)
        return 2


def leave_process_groups() -> None:
    """Destroys the torch.distributed process groups a command joined under torchrun; returns None.
    Asks ``sys.modules`` only, so a command that never imported torch does not pay for it, and one
    stopped while importing it does not import it again."""
    joined = getattr(sys.modules.get("torch.distributed"), "is_initialized", None)
    if joined is not None and joined():
        from .engine.training.parallel import leave_process_group

        leave_process_group()


def one_line(error: BaseException) -> str:
    """Returns the error's message on one line (a user error is reported as exactly one line)."""
    return " ".join(str(error).split())


if __name__ == "__main__":
    raise SystemExit(console())
