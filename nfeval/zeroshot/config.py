"""``ZeroShotConfig``: what ``nfeval zeroshot`` scores (tasks, documents, limit), how it reads the model
and where the results go; ``scoring`` is how the model scores (``model_adapters.config.ScoringConfig``).
Each field that is a flag of ``nfeval zeroshot`` declares it (``base.config_flags`` derives the flags both
ways); the fairseq flags (``--tokenizer``, ``--fairseq-dict``, ``--fairseq-head-scale-bug``) are
``engine.text.fairseq_tokenizer.FairseqReading``'s, shared with ``nfeval generate``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import embedded
from .. import tasks as nf_tasks
from ..base.cli_args import count_or_all, limit_help
from ..base.config_flags import flag_field
from ..base.errors import ConfigError, MissingDataError
from ..engine.checkpoints.torch_files import TRUST_HELP
from ..model_adapters.config import ScoringConfig
from . import lm_eval_layout, task_names

DEFAULT_OUTPUT = "results/zeroshot.json"
DATA_DIR_HELP = (
    f"local task files (layout of ../shared/data/zeroshot), or 'embedded': the {embedded.ZEROSHOT_ROWS}-item "
    f"slices of {nf_tasks.join_titles(embedded.ZEROSHOT_TASKS)} shipped in the package (not "
    f"{nf_tasks.join_titles(nf_tasks.USER_SUPPLIED)}: the licence forbids redistribution); default: the Hub"
)


@dataclass(frozen=True)
class ZeroShotConfig:
    """A zero-shot evaluation of one checkpoint.

    ``tasks``: nfeval's task names or any registered lm-eval task (None: the five); ``data_dir``: local
    task files (None: the Hub; ``embedded``: the slices shipped in the package, ``nfeval.embedded``);
    ``limit``: the first N documents of each task; ``output``: the results
    JSON and its per-item sidecar (None: not written); ``output_path``: a folder (or ``F.json``) that
    gets lm-eval's layout instead (``zeroshot.lm_eval_layout``), with lm-eval's per-sample files when
    ``log_samples``; ``use_cache``: read and write the results cache. A fairseq checkpoint file
    is unpickled beyond tensors and plain configs only with ``trust_checkpoint``; ``tokenizer``,
    ``fairseq_dict`` and ``fairseq_head_scale_bug`` are as ``checkpoint.load`` takes them.
    """

    tasks: Sequence[str] | None = flag_field(
        None,
        f"tasks (comma or space separated): {' '.join(nf_tasks.NAMES)}, or any registered lm-eval task "
        f"(default: {' '.join(nf_tasks.DEFAULT_TASKS)})",
        type=str,
        nargs="+",
    )
    data_dir: str | None = flag_field(None, DATA_DIR_HELP)
    limit: int | None = flag_field(None, limit_help("documents of each task"), type=count_or_all, metavar="N")
    output: str | None = flag_field(
        None,
        f"results JSON, with its per-item F.items.json beside it (default: {DEFAULT_OUTPUT} unless "
        "--output_path is given)",
    )
    output_path: str | None = flag_field(
        None,
        "write lm-eval's layout instead: DIR/<model>/results_<date>.json, nfeval's block inside",
        name="output_path",
        aliases=("--output-path",),
        metavar="DIR",
    )
    log_samples: bool = flag_field(
        False,
        "with --output_path: also lm-eval's samples_<task>_<date>.jsonl (what compare-scores pairs on)",
        name="log_samples",
        aliases=("--log-samples",),
        action="store_true",
    )
    use_cache: bool = flag_field(
        True, "ignore and do not write the results cache", name="no-cache", action="store_false"
    )
    trust_checkpoint: bool = flag_field(False, TRUST_HELP, action="store_true")
    tokenizer: str | None = None
    fairseq_dict: str | None = None
    fairseq_head_scale_bug: bool = False
    scoring: ScoringConfig = field(default_factory=ScoringConfig)

    def checked(self) -> ZeroShotConfig:
        """Returns this config with ``data_dir`` made absolute; raises a UserError naming the flag of a bad
        value (a mistyped name of one of nfeval's tasks included: ``task_names.check``), before any work."""
        data_dir = embedded.zeroshot_dir(self.data_dir)  # "embedded": the slices shipped in the package
        if data_dir is not None and not os.path.isdir(data_dir):
            raise MissingDataError(f"--data-dir {self.data_dir}: not a directory")
        s = self.scoring
        batch_size = None if s.batch_size == "auto" else s.batch_size  # auto: rows bounded by tokens only
        flags = {"--limit": self.limit, "--batch-size": batch_size, "--max-length": s.max_length}
        flags["--max-batch-tokens"] = s.max_batch_tokens
        for flag, value in flags.items():
            if value is not None and not (isinstance(value, int) and value > 0):
                raise ConfigError(f"{flag} {value}: expected a positive integer")
        if self.output and self.output_path:
            raise ConfigError(
                f"--output {self.output} and --output_path {self.output_path}: pass one (F.json with its "
                "F.items.json, or lm-eval's layout under a folder)"
            )
        if self.log_samples and not self.output_path:
            raise ConfigError("--log_samples: lm-eval's samples files go under --output_path DIR; pass it")
        lm_eval_layout.check_output_path(self.output_path)
        task_names.check(self.tasks)
        return dataclasses.replace(self, data_dir=os.path.abspath(data_dir) if data_dir else None)
