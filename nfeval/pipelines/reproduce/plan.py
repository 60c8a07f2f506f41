"""What ``nfeval reproduce`` runs, as data: the training runs and the experiments (one per table or
figure of Shleifer, Weston & Ott 2021, plus Xiong et al. 2020), each with the paper's finding in one line
and the runs it reads, at one of the pipelines' scales (``pipelines.scales``: sizes and budgets).

Runs are shared between experiments: the Pre-LN and NormFormer causal LMs of Figure 2 are also the
baseline and the full model of Table 4 and the warm-up runs of the Xiong et al. check, so every run of
one output folder has the same budget and recipe, and differs from the others only where its row says.

Equal time, fixed before training (the paper's protocol: the same GPU time for every model, each with
its complete LR schedule). The Pre-LN baseline of each objective gets the scale's S steps; before any
training, every other run's step-time ratio to it is measured *paired* (``engine.training.step_ratio``:
interleaved bursts of both in one process, so machine load cancels) and the run gets S ÷ ratio steps.
Every run then ends in the baseline's time on its own decayed schedule, and the equal-time readings are
the runs' final perplexities. The ratios, with their confidence intervals, are measured once per output
folder (``<out>/step_ratios.json``) and reused by every seed and section. A time budget (``--minutes``)
instead calibrates each run's step count on its own, which on a machine whose load changes (a shared
CPU) gives the runs of one comparison unequal time; it is opt-in.

Learning rates are tuned per architecture before the comparison runs (``tuning``; ``--no-tune`` trains
every run at the scale's ``lr`` and marks every verdict untuned).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..scales import Scale

EQUAL_TIME, EQUAL_UPDATES = "equal time", "equal updates"


@dataclass(frozen=True)
class RunSpec:
    """One training run: objective, architecture preset, model-flag overrides, warm-up override, the
    Table 4/5 variations resolved against the scale by ``run_overrides``, and its budget protocol:
    equal time (the baseline's steps ÷ the paired step-time ratio) or equal updates (the baseline's steps)."""

    objective: str  # clm | mlm
    arch: str  # engine.model.config.ARCHITECTURES key
    model: dict[str, Any] = field(default_factory=dict)
    warmup: float | None = None  # None: the scale's; 0: no warm-up (the LR starts at its peak)
    label: str = ""
    setting: str | None = None  # a TABLE5_SETTINGS key: TrainConfig changes of Table 5
    widen_to_match: str | None = None  # an architecture whose parameter count the widened FFN reaches
    widen_hidden: bool = False  # d_model widened as the paper widened its baseline (PAPER_WIDTH_CONTROL)
    ffn_matched_to: str | None = None  # an architecture whose parameter count the FFN width comes nearest
    protocol: str = EQUAL_TIME


# Table 5's settings, each a function of the scale returning TrainConfig changes ("lr_factor" scales
# the run's LR, tuned or not): the three kinds the paper names (longer warm-up, GPT-3's settings,
# gradient clipping). The paper's text was not at hand: each is nfeval's reconstruction. GPT-3's 125M
# recipe (Brown et al. 2020, Table 2.1 and appendix B: LR 6e-4, Adam β2 0.95, clip 1.0, weight decay
# 0.1) is expressed against fairseq's NormFormer recipe (LR 3e-3, β2 0.98, no clipping, weight decay
# 0.01), so its LR factor is 6e-4 ÷ 3e-3.
TABLE5_SETTINGS: dict[str, tuple[str, Callable[[Scale], dict[str, Any]]]] = {  # key: (label, changes)
    "warmup4x": ("longer warm-up (4x)", lambda s: {"warmup": 4 * s.warmup}),
    "gpt3": (
        "GPT-3 settings (LR ÷ 5, β2 0.95, clip 1.0, weight decay 0.1)",
        lambda s: {"lr_factor": 0.2, "beta2": 0.95, "clip_grad": 1.0, "weight_decay": 0.1},
    ),
    "clip1": ("gradient clipping 1.0", lambda s: {"clip_grad": 1.0}),
}
# {setting: (Pre-LN run, NormFormer run)}
TABLE5 = {name: (f"clm-prenorm-{name}", f"clm-normformer-{name}") for name in TABLE5_SETTINGS}

# The paper's width control (§5, Table 4): its 125M Pre-LN baseline with the hidden size widened 768 -> 780.
# At every scale the widened run adds at least the share of parameters this added at the paper's shape
# (run_overrides.wider_hidden states the rule and the FFN width it assumes).
PAPER_WIDTH_CONTROL = {"scale": "125M", "d_model": 780}

# Table 4's ablations are the NormFormer preset with exactly one fairseq flag changed; its controls add
# an op a ModelConfig field defines.
RUNS: dict[str, RunSpec] = {
    "clm-prenorm": RunSpec("clm", "prenorm", label="Pre-LN baseline"),
    "clm-normformer": RunSpec("clm", "normformer", label="NormFormer"),
    "clm-no-attn-ln": RunSpec("clm", "normformer", {"scale_attn": False}, label="− post-attn LN"),
    "clm-no-ffn-ln": RunSpec("clm", "normformer", {"scale_fc": False}, label="− FFN LN"),
    "clm-no-headscale": RunSpec("clm", "normformer", {"scale_heads": False}, label="− HeadScale"),
    "clm-headscale-before": RunSpec(
        "clm",
        "normformer",
        {"head_scale_position": "before_out_proj"},
        label="NormFormer, HeadScale before out_proj (the paper's formula)",
    ),
    "clm-resscale": RunSpec("clm", "normformer", {"scale_resids": True}, label="+ ResScale"),
    # read as one LayerNorm each on q, k and v (engine/model/config.py says why; the paper's text was not
    # at hand)
    "clm-more-ln": RunSpec("clm", "normformer", {"qkv_norm": True}, label="+ 3 more LayerNorms (on q, k, v)"),
    # GeGLU's FFN has a third matrix: its width is narrowed to the Pre-LN baseline's parameter count
    "clm-ffn-glu-matched": RunSpec(
        "clm",
        "normformer",
        {"ffn_glu": True, "scale_fc": False},
        ffn_matched_to="prenorm",
        label="FFN GeGLU instead of FFN LN, at Pre-LN's parameters",
    ),
    "clm-rmsnorm": RunSpec(
        "clm",
        "normformer",
        {"normformer_norm": "rmsnorm"},
        label="extra norms without bias and mean-centring",
    ),
    "clm-resscale-attn": RunSpec(
        "clm", "normformer", {"scale_resids_attn": True}, label="λresid on the attention residual"
    ),
    "clm-resscale-scalar": RunSpec(
        "clm", "normformer", {"scale_resids": True, "resid_scale_scalar": True}, label="scalar λresid"
    ),
    "clm-prenorm-wider": RunSpec(
        "clm", "prenorm", widen_hidden=True, label="Pre-LN, hidden size widened as the paper's width control"
    ),
    "clm-prenorm-wide": RunSpec(
        "clm", "prenorm", widen_to_match="normformer", label="Pre-LN, FFN widened to NormFormer's parameters"
    ),
    "clm-postnorm": RunSpec("clm", "postnorm", label="Post-LN, warm-up"),
    "clm-postnorm-no-warmup": RunSpec("clm", "postnorm", warmup=0, label="Post-LN, no warm-up"),
    "clm-prenorm-no-warmup": RunSpec("clm", "prenorm", warmup=0, label="Pre-LN, no warm-up"),
    "mlm-prenorm": RunSpec("mlm", "prenorm", label="Pre-LN masked LM"),
    "mlm-normformer": RunSpec("mlm", "normformer", label="NormFormer masked LM"),
}
for _name, (_pre, _nf) in TABLE5.items():
    _label = TABLE5_SETTINGS[_name][0]
    RUNS[_pre] = RunSpec("clm", "prenorm", label=f"Pre-LN, {_label}", setting=_name)
    RUNS[_nf] = RunSpec("clm", "normformer", label=f"NormFormer, {_label}", setting=_name)
ABLATIONS = ("clm-no-attn-ln", "clm-no-ffn-ln", "clm-no-headscale")
CONTROLS = ("clm-more-ln", "clm-ffn-glu-matched", "clm-rmsnorm", "clm-resscale-attn", "clm-resscale-scalar")
# the paper's width control, then the baseline widened to NormFormer's own parameter count
WIDTH_CONTROLS = ("clm-prenorm-wider", "clm-prenorm-wide")
TABLE4 = (
    "clm-normformer",
    "clm-headscale-before",
    *ABLATIONS,
    "clm-resscale",
    *CONTROLS,
    *WIDTH_CONTROLS,
    "clm-prenorm",
)
UPDATES = "@updates"  # the suffix of a Table 4 run's twin trained for the baseline's number of updates


def at_equal_updates(key: str) -> str:
    """Returns the run of ``key``'s model trained for the baseline's updates (Table 4's protocol): the
    baseline itself, or ``key``'s equal-updates twin."""
    return key if key == "clm-prenorm" else key + UPDATES


for _key in TABLE4:
    if at_equal_updates(_key) != _key:
        RUNS[at_equal_updates(_key)] = dataclasses.replace(RUNS[_key], protocol=EQUAL_UPDATES)

# The claims declared primary before any run (the rest are secondary; verdict.adjust corrects each
# family for its many tests): Figure 2's CLM gap at equal time, Table 4's baseline vs NormFormer at
# the paper's fixed number of updates, and Figure 3's Pre-LN pattern at the beginning of training.
PRIMARY_CLAIMS = ("fig2-clm/equal-time", "table4/baseline", "fig3/prenorm-early")
# The primary claims read again at every LR their tunes cannot tell from the best (``pipelines.lr_band``):
# {claim: (baseline run, candidate run)}; these runs also train their band's LRs on the judged seeds.
LR_BAND_CLAIMS = {"fig2-clm/equal-time": ("clm-prenorm", "clm-normformer")}
# The margin of the equivalence test (verdict.equivalence) of every claim in log-PPL, fixed before the
# runs: a 2% perplexity difference. A report says an effect is absent only when TOST rejects this margin.
LOG_PPL_MARGIN = 0.02


@dataclass(frozen=True)
class Experiment:
    """One section of the report: a table or figure of the paper and the runs it reads."""

    name: str  # --only key
    title: str
    reference: str
    finding: str  # the paper's finding, one line
    runs: tuple[str, ...]
    protocol: str  # how the runs are matched, as the paper states it for this claim (or nfeval's choice)


# In the paper's order: §3.1 (Figure 2, Table 2), §3.2 (Table 3), §4 (Figures 3–5), §5 (Table 4);
# then Xiong et al. 2020, whose Post-LN warm-up result the paper builds on.
EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "fig2-clm",
        "Figure 2 / CLM: Pre-LN vs NormFormer at equal compute",
        "Shleifer et al. 2021, Figure 2 and §3.1",
        "NormFormer reaches the Pre-LN baseline's best perplexity with 60% of the compute (125M CLM).",
        ("clm-prenorm", "clm-normformer"),
        "equal time (the paper's equal GPU time): each run completes its own LR schedule in the baseline's "
        "time; equal FLOPs read from the same runs",
    ),
    Experiment(
        "table2",
        "Table 2: zero-shot accuracy of the causal LMs",
        "Shleifer et al. 2021, Table 2",
        "At equal compute NormFormer scores higher zero-shot than the Pre-LN baseline.",
        ("clm-prenorm", "clm-normformer"),
        "Figure 2's equal-time runs, scored zero-shot",
    ),
    Experiment(
        "fig2-mlm",
        "Figure 2 / MLM + Table 3: masked LMs at equal compute, then GLUE",
        "Shleifer et al. 2021, Figure 2 (MLM), Table 3 and §3.2",
        "NormFormer reaches the baseline's best MLM perplexity with 57% of the compute and fine-tunes "
        "better on GLUE.",
        ("mlm-prenorm", "mlm-normformer"),
        "equal time, as Figure 2 / CLM; GLUE: the best of the LR grid per task",
    ),
    Experiment(
        "fig3-5",
        "Figures 3–5 and 7: gradient norms by layer, learned gains, LR stability",
        "Shleifer et al. 2021, §4, Figures 3, 4 and 5, appendix Figure 7",
        "Pre-LN's early layers get larger gradients than its late ones and NormFormer evens them out, "
        "raising later FC gradients and lowering attention gradients at all layers; NormFormer survives "
        "a larger learning rate, and λresid reduces that gain.",
        ("clm-postnorm", "clm-prenorm", "clm-normformer"),
        "gradients recorded while Figure 2's runs train: Figure 3 at the beginning of training (the "
        "scale's fig3_window, update 1 separately), Figure 7 over the paper's updates 950–1000 (a shorter "
        "run: its own last updates of that length); Figure 5 from each architecture's initialisation",
    ),
    Experiment(
        "fig6",
        "Figure 6: λresid by layer",
        "Shleifer et al. 2021, Figure 6",
        "The learned ResScale weights λresid vary by layer (described, not tested).",
        ("clm-resscale",),
        "Figure 2's protocol (equal time)",
    ),
    Experiment(
        "table4",
        "Table 4: ablations and controls",
        "Shleifer et al. 2021, Table 4 and §5",
        "Removing any NormFormer op hurts perplexity, HeadScale the most; none of the controls improves on "
        "NormFormer, and widening the baseline's hidden size (768 → 780: about 3M parameters, some 30 times "
        "what NormFormer adds) gains far less (0.08 vs 0.83 PPL at 125M).",
        tuple(at_equal_updates(k) for k in TABLE4) + TABLE4,
        "the paper's fixed number of updates (every variant trains the baseline's steps); equal time as "
        "a second, untested column",
    ),
    Experiment(
        "table5",
        "Table 5: NormFormer vs Pre-LN under other hyperparameters",
        "Shleifer et al. 2021, Table 5",
        "NormFormer has lower perplexity than the baseline under each hyperparameter setting.",
        ("clm-prenorm", "clm-normformer", *(k for pair in TABLE5.values() for k in pair)),
        "Figure 2's protocol (equal time), each setting applied to both architectures at their tuned LRs",
    ),
    Experiment(
        "xiong",
        "Xiong et al. 2020: Post-LN needs warm-up, Pre-LN does not",
        "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture, §3",
        "Post-LN trained without learning-rate warm-up fails or ends much worse; Pre-LN trains without it.",
        ("clm-postnorm", "clm-postnorm-no-warmup", "clm-prenorm", "clm-prenorm-no-warmup"),
        "each run with and without warm-up at its architecture's tuned LR, equal time",
    ),
)
EXPERIMENT_NAMES = tuple(e.name for e in EXPERIMENTS)
