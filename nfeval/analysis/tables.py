"""Tables of the analysis results (markdown, readable in a terminal too), and the leaderboard's
analysis section. Pure Python: reads the JSON the analyses write, imports no torch."""

from __future__ import annotations

from typing import Any

from ..base.errors import DataError
from ..base.escape import markdown_row
from ..base.jsonio import load_json

ANALYSES = ("grads", "gains", "stability")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Returns the lines of a markdown table; columns after the first are right-aligned."""
    lines = [markdown_row(header), "|---" + "|---:" * (len(header) - 1) + "|"]
    return lines + [markdown_row(row) for row in rows]


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "–" if x is None else format(x, fmt)


def grads_table(result: dict[str, Any]) -> list[str]:
    """Returns Figure 3/7's numbers: one row per layer, per model its value and ratio to the baseline."""
    models = result["models"]
    header = ["layer"] + [f"{m['name']} {result['kind']}" for m in models]
    header += [f"{m['name']} ÷ {result['baseline']}" for m in models]
    n_layer = max(len(m["values"][result["kind"]]) for m in models)
    kind = result["kind"]

    def cell(series: list[float], layer: int, fmt: str) -> str:
        return format(series[layer], fmt) if layer < len(series) else ""

    rows = [
        [str(layer)]
        + [cell(m["values"][kind], layer, ".3e") for m in models]
        + [cell(m["relative"], layer, ".2f") for m in models]
        for layer in range(n_layer)
    ]
    spread = [
        f"{m['name']}: last/first layer {m['values'][kind][-1] / m['values'][kind][0]:.2f}" for m in models
    ]
    return markdown_table(header, rows) + ["", "; ".join(spread)]


def gains_table(result: dict[str, Any]) -> list[str]:
    """Returns one row per model and layer: mean FFN-LN γ, post-attention-LN γ, head gains, λ_resid."""
    header = ["model", "layer", "FFN LN γ", "attn LN γ", "head gains (min / mean / max)", "λ_resid"]
    rows = []
    for m in result["models"]:
        g = m["gains"]
        for layer in range(m["info"]["n_layer"]):
            heads = g["head_gain"][layer] if g["head_gain"] else None
            head_text = (
                f"{min(heads):.3f} / {sum(heads) / len(heads):.3f} / {max(heads):.3f}" if heads else "–"
            )
            rows.append(
                [
                    m["name"],
                    str(layer),
                    _num(g["ffn_ln_mean"][layer] if g["ffn_ln_mean"] else None, ".4f"),
                    _num(g["attn_ln_mean"][layer] if g["attn_ln_mean"] else None, ".4f"),
                    head_text,
                    _num(g["resid_gain_mean"][layer] if g["resid_gain_mean"] else None, ".4f"),
                ]
            )
    return markdown_table(header, rows)


def stability_table(result: dict[str, Any]) -> list[str]:
    """Returns one row per preset: updates survived (mean ± std over seeds), LR at divergence, logits."""
    n = result["settings"]["updates"]
    header = [
        "preset",
        "updates survived",
        "seeds surviving all",
        "LR at divergence",
        "max |q·k|/√d",
        "fp16 overflow",
    ]
    rows = []
    for s in result["summary"]:
        survived = f"{s['survived_mean']:.1f} ± {s['survived_std']:.1f}"
        if s["survived_all"] == s["seeds"]:
            survived = f"survived all {n}"
        rows.append(
            [
                s["preset"],
                survived,
                f"{s['survived_all']}/{s['seeds']} seeds",
                _num(s["lr_at_divergence_mean"]),
                _num(s["attn_logit_max"], ".4g"),
                f"{s['fp16_overflow_seeds']}/{s['seeds']} seeds",
            ]
        )
    lr = result["settings"]
    if "criterion" in result:
        rule = result["criterion"]["text"]
    else:  # a result of the old criterion
        rule = f"non-finite loss/gradient or loss > first + {lr['tolerance']} nats"
    note = f"{n} updates, LR {lr['lr_start']:g} → {lr['lr_end']:g} geometric, seeds {result['seeds']}; "
    note += f"divergence: {rule}"
    return markdown_table(header, rows) + ["", note]


TABLES = {"grads": grads_table, "gains": gains_table, "stability": stability_table}
TITLES = {
    "grads": "Gradient norm by layer (Figures 3 and 7)",
    "gains": "Learned NormFormer gains by layer (Figures 4 and 6)",
    "stability": "Increasing-LR stability test (Figure 5)",
}


def load_analysis(path: str) -> dict[str, Any]:
    """Returns an analysis JSON written by ``nfeval analyze``; a UserError if it is not one."""
    data = load_json(path, hint="expected a file `nfeval analyze` wrote")
    if data.get("analysis") not in ANALYSES:
        raise DataError(
            f"{path}: field 'analysis': expected one of {ANALYSES} (a file `nfeval analyze` wrote)"
        )
    return data


def markdown_section(results: list[dict[str, Any]]) -> list[str]:
    """Returns the leaderboard's "Analyses" section for analysis results (as ``load_analysis`` returns)."""
    lines = ["## Analyses", ""]
    for result in results:
        lines += [f"### {TITLES[result['analysis']]}", ""] + TABLES[result["analysis"]](result) + [""]
    return lines
