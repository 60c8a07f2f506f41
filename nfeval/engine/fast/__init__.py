"""The speed layer: what makes nfeval fast without computing anything new, applied to a plain model,
backend or process after it is built, as torchtitan applies its model converters.

- ``cpu_linear``: fp32 CPU linear products through oneDNN where it beats MKL, and oneDNN's packed
  weights while many forward passes run. ``cpu_linear.convert(model)``; off: ``NFEVAL_CPU_LINEAR=torch``.
  Earns: training 1.35× HF GPT-2 on a Zen 5 (1.05× on torch's kernel), generation's few-row products
  (RESULTS.md, "CPU linear kernel", "Generation").
- ``greedy_head``: the greedy next token from an int8 screen of the output projection, re-scored in
  fp32 (the same argmax). Off: ``Fast(greedy_screen=False)``. Earns: a batch-16 125M decoding step's
  head in a quarter of the bytes (RESULTS.md, "Generation": the step's 3.0 ms head).
- ``static_decode``: a GPU's decoding steps with static shapes, replayed as one CUDA graph. Off:
  ``Fast(static=False)``. Earns: 835 / 5,773 tokens/s against 197 / 2,727 eager at batch 1 / 16 on an
  H100 (RESULTS.md, "GPU check", 2026-12-06).
- ``hf_gpt2_backend``: a Hugging Face GPT-2 directory scored and decoded by the engine instead of
  transformers (no transformers import, the same function). ``hf_gpt2_backend(path, ...)``, where
  ``model_adapters.backends`` opens a HF directory; off: ``--hf-forward transformers``. Earns: whole
  ``nfeval generate`` commands 2.98× / 2.72× HF at batch 1 / 16 against 0.93× / 0.88× through
  transformers (RESULTS.md, "Whole commands").
- ``denormals``: denormal floats flushed to zero in nfeval's processes. Off:
  ``NFEVAL_FLUSH_DENORMALS=0``. Earns: a GLUE RTE point 1.10× (RESULTS.md, "GLUE: denormals").

``accelerate(backend)`` (``speed``) applies the first three to a built scoring and generation backend;
``Fast`` is the speed it gives, for callers of ``inference.generate`` with a model alone. Each switched
off gives the plain path, and the tests check that both paths give the same tokens and scores.
"""
