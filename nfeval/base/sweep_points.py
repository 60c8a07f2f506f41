"""Where a sweep point lives: ``<out>/<sweep>/<name>/lr=<lr>/seed=<s>/``, for GLUE's points
(``<out>/glue/<task>/...``) and tune's (``<out>/points/<preset>/...``) alike, and the string a learning
rate is stored under there and in every table that reads the points. The lock a sweep claims a point with
is ``sweep_lock``'s."""

from __future__ import annotations

import os


def lr_key(lr: float) -> str:
    """Returns the string a learning rate is stored under (Python's repr: ``1e-05``, ``0.0003``)."""
    return repr(float(lr))


def point_dir(out_dir: str, sweep: str, name: str, lr: float, seed: int) -> str:
    """Returns the folder of one point of a sweep into ``out_dir``: ``sweep`` is the sweep's folder in it
    (``glue``, ``points``), ``name`` the task or preset."""
    return os.path.join(out_dir, sweep, name, f"lr={lr_key(lr)}", f"seed={seed}")
