"""Why a leaderboard cell is missing although its model has results for the task: the metric the column
ranks by is not in the model's results. GPT-3's per-token accuracy needs each continuation's token count,
which only nfeval's model gives lm-eval (``tasks/gpt3.py``), so results of lm-eval's stock models (``hf``,
``vllm``, …) lack it; lm-eval's own tasks compute neither GPT-3 metric. The board says so in a note, one
per model, instead of a bare "–"."""

from __future__ import annotations

from typing import Any

from .. import tasks as nf_tasks


def absent_reason(entry: dict[str, Any], metric: str) -> str:
    """Returns why a results file's task lacks ``metric``: GPT-3's per-token accuracy needs token counts
    that only nfeval's model gives lm-eval (``tasks/gpt3.py``); lm-eval's own tasks compute neither GPT-3
    metric; else the file's task did not list it."""
    model, listed = entry.get("model"), entry.get("listed") or []
    if metric == "acc_per_token" and metric in listed and model != "nfeval":
        return (
            f"lm-eval's {model or 'stock'} model passes no token counts with its log-likelihoods, which "
            "GPT-3's per-token normalisation needs (only nfeval's model does); nfeval zeroshot --ckpt DIR or "
            "nfeval lm-eval --model nfeval (Hugging Face folders too) fills it"
        )
    if metric in ("acc_per_token", "acc_uncond") and listed and metric not in listed:
        return (
            f"its task {entry['task']} does not compute it (lm-eval's own task; nfeval's "
            f"{nf_tasks.canonical_name(entry['task'])}_local and _hub tasks do)"
        )
    return "not in its results"


def absent_cells(table: dict[str, Any], models: list[tuple[dict, str]]) -> list[dict[str, str]]:
    """Returns, for each model cell shown as missing though the model has results for its task, the row,
    task, metric and why (``absent_reason``)."""
    out = []
    for (model, label), row in zip(models, table["rows"]):
        for column in table["columns"]:
            entry = model["zeroshot"].get(column["task"])
            if entry is not None and row["scores"][column["task"]] is None:
                reason = absent_reason(entry, column["metric"])
                out.append(
                    {"model": label, "task": column["task"], "metric": column["metric"], "reason": reason}
                )
    return out


def absent_notes(table: dict[str, Any], titles: dict[str, str], missing: str) -> list[str]:
    """Returns one note per model and reason for the table's ``absent`` cells: which cells, and why."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for cell in table.get("absent") or []:
        where = f"{titles.get(cell['task'], cell['task'])} {cell['metric']}"
        grouped.setdefault((cell["model"], cell["reason"]), []).append(where)
    return [
        f"{missing} for {model} ({', '.join(cells)}): not in its results; {reason}."
        for (model, reason), cells in grouped.items()
    ]
