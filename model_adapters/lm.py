"""``NFEvalLM``: lm-eval's ``TemplateLM`` over nfeval checkpoints and Hugging Face causal LMs.

Registered in lm-eval as ``nfeval`` when ``nfeval.model_adapters.lm`` is imported, which lm-eval's own
``lm-eval`` command does not do; ``nfeval lm-eval`` is that command with nfeval's model and tasks
registered::

    nfeval lm-eval --model nfeval --model_args pretrained=RUN_DIR,dtype=bfloat16 --tasks piqa_local \
        --data-dir DIR

From Python, import ``nfeval.model_adapters.lm`` first, then ``lm_eval.simple_evaluate(model="nfeval",
model_args="pretrained=RUN_DIR", ...)``, or pass an instance: ``model=NFEvalLM(path, ScoringConfig(...))``.
Plain ``lm-eval`` scores an ``nfeval export-hf`` folder with its stock ``hf`` model instead.
Under torchrun each process scores its shard of the documents (lm-eval splits them by ``rank``) and
the results meet on rank 0 through ``all_gather``/``gather_object``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import (
    handle_stop_sequences,
    has_bos_prefix,
    normalize_gen_kwargs,
    postprocess_generated_text,
)

from ..base.errors import ConfigError
from ..base.progress import library_bars_shown
from ..engine.checkpoints.checkpoint import Checkpoint
from ..engine.checkpoints.loading import ModelIdentity
from ..engine.fast.denormals import flushing
from ..engine.fast.speed import accelerate
from ..engine.inference.backend import nfeval_backend
from ..engine.inference.generate import Sampling
from ..engine.model.dtypes import SHORT_NAMES, torch_dtype
from ..engine.training.budget import peak_flops
from ..engine.training.parallel import join_process_group, resolve_device
from . import context_window
from .backends import open_backend
from .config import TOO_LONG_CHOICES, ScoringConfig
from .hf_backend import HFBackend
from .scorer import DEFAULT_BATCH_TOKENS, ScoringStats, score


def init_distributed(device: str | None) -> tuple[int, int, torch.device]:
    """Returns (rank, world size, device), joining the torchrun process group when launched under
    torchrun. A bare ``cuda`` means this process's GPU; without CUDA it warns and uses the CPU (as
    lm-eval's HFLM does)."""
    resolved = resolve_device(device, cpu_fallback=True)
    rank, world = join_process_group(resolved)
    return rank, world, resolved


@register_model("nfeval")
class NFEvalLM(TemplateLM):
    """Scores an nfeval checkpoint (run dir or checkpoint dir) or a HF causal-LM directory (a path, a
    ``ModelIdentity``, a read ``Checkpoint``, or a loaded transformers model with its ``tokenizer``) as
    ``config`` says. lm-eval builds it from ``--model_args`` (``create_from_arg_string``)."""

    backend = "causal"

    def __init__(
        self,
        pretrained: str | ModelIdentity | Checkpoint | Any,
        config: ScoringConfig = ScoringConfig(),
        tokenizer: Any = None,
    ) -> None:
        super().__init__()
        self._rank, self._world_size, self._device = init_distributed(config.device)
        self.dtype = torch_dtype(config.dtype)
        fold, max_length, hf = config.fold_head_scale, config.max_length, config.hf_forward
        if isinstance(pretrained, (str, ModelIdentity)):
            self.model_backend = open_backend(
                pretrained, self._device, self.dtype, fold, max_length, tokenizer, hf_forward=hf
            )
        elif isinstance(pretrained, Checkpoint):  # read (``checkpoint.read``) or loaded
            self.model_backend = accelerate(
                nfeval_backend(pretrained, self._device, self.dtype, fold, max_length)
            )
        else:  # a loaded transformers model
            if tokenizer is None:
                raise ValueError("NFEvalLM: a transformers model needs its tokenizer (tokenizer=...)")
            loaded = HFBackend(pretrained.to(self._device), tokenizer, self._device, max_length)
            self.model_backend = accelerate(loaded)
        # "auto": batches bounded by tokens only; a number also bounds the rows (packed rows) per batch
        auto = str(config.batch_size).startswith("auto")
        self.batch_size = int(config.max_batch_size or 64) if auto else int(config.batch_size)
        self.max_rows = config.max_batch_size if auto else self.batch_size
        self.max_batch_tokens = config.max_batch_tokens or DEFAULT_BATCH_TOKENS
        self.packed = config.pack and self.model_backend.accepts_tree_mask()
        self.scoring_stats = ScoringStats()  # summed over every scoring call (the FLOP/s report)
        self.add_bos_token = (
            self.model_backend.add_bos_default if config.add_bos_token is None else config.add_bos_token
        )
        self.custom_prefix_token_id = config.prefix_token_id
        self.progress = config.progress
        if config.too_long not in TOO_LONG_CHOICES:
            raise ConfigError(f"too_long={config.too_long!r}: expected one of {', '.join(TOO_LONG_CHOICES)}")
        self.too_long = config.too_long
        self._truncated: dict[str, list[int]] = {}  # task -> documents scored truncated
        self._instances: list | None = None  # within loglikelihood: lm-eval's requests, in order
        self.tokenizer = getattr(self.model_backend, "tokenizer", None)
        self._encoded: dict[tuple[str, bool | None], list[int]] | None = None  # see loglikelihood
        self._scoring_bar: bool | None = None  # within loglikelihood: whether its caller wants bars

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> NFEvalLM:
        """Returns the model of lm-eval's ``--model_args`` (``pretrained=RUN,dtype=bf16``) and its
        ``batch_size``, ``max_batch_size`` and ``device`` (``additional_config``)."""
        return cls.create_from_arg_obj(lm_utils.simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict | None = None) -> NFEvalLM:
        """Returns the model of lm-eval's model arguments as a dict (``simple_evaluate(model="nfeval",
        model_args={...})``): ``pretrained``, ``tokenizer`` and ``ScoringConfig`` fields."""
        args = {**arg_dict, **{k: v for k, v in (additional_config or {}).items() if v is not None}}
        if "pretrained" not in args:
            raise ConfigError("--model_args: pretrained=PATH is missing (an nfeval run or a HF folder)")
        pretrained, tokenizer = args.pop("pretrained"), args.pop("tokenizer", None)
        return cls(pretrained, ScoringConfig.from_model_args(args), tokenizer=tokenizer)

    # ---------------------------------------------------------------- identity and tokenization

    @property
    def eot_token_id(self) -> int:
        return self.model_backend.eot_id

    @property
    def prefix_token_id(self) -> int:
        return (
            self.custom_prefix_token_id
            if self.custom_prefix_token_id is not None
            else self.model_backend.prefix_id
        )

    @property
    def max_length(self) -> int:
        return self.model_backend.max_length

    @property
    def max_gen_toks(self) -> int:
        return 256

    @property
    def tokenizer_name(self) -> str:
        return f"nfeval-{self.model_backend.kind}"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        if self._encoded is None:
            return self._tok_encode(string, add_special_tokens)
        key = (string, add_special_tokens)
        if key not in self._encoded:
            self._encoded[key] = self._tok_encode(string, add_special_tokens)
        return list(self._encoded[key])

    def _tok_encode(self, string: str, add_special_tokens: bool | None) -> list[int]:
        if add_special_tokens is None:
            if has_bos_prefix(string, self.model_backend.token_text(self.prefix_token_id)):
                add_special_tokens = False
            elif self.add_bos_token is not None:
                add_special_tokens = self.add_bos_token
        if (
            self.model_backend.kind == "nfeval"
        ):  # the nfeval tokenizer adds nothing itself: the prefix is ours to add
            ids = self.model_backend.encode(string, False)
            return [self.prefix_token_id] + ids if add_special_tokens else ids
        return self.model_backend.encode(string, add_special_tokens)

    def tok_decode(self, tokens: list[int]) -> str:
        return self.model_backend.decode(tokens)

    # ---------------------------------------------------------------- scoring

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """lm-eval's, with each distinct text tokenized once per call: the choices of a document share
        its context, which lm-eval tokenizes once per choice."""
        self._encoded, self._scoring_bar, self._instances = {}, not disable_tqdm, list(requests)
        # lm-eval's own "Tokenizing inputs" bar: on a terminal only (in a log it writes \r lines);
        # ours (the scoring bar) prints plain lines there, so it follows the caller's disable_tqdm
        quiet = disable_tqdm or not library_bars_shown(self.progress and self.rank == 0)
        try:
            return super().loglikelihood(requests, disable_tqdm=quiet)
        finally:
            self._encoded, self._scoring_bar, self._instances = None, None, None

    def _loglikelihood_tokens(
        self, requests, disable_tqdm: bool = False, **kwargs
    ) -> list[tuple[float, bool]]:
        # a continuation past the context window: refused, naming its document, or truncated as asked
        pairs = context_window.fit(requests, self._instances, self.max_length, self.too_long, self._truncated)
        # through loglikelihood, disable_tqdm is the one it gave lm-eval; the caller's is _scoring_bar
        wanted = not disable_tqdm if self._scoring_bar is None else self._scoring_bar
        # engine models read oneDNN's blocked weights meanwhile (requests: a bound on the batches)
        with self.model_backend.speed.holding_weights(self.model_backend.model, steps=len(pairs)):
            results = self._score(pairs, wanted)
        for (request, _, _), answer in zip(requests, results):
            if request is not None:
                self.cache_hook.add_partial("loglikelihood", request, answer)
        return results

    def _score(self, pairs, progress: bool) -> list[tuple[float, bool]]:
        return score(
            self.model_backend.features_at,
            pairs,
            max_length=self.max_length,
            device=self._device,
            pad_id=self.model_backend.pad_id,
            packed=self.packed,
            max_batch_tokens=self.max_batch_tokens,
            max_rows=self.max_rows,
            shape=self.model_backend.shape(),
            stats=self.scoring_stats,
            progress=self.progress and self.rank == 0 and progress,
        )

    def too_long_record(self) -> dict[str, dict[str, Any]]:
        """Returns {task: {"doc_ids", "max_length"}} of the documents scored truncated so far (``too_long``
        "truncate"; ``context_window``)."""
        return {
            task: {"doc_ids": sorted(ids, key=str), "max_length": self.max_length}
            for task, ids in self._truncated.items()
        }

    def scoring_report(self) -> dict[str, Any]:
        """Returns this model's scoring work so far: wall time, model FLOPs, achieved FLOP/s and its
        fraction of the device's peak (``budget.peak_flops``: the best measured matmul rate on CPU)."""
        name = SHORT_NAMES.get(self.dtype, "fp32")
        peak, source = peak_flops(SimpleNamespace(peak_flops=None, dtype=name), self._device)
        return {
            "forward_by": self.model_backend.forward_by,
            "cpu_linear_kernel": self.model_backend.linear_kernel(),
            "cpu_flush_denormals": flushing(),
            **self.scoring_stats.report(peak, source),
        }

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owners = [], []
        for i, (string,) in enumerate(req.args for req in requests):
            tokens = self.tok_encode(string, add_special_tokens=False)
            for ctx, cont in map(
                lm_utils.make_disjoint_window,
                lm_utils.get_rolling_token_windows(
                    token_list=tokens,
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, ctx, cont))
                owners.append(i)
        totals = [0.0] * len(requests)
        for owner, (ll, _) in zip(owners, self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)):
            totals[owner] += float(ll)
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Generates for every request; requests with the same settings are generated in batches."""
        groups: dict[str, list[int]] = {}  # generation settings (JSON) -> request indices
        for i, req in enumerate(requests):
            kwargs = normalize_gen_kwargs(req.args[1], self.max_gen_toks)
            groups.setdefault(json.dumps(kwargs, sort_keys=True, default=str), []).append(i)
        eos = self.model_backend.token_text(self.eot_token_id)
        progress = self.progress and not disable_tqdm and self.rank == 0
        out: list[str] = [""] * len(requests)
        for key, members in groups.items():
            kwargs = json.loads(key)
            until = handle_stop_sequences(kwargs.get("until"), eos=eos)
            max_new = int(kwargs["max_gen_toks"])
            keep = max(1, self.max_length - max_new)  # the context's most recent tokens
            prompts = [self.tok_encode(requests[i].args[0])[-keep:] for i in members]
            sampling = sampling_of(kwargs)
            new = self.model_backend.generate(prompts, max_new, sampling, until, self.batch_size, progress)
            for i, ids in zip(members, new):
                text = postprocess_generated_text(self.tok_decode(ids), until, None)
                self.cache_hook.add_partial("generate_until", requests[i].args, text)
                out[i] = text
        return out

    # ---------------------------------------------------------------- data parallel (lm-eval >= 0.4.12 hooks)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Returns the concatenation of ``tensor`` from every rank (0-d tensors become 1-d)."""
        if self.world_size == 1:
            return tensor
        t = tensor.reshape(1) if tensor.dim() == 0 else tensor
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts)

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Returns the list of ``obj`` from every rank on ``dst``, None elsewhere."""
        if self.world_size == 1:
            return [obj]
        gathered = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, gathered, dst=dst)
        return gathered

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()


def sampling_of(kwargs: dict[str, Any]) -> Sampling:
    """Returns the Sampling for normalized lm-eval generation kwargs (temperature 0 when not sampling)."""
    return Sampling(temperature=float(kwargs.get("temperature") or 0.0), top_k=int(kwargs.get("top_k") or 0),
                    top_p=float(kwargs.get("top_p") or 1.0), seed=int(kwargs.get("seed") or 0))  # fmt: skip
