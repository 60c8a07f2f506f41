"""Rendering a leaderboard board (``leaderboard.build``) as markdown, CSV or JSON text."""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

from ..analysis.tables import markdown_section
from ..base.escape import code_block, csv_text, markdown_row, markdown_text, text_cell
from . import paired
from .absent import absent_notes
from .leaderboard_read import (
    GROUP_UNITS,
    MISSING,
    TITLES,
    USER_SUPPLIED,
    USER_SUPPLIED_TASKS,
    ZEROSHOT_TASKS,
)

# ---------------------------------------------------------------- rendering


def _si(x: float | None) -> str:
    if x is None:
        return MISSING
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def format_compute(x: float | None, measure: str) -> str:
    if x is None:
        return MISSING
    if measure == "flops":
        mantissa, _, exponent = f"{x:.2g}".partition("e")
        return f"{mantissa}e{int(exponent)}" if exponent else mantissa
    if measure == "tokens":
        return _si(x)
    return f"{x:.3g}"


def _cell(cell: dict[str, Any] | None, count: bool = False) -> str:
    """Returns a score cell's text: percent, its interval and marks, and with ``count`` the items it was
    scored on ("(n=?)": not recorded)."""
    if cell is None:
        return MISSING
    interval = "" if cell.get("half_width") is None else f" ±{100 * cell['half_width']:.1f}"
    mark = ("*" if cell["subset"] else "") + paired.markdown_mark(cell)
    n = f" (n={'?' if cell['n'] is None else cell['n']})" if count else ""
    return f"{100 * cell['value']:.1f}{interval}{mark}{n}"


def _counts_note(table: dict[str, Any], items: str) -> list[str]:
    """Returns the note on the ``(n=…)`` of the columns whose models were scored on different numbers of
    ``items``, if the table has such a column."""
    differ = [c["title"] for c in table["columns"] if c.get("items_differ")]
    if not differ:
        return []
    return [
        f"(n=…): the {items} a score was computed on, shown in the columns whose models were scored on "
        f"different numbers of them ({', '.join(differ)}; another --limit, slice or data): their scores are "
        "not on the same test, so a difference between them is not the models' alone."
    ]


def _missing_cell(row: dict[str, Any], task: str) -> str:
    """Returns the text of an empty score cell: StoryCloze's in a model's row says its data is the user's."""
    return USER_SUPPLIED if row["reference"] is None and task in USER_SUPPLIED_TASKS else MISSING


NEEDS_STORYCLOZE = "needs StoryCloze"


def _lacks_only_user_data(row: dict[str, Any]) -> bool:
    """Returns whether a model row's five-task average is missing only for want of user-supplied data."""
    if row["reference"] is not None or row["average"] is not None:
        return False
    absent = [t for t in ZEROSHOT_TASKS if t in row["scores"] and row["scores"][t] is None]
    return bool(absent) and set(absent) <= set(USER_SUPPLIED_TASKS)


def _average_cell(value: float | None) -> str:
    return MISSING if value is None else f"{100 * value:.1f}"


def _markdown_table(table: dict[str, Any]) -> list[str]:
    partial = table.get("partial_average")
    header = ["Model", "Params", "Arch", "Tokens", "FLOPs", "Device-h"]
    header += [f"{c['title']} ({c['metric']})" for c in table["columns"]] + ["Avg"]
    header += [partial["title"]] if partial else []
    lines = [markdown_row(header), "|---|---:|---|" + "---:|" * (len(header) - 3)]
    group = None
    for row in table["rows"]:
        label = (
            f"*reference: {row['reference']}*"
            if row["reference"]
            else (f"**{row['group']}**" if row["group"] else None)
        )
        if label and label != group:
            lines.append(markdown_row([label] + [""] * (len(header) - 1)))
            group = label
        cells = [
            row["name"],
            _si(row["parameters"]),
            row["architecture"] or MISSING,
            _si(row["tokens"]),
            format_compute(row["flops"], "flops"),
            format_compute(row["device_hours"], "device_hours"),
        ]
        cells += [
            _cell(row["scores"][c["task"]], row["reference"] is None and c.get("items_differ", False))
            if row["scores"][c["task"]]
            else _missing_cell(row, c["task"])
            for c in table["columns"]
        ]
        cells.append(NEEDS_STORYCLOZE if _lacks_only_user_data(row) else _average_cell(row["average"]))
        cells += [_average_cell(row.get("partial_average"))] if partial else []
        lines.append(markdown_row(cells))
    return lines


def _zeroshot_notes(board: dict[str, Any]) -> list[str]:
    table = board["zeroshot"]
    averaged = ", ".join(TITLES[t] for t in ZEROSHOT_TASKS)
    notes = [
        "Accuracy in percent; each column names its lm-eval metric (acc_per_token: GPT-3's per-token length "
        "normalisation; acc_uncond: its unconditional normalisation; acc: unnormalised, which for WinoGrande "
        f"is GPT-3's partial scoring). {MISSING}: not evaluated. Avg: mean of {averaged}; {MISSING} unless "
        "all five are present.",
        "±: half-width of the 95% interval, 1.96 standard errors (lm-eval's, else binomial √(p(1−p)/n) over "
        "the n items); over 50 items a 50% accuracy is ±14 points.",
        "chance: one over the answer choices per item (HellaSwag, OpenBookQA and the corpus cloze task 4: "
        "25%; PIQA, WinoGrande and StoryCloze 2: 50%); a score inside its interval of chance is no evidence "
        "of learning.",
    ]
    if any(c and c["subset"] for r in table["rows"] for c in r["scores"].values()):
        notes.append(
            "*: evaluated on a subset of the task: lm-eval's --limit, or a slice shipped in nfeval "
            "(--data-dir embedded: 200 items of each task, nfeval/embedded/*/SOURCE.md says which)."
        )
    notes += _counts_note(table, "items") + absent_notes(table, TITLES, MISSING)
    user_supplied = [
        TITLES[c["task"]]
        for c in table["columns"]
        if c["task"] in USER_SUPPLIED_TASKS
        and any(r["reference"] is None and r["scores"][c["task"]] is None for r in table["rows"])
    ]
    if user_supplied:
        notes.append(
            f"{USER_SUPPLIED} ({', '.join(user_supplied)}): its licence forbids redistribution, so nfeval "
            "ships none of it; put your copy in the --data-dir folder (docs/zeroshot.md) to fill the cell."
        )
    if table.get("partial_average"):
        titles = ", ".join(TITLES[t] for t in table["partial_average"]["tasks"])
        notes.append(
            f"{table['partial_average']['title']}: mean of {titles}, for rows that lack StoryCloze (their "
            f"Avg says {NEEDS_STORYCLOZE}); the reference and chance rows get it too, so it compares."
        )
    ref = board["reference"]
    if ref:
        columns = {c["task"]: c["metric"] for c in table["columns"]}
        placed = [
            f"{TITLES[t]} {spec['split']} ({spec['convention']}: {spec['metric']})"
            if spec.get("split")
            else f"{TITLES[t]} ({spec['convention']}: {spec['metric']})"
            for t, spec in ref["tasks"].items()
        ]
        differ = [
            TITLES[t] for t, spec in ref["tasks"].items() if columns.get(t) not in (None, spec["metric"])
        ]
        notes.append(
            f"{ref['name']} rows: {ref['citation']}, the sizes nearest ours. Each reference number sits "
            "under the "
            f"column whose metric follows the same convention: {'; '.join(placed)}."
        )
        if differ:
            notes.append(
                f"{ref['name']} cells are {MISSING} for {', '.join(differ)}: this table's metric there "
                "follows another convention."
            )
    return notes


def _glue_notes(table: dict[str, Any]) -> list[str]:
    notes = [
        "GLUE scores ×100 at each task's best learning rate, as in the GLUE summary; each column names its "
        f"metric. {MISSING}: not evaluated. Avg: mean over the tasks shown of the GLUE task score (the mean "
        "of a task's metrics: MRPC/QQP accuracy and F1, STS-B Pearson and Spearman, MNLI matched and "
        f"mismatched); {MISSING} unless every task shown is present.",
        "±: accuracy columns, half-width of the binomial 95% interval over the dev rows (F1, MCC and "
        "correlations have none here; --baseline gives paired intervals of differences).",
        "majority class: the most frequent training label (STS-B: the mean score) predicted for every dev "
        "row, scored with each column's metric; MCC and correlations of a constant are 0.",
    ]
    notes += _counts_note(table, "dev rows")
    if table.get("below_majority"):
        notes.append("Not above the majority class: " + "; ".join(table["below_majority"]) + ".")
    return notes


def _relative(path: str, base_dir: str | None) -> str:
    """Returns ``path`` relative to ``base_dir``, the folder of the page that prints it, so it resolves
    from the page; as given when the page has no folder (stdout)."""
    if base_dir is None:
        return path
    return os.path.relpath(os.path.abspath(path), os.path.abspath(base_dir or os.curdir))


def _stock_source(row: dict[str, Any]) -> str:
    """Returns how a row without a fingerprint was scored: by stock lm-eval's model, on the model it names."""
    if not row.get("model_name"):
        return "no fingerprint"
    shown = text_cell(row["model_name"]).replace("`", "'")
    return f"no fingerprint, scored by lm-eval's {row.get('lm_eval_model') or 'stock'} model on `{shown}`"


def _sources(board: dict[str, Any], base_dir: str | None) -> list[str]:
    lines, seen = [], set()
    for table in (board.get("zeroshot"), board.get("glue")):
        for row in (table or {}).get("rows", []):
            if row["reference"] or row["name"] in seen:
                continue
            seen.add(row["name"])
            # a code span ends only at a backtick: the fingerprint's are replaced
            shown = text_cell(row["fingerprint"][:16]).replace("`", "'") if row["fingerprint"] else None
            fingerprint = f"fingerprint `{shown}`" if shown else _stock_source(row)
            lr = f"{row['lr']['label']}; " if row.get("lr") else ""
            files = ", ".join(_relative(path, base_dir) for path in row["sources"])
            detail = markdown_text(f"{lr}{files}")
            lines.append(f"- {markdown_text(row['name'])}: {fingerprint}; {detail}")
    return lines


def render_markdown(
    board: dict[str, Any],
    title: str = "Leaderboard",
    images: dict[str, str] | None = None,
    comparison: str | None = None,
    base_dir: str | None = None,
    about: list[str] | None = None,
) -> str:
    """Returns the leaderboard as markdown: a zero-shot and/or a GLUE table, notes under each, sources last.
    ``images`` maps "zeroshot"/"curves" to a PNG file name to link; ``comparison`` is a compare table
    (text); ``base_dir``: the folder the page is written to (sources are named relative to it);
    ``about``: paragraphs put under the title (what the board is, and what it can and cannot show)."""
    images = images or {}
    lines = [f"# {title}", ""]
    for paragraph in about or []:
        lines += [markdown_text(paragraph), ""]
    if "zeroshot" in board:
        lines += ["## Zero-shot", ""] + _markdown_table(board["zeroshot"]) + [""]
        lines += [f"- {markdown_text(note)}" for note in _zeroshot_notes(board)] + [""]
        if "zeroshot" in images:
            lines += [f"![Zero-shot accuracy]({images['zeroshot']})", ""]
    if "glue" in board:
        lines += ["## GLUE", ""] + _markdown_table(board["glue"]) + [""]
        lines += [f"- {markdown_text(note)}" for note in _glue_notes(board["glue"])] + [""]
    if comparison or "curves" in images:
        lines += ["## Training runs at equal compute", ""]
        lines += [*code_block(comparison), ""] if comparison else []
        lines += (
            [f"![Validation perplexity vs compute]({images['curves']})", ""] if "curves" in images else []
        )
    if board["group_by"]:
        lines += [
            f"Rows are grouped by training {GROUP_UNITS[board['group_by']]}: a group holds runs within its "
            "range "
            "(compute-matched).",
            "",
        ]
    lines += paired.markdown_section(board)
    if board.get("analysis"):  # `nfeval analyze` results given with --analysis
        lines += markdown_section(board["analysis"])
    lines += ["## Sources", ""] + _sources(board, base_dir)
    return "\n".join(lines) + "\n"


# The CSV column of the markdown's "Avg w/o StoryCloze" (rows lacking the user-supplied task)
PARTIAL_AVERAGE_CSV = "zeroshot_average_without_storycloze"
# A CSV row's model columns, after its name.
CSV_MODEL_FIELDS = (
    "reference",
    "group",
    "parameters",
    "architecture",
    "tokens",
    "flops",
    "device_hours",
    "fingerprint",
)


def render_csv(board: dict[str, Any]) -> str:
    """Returns one CSV row per model (reference rows included) with raw fractions and, per score column,
    the items each was scored on (``TASK/METRIC/n``); missing scores and unknown counts are empty."""
    tables = [(name, board[name]) for name in ("zeroshot", "glue") if name in board]
    header = ["model", *CSV_MODEL_FIELDS]
    for name, table in tables:
        header += [f"{c['task']}/{c['metric']}" for c in table["columns"]] + [f"{name}_average"]
        header += [PARTIAL_AVERAGE_CSV] if table.get("partial_average") else []
        header += [f"{c['task']}/{c['metric']}/n" for c in table["columns"]]
        if board.get("paired"):
            header += [
                k for c in table["columns"] for k in paired.csv_fields(f"{c['task']}/{c['metric']}", None)
            ]
    rows: dict[str, dict[str, Any]] = {}
    for name, table in tables:
        for row in table["rows"]:
            out = rows.setdefault(
                row["name"],
                {k: row[k] for k in CSV_MODEL_FIELDS},
            )
            out["model"] = row["name"]
            for c in table["columns"]:
                cell = row["scores"][c["task"]]
                out[f"{c['task']}/{c['metric']}"] = None if cell is None else cell["value"]
                out[f"{c['task']}/{c['metric']}/n"] = None if cell is None else cell.get("n")
                out.update(paired.csv_fields(f"{c['task']}/{c['metric']}", cell))
            out[f"{name}_average"] = row["average"]
            if table.get("partial_average"):
                out[PARTIAL_AVERAGE_CSV] = row.get("partial_average")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    writer.writerow({k: csv_text(k) for k in header})
    for out in rows.values():
        writer.writerow({k: "" if out.get(k) is None else csv_text(out[k]) for k in header})
    return buf.getvalue()


def render(
    board: dict[str, Any],
    fmt: str,
    title: str = "Leaderboard",
    images: dict[str, str] | None = None,
    comparison: str | None = None,
    base_dir: str | None = None,
    about: list[str] | None = None,
) -> str:
    """Returns ``board`` rendered as ``fmt`` (md, csv or json); ``base_dir`` and ``about`` as
    ``render_markdown``'s."""
    if fmt == "md":
        return render_markdown(board, title, images, comparison, base_dir, about)
    if fmt == "csv":
        return render_csv(board)
    return json.dumps(board, indent=2, default=str) + "\n"
