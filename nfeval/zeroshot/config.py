"""``ZeroShotConfig``: what ``nfeval zeroshot`` scores (tasks, documents, limit), how it reads the model
and where the results go; ``scoring`` is how the model scores (``model_adapters.config.ScoringConfig``)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import embedded
from ..base.errors import ConfigError, MissingDataError
from ..model_adapters.config import ScoringConfig
from . import task_names


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

    tasks: Sequence[str] | None = None
    data_dir: str | None = None
    limit: int | None = None
    output: str | None = None
    output_path: str | None = None
    log_samples: bool = False
    use_cache: bool = True
    trust_checkpoint: bool = False
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
        task_names.check(self.tasks)
        return dataclasses.replace(self, data_dir=os.path.abspath(data_dir) if data_dir else None)
