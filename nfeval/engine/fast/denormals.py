"""Denormal fp32 values flushed to zero on the CPU (x86's FTZ and DAZ), in the processes nfeval owns.

A float32 below 2⁻¹²⁶ ≈ 1.2e-38 in magnitude is denormal. x86 cores compute with denormals through
microcode assists, many times slower than with normal numbers. In a GLUE point near divergence the last
layer's key and value gradients, which reach it only through the CLS row's saturated attention, fall
into that range: their backward product ran at 3 GFLOP/s against 180, and the whole point trained 1.28×
slower (HISTORY.md, session 11). Flushing reads and writes such values as zero, so an operation's result
differs from IEEE arithmetic only where a value below 1.2e-38 took part. TensorFlow's and XLA's CPU
runtimes do the same on every compute thread (``port::ScopedFlushDenormal``).

The switch is x86's MXCSR register, one per thread; a new thread starts with its creator's.
``torch.set_flush_denormal`` sets only the calling thread. So ``flush_in_this_process`` must run before
torch starts its intra-op threads, which then inherit it. It is the one place that sets the switch, and
it is called where nfeval owns the process, as the process starts: the ``nfeval`` executable
(``cli.console``), every ``--jobs`` worker (``launch.local.init_worker``: the GLUE, tune, reproduce and
bakeoff pools) and every Slurm job (``launch.jobs``). The library, called from someone else's process,
leaves that process's arithmetic as it is.
``NFEVAL_FLUSH_DENORMALS=0`` keeps IEEE denormals everywhere (``1``, the default, flushes; any other value
is a ConfigError). Records state which applied (``flushing()``).
"""

from __future__ import annotations

import torch

from ...base.env import FLUSH_DENORMALS, enabled

ENV = FLUSH_DENORMALS


def flushing() -> bool:
    """Returns whether every intra-op thread of this process flushes denormals: a denormal times 1.5,
    computed in a chunk per thread, is zero everywhere."""
    per_thread = 1 << 16  # above torch's grain (32768 elements), so every thread takes a chunk
    # the bit pattern 2^20 read as float32 is the denormal 1.47e-39; built from bits, not converted
    # (a conversion would itself flush under FTZ)
    tiny = torch.full((torch.get_num_threads() * per_thread,), 1 << 20, dtype=torch.int32).view(torch.float32)
    return not bool((tiny * 1.5).any())


def flush_in_this_process() -> bool:
    """Makes this thread, and the intra-op threads torch starts after it, flush denormals (unless
    ``NFEVAL_FLUSH_DENORMALS=0`` or the CPU cannot); returns whether every intra-op thread flushes.

    Where torch's threads started earlier and did not inherit it, it turns flushing off again: a process
    flushes in every thread or in none.
    """
    if not enabled(ENV) or not torch.set_flush_denormal(True):
        return flushing()
    if flushing():
        return True
    torch.set_flush_denormal(False)
    return False
