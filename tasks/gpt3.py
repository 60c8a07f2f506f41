"""GPT-3 scoring conventions as extra metrics beside lm-eval's own ``acc`` / ``acc_norm``.

``GPT3Task`` is lm-eval's ``ConfigurableTask`` (same prompts, same requests, same ``acc``/``acc_norm``)
plus, per the task YAML's ``metadata``:

- ``acc_per_token``: argmax of the mean log-prob per continuation token (GPT-3's default). It needs the
  continuation's token count, which a model adapter attaches to the log-likelihood it returns as
  ``n_tokens``. nfeval's adapter does; lm-eval's stock models (``hf``, ``vllm``, …) do not, and lm-eval
  gives a task no tokenizer to count them with, so under those the metric is left out of the results, and
  a warning says so once per task (``nfeval leaderboard`` notes why the cell is empty).
- ``acc_uncond`` (``metadata.uncond_context``, e.g. ``"Answer:"``): argmax of
  ``logP(c|ctx) - logP(c|uncond_context)``, GPT-3's normalisation for OpenBookQA. The extra
  unconditional requests come after the task's own, so the task's own requests are unchanged.

A split counts only when the loaded dataset has it, so the eval split is ``test`` when the task names
one and its file is there, else ``validation`` (local StoryCloze/OpenBookQA files may come with either).

Under ``nfeval zeroshot`` (``tasks/task_build.py``'s plan) only the eval split's first ``limit``
documents are processed, and the processed documents and their requests are cached; elsewhere (lm-eval's
own CLI) the task is lm-eval's.
"""

from __future__ import annotations

import logging

import numpy as np
from lm_eval.api.instance import Instance
from lm_eval.api.registry import metric_registry, register_metric
from lm_eval.api.task import ConfigurableTask

from ..base.jsonio import sha256_json
from . import task_build
from .loaders import data_fingerprint

log = logging.getLogger(__name__)
_SAID: set[str] = set()  # the tasks whose missing token counts were reported in this process

# Bump when a metric's definition changes: it is part of every zero-shot cache key.
METRICS_VERSION = 1

METRIC_DESCRIPTIONS = {
    "acc": (
        "argmax of the summed continuation log-prob, unnormalised (lm-eval); for winogrande: partial scoring"
    ),
    "acc_norm": "argmax of summed log-prob / continuation length in characters (lm-eval)",
    "acc_per_token": "argmax of mean log-prob per continuation token (GPT-3 default)",
    "acc_uncond": "argmax of logP(c|ctx) - logP(c|'Answer:') (GPT-3 unconditional normalisation)",
}


def _passthrough(items):
    return items


for _name in ("acc_per_token", "acc_uncond"):
    if _name not in metric_registry:  # this module may be imported twice (package and YAML path)
        register_metric(
            metric=_name, higher_is_better=True, output_type="multiple_choice", aggregation="mean"
        )(_passthrough)


class GPT3Task(ConfigurableTask):
    """A multiple-choice ConfigurableTask that also reports the GPT-3 metrics named in its metric_list."""

    def __init__(self, config: dict | None = None, **kwargs) -> None:
        config = dict(config or {})
        config.pop("class", None)
        self._raw_config = config  # the request-cache key reads it (nfeval zeroshot only)
        self._build: tuple[str, dict | None] | None = None  # (request-cache key, cached payload or None)
        self.original_doc_count: int | None = None  # the eval split's size before the limit cut it
        super().__init__(config=config, **kwargs)

    @property
    def uncond_context(self) -> str | None:
        """Returns the unconditional context for ``acc_uncond``, or None when the task does not use it."""
        if "acc_uncond" not in self._metric_fn_list:
            return None
        return (self.config.metadata or {}).get("uncond_context", "Answer:")

    def _has_split(self, split: str | None) -> bool:
        return split is not None and split in self.dataset

    def has_training_docs(self) -> bool:
        return self._has_split(self.config.training_split)

    def has_validation_docs(self) -> bool:
        return self._has_split(self.config.validation_split)

    def has_test_docs(self) -> bool:
        return self._has_split(self.config.test_split)

    # lm-eval runs process_docs over the whole split on every call (building the task, hashing it,
    # building requests, scoring, per-item records: HellaSwag's 10,042 documents six times a run);
    # each split is processed once here and the same documents are handed out after that.
    def training_docs(self):
        return self._processed(self.config.training_split, super().training_docs)

    def validation_docs(self):
        return self._processed(self.config.validation_split, super().validation_docs)

    def test_docs(self):
        return self._processed(self.config.test_split, super().test_docs)

    def _processed(self, split: str | None, build):
        """Returns ``build()`` (a split's processed documents), built once per loaded split; documents
        from the request cache are processed already."""
        cache = self.__dict__.setdefault("_processed_docs", {})
        source = self.dataset[split] if self._has_split(split) else None
        if self._build and self._build[1] and split == self._build[1]["split"]:
            return source
        if split not in cache or cache[split][0] is not source:
            cache[split] = (source, build())
        return cache[split][1]

    # ---------------------------------------------------------------- nfeval zeroshot's build plan

    def _eval_split(self) -> str:
        test = self.config.test_split
        return test if self._has_split(test) else self.config.validation_split

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        """lm-eval's download; under a build plan, the eval split cut to the plan's limit (before any
        processing) or replaced by the request cache's processed documents."""
        plan = task_build.current()
        if plan is None:
            return super().download(dataset_kwargs, **kwargs)
        canonical = getattr(self.config.custom_dataset, "canonical", None)  # a tasks/loaders.py hook
        if canonical is not None:  # local files: fingerprinted (and served from cache) before loading
            data_dir = (self.config.metadata or {}).get("data_dir")
            if self._use_cached(plan, data_fingerprint(canonical, data_dir)):
                return
        super().download(dataset_kwargs, **kwargs)
        splits = {s: getattr(self.dataset[s], "_fingerprint", None) for s in self.dataset}
        if canonical is None and all(isinstance(f, str) for f in splits.values()):
            # a Hub (or other) dataset: its own fingerprint, known once loaded; none, no request cache
            if self._use_cached(plan, sha256_json(splits), loaded=True):
                return
        split = self._eval_split()
        docs = self.dataset[split]
        self.original_doc_count = len(docs)
        if plan.limit is not None and plan.limit < len(docs):
            self.dataset[split] = docs.select(range(plan.limit))

    def _use_cached(self, plan, fingerprint: str, loaded: bool = False) -> bool:
        """Returns True when the eval documents now come from the request cache (set up from it)."""
        import datasets

        key = task_build.request_key(self._raw_config, type(self), fingerprint, plan.limit)
        payload = task_build.read_requests(key, plan.log) if plan.use_cache else None
        self._build = (key, payload)
        if payload is None:
            return False
        docs = datasets.Dataset.from_list(payload["docs"])
        if loaded:
            self.dataset[payload["split"]] = docs
        else:
            self.dataset = datasets.DatasetDict({payload["split"]: docs})
        self.original_doc_count = payload["original"]
        return True

    def build_all_requests(self, *, limit=None, rank=0, world_size=1, **kwargs) -> None:
        """lm-eval's request building; under a build plan, served from and written to the request
        cache (one process, zero-shot, no chat template: what nfeval zeroshot runs)."""
        plan = task_build.current()
        special = ("samples", "cache_requests", "system_instruction", "apply_chat_template")
        plain = plan is not None and self._build is not None and world_size == 1 and limit == plan.limit
        plain = plain and not any(kwargs.get(k) for k in special) and not self.config.num_fewshot
        if plain and self._build[1] is not None:
            docs = list(self.eval_docs)
            self._instances = task_build.instances(self._build[1], docs, self.config.task,
                                                       self.config.repeats)  # fmt: skip
            return
        super().build_all_requests(limit=limit, rank=rank, world_size=world_size, **kwargs)
        cacheable = all(i.request_type in task_build.CACHED_TYPES for i in self._instances)
        if plain and plan.use_cache and cacheable:
            docs = [dict(d) for d in self.eval_docs]
            task_build.write_requests(self._build[0], self._eval_split(), self.original_doc_count,
                                          docs, self._instances)  # fmt: skip

    def construct_requests(self, doc, ctx, **kwargs):
        requests = super().construct_requests(doc, ctx, **dict(kwargs))
        uncond = self.uncond_context
        if uncond is None:
            return requests
        kwargs.pop("apply_chat_template", None)
        kwargs.pop("chat_template", None)
        delimiter = self.config.target_delimiter
        extra = [
            Instance(
                request_type="loglikelihood",
                doc=doc,
                arguments=(uncond, f"{delimiter}{choice}"),
                idx=len(requests) + i,
                **kwargs,
            )
            for i, choice in enumerate(self.doc_to_choice(doc))
        ]
        return requests + extra

    def _say_no_token_counts(self) -> None:
        """Warns once per task that ``acc_per_token`` is left out: the model gave no token counts."""
        name = self.config.task or type(self).__name__
        if name not in _SAID:
            _SAID.add(name)
            log.warning(
                "%s: acc_per_token (GPT-3's per-token accuracy) left out of the results: this model gives no "
                "token counts with its log-likelihoods (lm-eval's stock models do not); nfeval's model "
                "(nfeval zeroshot, nfeval lm-eval --model nfeval) computes it, also for Hugging Face folders",
                name,
            )

    def gold_index(self, doc) -> int:
        """Returns the index of the correct choice, as lm-eval's process_results finds it."""
        choices = self.doc_to_choice(doc)
        gold = self.doc_to_text(doc) if self.multiple_input else self.doc_to_target(doc)
        if isinstance(gold, str):
            gold = choices.index(gold) if gold in choices else -100
        return gold if isinstance(gold, int) and gold < len(choices) else -100

    def process_results(self, doc, results):
        n = len(self.doc_to_choice(doc))
        own, uncond = results[:n], results[n:]
        out = super().process_results(doc, own)
        lls = np.array([ll for ll, _ in own], dtype=np.float64)
        gold = self.gold_index(doc)
        if "acc_per_token" in self._metric_fn_list:
            counts = [getattr(ll, "n_tokens", None) for ll, _ in own]
            if all(c for c in counts):
                out["acc_per_token"] = float(np.argmax(lls / np.array(counts, dtype=np.float64)) == gold)
            else:
                self._say_no_token_counts()
        if self.uncond_context is not None and len(uncond) == n:
            lls_u = np.array([ll for ll, _ in uncond], dtype=np.float64)
            out["acc_uncond"] = float(np.argmax(lls - lls_u) == gold)
        return out
