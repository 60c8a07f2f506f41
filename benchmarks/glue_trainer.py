"""The Hugging Face ``Trainer`` side of ``glue_sweep.py``: nfeval's starting classifier copied into
``RobertaForSequenceClassification`` (and checked to give the same scores), a ``Trainer`` held to
nfeval's (fairseq's RoBERTa GLUE) recipe where its defaults differ, its run_glue-style arguments, and one
Trainer run per learning rate on the same token ids as nfeval's points (``glue_gap_probe.py`` uses these
pieces too)."""

from __future__ import annotations

import tempfile
import time

import torch

from nfeval.engine.text.tokenization import special_ids
from nfeval.glue import data as glue_data
from nfeval.glue import finetune
from nfeval.glue import metrics as glue_metrics
from nfeval.glue import sweep as glue


def trainer_inputs(ckpt, data: glue_data.TaskData, args):
    """Returns (train dataset, dev dataset, dev split name, collator): unpadded token ids (the same as
    nfeval's) that ``DataCollatorWithPadding`` pads per batch."""
    import datasets
    from transformers import DataCollatorWithPadding, PreTrainedTokenizerFast

    tok = ckpt.tokenizer
    pad = tok.id_to_token(special_ids(tok).pad)

    def unpadded(split: glue_data.Split) -> datasets.Dataset:
        ids = finetune.encode(tok, split, args.max_len)
        mask = [[1] * len(s) for s in ids]
        return datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": mask, "labels": split.labels})

    ((dev_name, dev_split),) = data.dev.items()
    collator = DataCollatorWithPadding(PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad))
    return unpadded(data.train), unpadded(dev_split), dev_name, collator


def roberta_config(ckpt, spec: glue_data.TaskSpec, dropout: float = 0.1):
    """Returns the Hugging Face RoBERTa config of the checkpoint's shape (dropout 0.1, as nfeval's recipe)."""
    from transformers import RobertaConfig

    cfg, sp = ckpt.config, special_ids(ckpt.tokenizer)
    return RobertaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        intermediate_size=cfg.d_ffn,
        max_position_embeddings=cfg.max_seq_len + sp.pad + 1,
        type_vocab_size=1,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        pad_token_id=sp.pad,
        bos_token_id=sp.bos,
        eos_token_id=sp.eos,
        num_labels=spec.num_labels,
        layer_norm_eps=cfg.layer_norm_eps,
    )


def roberta_state(ckpt, spec: glue_data.TaskSpec, args) -> dict[str, torch.Tensor]:
    """Returns the Hugging Face RoBERTa state dict of the classifier nfeval's points start from (the
    checkpoint's encoder, the head that seed 0 draws), so that both sides fine-tune one model."""
    recipe = glue.Recipe(max_len=args.max_len).resolve(spec, args.max_len, "cpu")
    return roberta_names(ckpt, finetune.build_classifier(ckpt, spec, recipe, seed=0).state_dict())


def roberta_names(ckpt, nf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Returns the nfeval classifier state ``nf`` (of ``ckpt``'s shape) as a Hugging Face RoBERTa state
    dict."""
    d, pad = ckpt.config.d_model, special_ids(ckpt.tokenizer).pad
    positions = torch.zeros(ckpt.config.max_seq_len + pad + 1, d)
    positions[pad + 1 :] = nf["transformer.pos_emb.weight"]  # RoBERTa numbers positions from pad + 1
    emb = "roberta.embeddings."
    out = {
        emb + "word_embeddings.weight": nf["transformer.tok_emb.weight"],
        emb + "position_embeddings.weight": positions,
        emb + "token_type_embeddings.weight": torch.zeros(1, d),
        emb + "LayerNorm.weight": nf["transformer.emb_norm.weight"],
        emb + "LayerNorm.bias": nf["transformer.emb_norm.bias"],
    }
    for i in range(ckpt.config.n_layer):
        hf, mine = f"roberta.encoder.layer.{i}.", f"transformer.blocks.{i}."
        for kind in ("weight", "bias"):
            q, k, v = nf[f"{mine}attn.qkv.{kind}"].split(d)
            out |= {f"{hf}attention.self.query.{kind}": q, f"{hf}attention.self.key.{kind}": k}
            pairs = {
                "attention.self.value": v,
                "attention.output.dense": nf[f"{mine}attn.out_proj.{kind}"],
                "attention.output.LayerNorm": nf[f"{mine}attn_norm.{kind}"],  # post-LN: after the add
                "intermediate.dense": nf[f"{mine}fc1.{kind}"],
                "output.dense": nf[f"{mine}fc2.{kind}"],
                "output.LayerNorm": nf[f"{mine}ffn_norm.{kind}"],
            }
            out |= {f"{hf}{name}.{kind}": t for name, t in pairs.items()}
    for kind in ("weight", "bias"):
        out |= {f"classifier.{n}.{kind}": nf[f"head.{n}.{kind}"] for n in ("dense", "out_proj")}
    return {name: t.clone() for name, t in out.items()}


def check_same_start(ckpt, data: glue_data.TaskData, start: dict, args) -> float:
    """Returns the largest difference between the scores (and the CLS states) of nfeval's starting
    classifier and of the Trainer's model loaded with ``start`` on a few training examples, dropout off;
    raises AssertionError when they differ."""
    from transformers import RobertaForSequenceClassification

    hf_model = RobertaForSequenceClassification(roberta_config(ckpt, data.spec))
    hf_model.load_state_dict(start)
    recipe = glue.Recipe(max_len=args.max_len).resolve(data.spec, args.max_len, "cpu")
    nf = finetune.build_classifier(ckpt, data.spec, recipe, seed=0).eval()
    seqs = finetune.encode(ckpt.tokenizer, data.train, args.max_len)[:16]
    ids, mask = finetune.collate(seqs, special_ids(ckpt.tokenizer).pad, torch.device("cpu"))
    with torch.no_grad():
        hf = hf_model.eval()(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True)
        cls_gap = (nf.transformer.encode(ids, mask)[:, 0] - hf.hidden_states[-1][:, 0]).abs().max()
        gap = max(cls_gap, (nf(ids, mask) - hf.logits).abs().max())  # the CLS state has unit scale
    assert gap < 1e-5, f"the Trainer's model does not start as nfeval's (they differ by {gap:.2e})"
    return gap.item()


def recipe_model(ckpt, spec: glue_data.TaskSpec, start: dict, dropout: float = 0.1):
    """Returns the Trainer's model: ``RobertaForSequenceClassification`` loaded with ``start``, its
    token-type embedding frozen at zero (nfeval's encoder, as fairseq's RoBERTa, has none: trained, it is
    a learned vector added to every token, which nfeval's model cannot learn)."""
    from transformers import RobertaForSequenceClassification

    model = RobertaForSequenceClassification(roberta_config(ckpt, spec, dropout))
    model.load_state_dict(start)
    model.roberta.embeddings.token_type_embeddings.weight.requires_grad_(False)
    return model


def recipe_trainer_class():
    """Returns ``Trainer`` held to nfeval's (fairseq's) recipe where its defaults differ: weight decay on
    every parameter (it exempts biases and LayerNorm gains) and nfeval's warmup, whose first update runs
    at lr/warmup (the Trainer's runs at lr 0: its warmup is one step behind nfeval's)."""
    from transformers import Trainer

    class RecipeTrainer(Trainer):
        def get_decay_parameter_names(self, model) -> list[str]:
            return [name for name, _ in model.named_parameters()]

        def create_scheduler(self, num_training_steps: int, optimizer=None):
            if self.lr_scheduler is None:
                warmup = int(self.args.warmup_steps * num_training_steps)  # as finetune.set_up_point
                factor = finetune.lr_lambda(num_training_steps, warmup)
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, factor)
                self._created_lr_scheduler = True  # the Trainer's flag: a later train() makes a new one
            return self.lr_scheduler

    return RecipeTrainer


def training_arguments(lr: float, order: str, args, compiled: bool = False):
    """Returns run_glue-style TrainingArguments at ``lr``, drawing batches in ``order``
    (``group_by_length``, dynamic padding's partner and the fastest, or ``random``), the model under
    ``torch.compile`` when ``compiled``; bf16 on a GPU, as nfeval's recipe there."""
    from transformers import TrainingArguments

    on_gpu = args.device.startswith("cuda")
    return TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf-glue-bench-"),
        learning_rate=lr,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        train_sampling_strategy=order,  # "group_by_length": group_by_length=True before transformers 5
        warmup_steps=0.06,
        lr_scheduler_type="linear",
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-6,
        weight_decay=0.1,
        max_grad_norm=0.0,  # the recipe's clip_norm: no clipping (the Trainer's default clips at 1.0)
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        use_cpu=not on_gpu,
        bf16=on_gpu,
        disable_tqdm=True,
        torch_compile=compiled,
        seed=0,
    )


def run_trainer(
    ckpt, data: glue_data.TaskData, order: str, args, compiled: bool = False
) -> tuple[float, dict]:
    """Returns (seconds, {lr: (best-epoch metric, last-epoch metric)}) of one Trainer run per lr, each
    drawing its batches in ``order``, its model under ``torch.compile`` when ``compiled``."""
    from transformers import PrinterCallback

    spec = data.spec
    train, dev_set, dev_name, collator = trainer_inputs(ckpt, data, args)
    main = glue_metrics.MAIN_METRIC[spec.name]

    def compute_metrics(pred):
        preds = pred.predictions.argmax(-1) if not spec.is_regression else pred.predictions.squeeze(-1)
        return glue_metrics.compute(
            spec.name, {dev_name: pred.label_ids.tolist()}, {dev_name: preds.tolist()}
        )

    start = roberta_state(ckpt, spec, args)
    check_same_start(ckpt, data, start, args)
    t0, scores = time.perf_counter(), {}
    for lr in args.lrs:
        torch.manual_seed(0)
        trainer = recipe_trainer_class()(
            model=recipe_model(ckpt, spec, start),
            args=training_arguments(lr, order, args, compiled),
            train_dataset=train,
            eval_dataset=dev_set,
            data_collator=collator,
            compute_metrics=compute_metrics,
        )
        trainer.remove_callback(PrinterCallback)  # no metrics dict printed per evaluation
        trainer.train()
        history = [h[f"eval_{main}"] for h in trainer.state.log_history if f"eval_{main}" in h]
        scores[lr] = (max(history), history[-1])
    return time.perf_counter() - t0, scores
