"""``gpu_check.py``'s ``zeroshot_full_vs_hflm``: nfeval's lm-eval adapter (``NFEvalLM``) against lm-eval's
own ``HFLM`` on the whole validation sets of PIQA, HellaSwag, WinoGrande and OpenBookQA (``DATA/zeroshot``
in the layout of ``../shared/data``; ``gpu_check_data.py`` copies them into the checkout), scoring a random
GPT-2-shaped 125M Hugging Face directory (GPT-2's tokenizer when ``DATA/tokenizer/gpt2`` is there), in
bf16 and in fp32.

Both sides score the same lm-eval requests (``nfeval.tasks``' ``*_local`` tasks, built once), timed as
``lm.loglikelihood`` over all of them: tokenizing, batching, the forwards and the log-probabilities; the
metrics are lm-eval's, from each task's ``process_results`` averaged over the documents.

Each side runs at its strongest batch setting, picked on the device by timing each candidate on every
tenth request: HFLM with ``batch_size="auto"`` and ``max_batch_size`` 64 (its default) or 512. Its
``auto`` detection starts at ``max_batch_size`` and halves until 5 forwards of the longest request fit
(the requests are sorted longest first, so once suffices), so a higher ceiling gives fewer, larger
batches where memory allows; ``auto:N`` re-detects N times for the shorter requests, which only helps
when the first detection was bounded by memory rather than the ceiling, and costs 5 forwards per size
tried each time. Its per-request work (two host syncs and a few small kernels per request) does not
depend on the batch. HFLM computes its log-softmax in fp32 (``softmax_dtype``) also in bf16, as nfeval
does: in bf16 a log-probability near -10.8 would be rounded to 1/16. nfeval's side: ``batch_size="auto"``
with 8,192 (its default) or 65,536 padded tokens a forward. Rounds interleave the sides (the order
alternates); a side's seconds are the median of its rounds. fp32 must give identical acc and acc_norm on
every task (the check fails otherwise); bf16 reports whether they are, and the largest log-likelihood
difference.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import torch
from gpu_check_engine import Setup, Skipped, rounds_within

TASKS = ("piqa", "hellaswag", "winogrande", "openbookqa")
METRICS = ("acc", "acc_norm")
HFLM_CEILINGS = (64, 512)  # max_batch_size under batch_size="auto"
NFEVAL_BATCH_TOKENS = (8192, 65536)  # max_batch_tokens under batch_size="auto"
DTYPES = ("bfloat16", "float32")


def build_tasks(data_dir: str, limit: int | None) -> dict:
    """Returns {task: lm-eval Task with its requests built} of ``TASKS``' ``*_local`` variants reading
    ``data_dir`` (their first ``limit`` documents; all with None)."""
    from nfeval.zeroshot.evaluate import task_manager

    names = [f"{t}_local" for t in TASKS]
    tasks = task_manager(data_dir, names).load(names)["tasks"]
    for task in tasks.values():
        task.build_all_requests(limit=limit, rank=0, world_size=1)
    return tasks


def task_metrics(tasks: dict, requests: list, results: list) -> dict[str, dict[str, float]]:
    """Returns {task: {metric: mean over its documents}} of those of ``METRICS`` the task has (WinoGrande
    has no acc_norm), from ``results`` (one per request
    of ``requests``) through each task's ``process_results``, as lm-eval aggregates them."""
    of = {id(req): res for req, res in zip(requests, results, strict=True)}
    out = {}
    for name, task in tasks.items():
        docs = defaultdict(list)
        for req in task.instances:
            docs[req.doc_id].append(req)
        rows = [
            task.process_results(reqs[0].doc, [of[id(r)] for r in sorted(reqs, key=lambda r: r.idx)])
            for reqs in docs.values()
        ]
        out[name] = {m: statistics.fmean(row[m] for row in rows) for m in METRICS if m in rows[0]}
    return out


def model_dir(s: Setup) -> tuple[str, str]:
    """Returns (a random GPT-2-shaped HF directory: 125M, tiny in the dry run; its tokenizer's name):
    GPT-2's tokenizer from the data folder when there, else a 512-token BPE of the check's corpus."""
    from gpu_check_scoring import hf_gpt2_dir
    from zeroshot_vs_hf import build_model

    gpt2 = s.data_dir / "tokenizer" / "gpt2"
    path = s.work / "hf-gpt2-zeroshot"
    if not gpt2.is_dir():
        return str(hf_gpt2_dir(s, path)), "BPE 512 (the check's corpus)"
    d_model, layers = (64, 2) if s.dry_run else (768, 12)
    return build_model(str(path), d_model, layers, tokenizer_dir=str(gpt2)), "GPT-2"


def candidates(s: Setup, path: str, dtype: str) -> dict[str, dict[str, Callable]]:
    """Returns {side: {setting: a call building that side's LM}} of the batch settings each side tries."""
    from lm_eval.models.huggingface import HFLM

    from nfeval.model_adapters.config import ScoringConfig
    from nfeval.model_adapters.lm import NFEvalLM

    where = str(s.device)
    ceilings = (4, 8) if s.dry_run else HFLM_CEILINGS
    batch_tokens = (256, 1024) if s.dry_run else NFEVAL_BATCH_TOKENS
    hflm = {
        f"auto, max_batch_size {m}": functools.partial(
            HFLM,
            pretrained=path,
            device=where,
            dtype=dtype,
            batch_size="auto",
            max_batch_size=m,
            softmax_dtype="float32",
        )  # fmt: skip
        for m in ceilings
    }
    nfeval = {
        f"auto, max_batch_tokens {t}": functools.partial(
            NFEvalLM,
            path,
            ScoringConfig(
                device=where, dtype=dtype, batch_size="auto", max_batch_tokens=t, progress=False
            ),  # fmt: skip
        )
        for t in batch_tokens
    }
    return {"hflm": hflm, "nfeval": nfeval}


def scoring_seconds(lm, requests: list) -> tuple[float, list]:
    """Returns (seconds, results) of ``lm.loglikelihood(requests)``, the device's queue drained first (its
    results are Python floats: the device's work is done when it returns)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the other side's cached blocks do not crowd this one
    t0 = time.perf_counter()
    results = lm.loglikelihood(requests, disable_tqdm=True)
    return time.perf_counter() - t0, results


def strongest(makers: dict[str, Callable], sample: list) -> tuple[object, str, dict[str, float]]:
    """Builds each candidate LM, times it on ``sample`` (after a few requests untimed); returns (the
    fastest, its setting, {setting: seconds})."""
    best, times = None, {}
    for setting, make in makers.items():
        lm = make()
        lm.loglikelihood(sample[:8], disable_tqdm=True)
        times[setting], _ = scoring_seconds(lm, sample)
        if best is None or times[setting] < times[best[1]]:
            best = (lm, setting)
        lm = None
    return best[0], best[1], times


def compare(s: Setup, path: str, dtype: str, tasks: dict, requests: list) -> dict:
    """Scores ``requests`` with both sides in ``dtype`` at their strongest settings, in interleaved rounds;
    returns each side's setting, the settings' trial seconds, median seconds, the ratio, per-task metrics,
    whether they are identical and the largest log-likelihood difference."""
    short = {"bfloat16": "bf16", "float32": "fp32"}[dtype]
    lms, out = {}, {}
    for side, makers in candidates(s, path, dtype).items():
        lms[side], setting, trials = strongest(makers, requests[::10])
        out |= {f"{short} {side} setting": setting, f"{short} {side} trials s": trials}
    times: dict[str, list[float]] = {side: [] for side in lms}
    results: dict[str, list] = {}

    def one_round(r: int) -> None:
        for side in list(lms)[:: 1 if r % 2 == 0 else -1]:
            seconds, results[side] = scoring_seconds(lms[side], requests)
            times[side].append(seconds)

    out[f"{short} rounds"] = rounds_within(s, one_round)
    metrics = {side: task_metrics(tasks, requests, res) for side, res in results.items()}
    identical = metrics["hflm"] == metrics["nfeval"]
    diff = max(abs(float(a[0]) - float(b[0])) for a, b in zip(results["hflm"], results["nfeval"]))
    if dtype == "float32" and not identical:
        raise RuntimeError(f"fp32 metrics differ: HFLM {metrics['hflm']}, nfeval {metrics['nfeval']}")
    seconds = {side: statistics.median(t) for side, t in times.items()}
    out |= {f"{short} hflm s": seconds["hflm"], f"{short} nfeval s": seconds["nfeval"]}
    out[f"{short} hflm / nfeval"] = seconds["hflm"] / seconds["nfeval"]
    out |= {f"{short} metrics identical": identical, f"{short} max abs loglik diff": diff}
    out |= {f"{short} {side} metrics": m for side, m in metrics.items()}
    return out


def zeroshot_full_vs_hflm(s: Setup) -> dict:
    """Times nfeval's adapter against HFLM on the four tasks' validation sets (a few documents each in the
    dry run) in bf16 and fp32; returns the workload and, per dtype, ``compare``'s figures. Raises Skipped
    when a task's folder is absent."""
    folder = s.data_dir / "zeroshot"
    missing = [t for t in TASKS if not (folder / t).is_dir()]
    if missing:
        raise Skipped(f"{folder}: no {', '.join(missing)} (benchmarks/gpu_check_data.py copies them)")
    tasks = build_tasks(str(folder), 4 if s.dry_run else None)
    requests = [req for task in tasks.values() for req in task.instances]
    path, tokenizer = model_dir(s)
    out = {
        "data": str(folder),
        "documents": {name: len({r.doc_id for r in t.instances}) for name, t in tasks.items()},
        "requests": len(requests),
        "model": f"random GPT-2 shape {'L=2 d=64' if s.dry_run else 'L=12 d=768 (125M)'}, {tokenizer}",
    }
    for dtype in DTYPES:
        out |= compare(s, path, dtype, tasks, requests)
    return out
