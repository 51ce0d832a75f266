"""Run a training script unchanged and record, at every optimizer step, a hash of its model.

    unmodified.py SCRIPT [ARGS...]

A global optimizer step pre-hook (a PyTorch feature, outside the script) hashes the parameters
of the optimizer that is stepping, before the step: that is the model left by the previous
step's averaging. Each rank reports its list of hashes and whether Prague's drop-in replaced
Horovod's functions in this process.
"""

from __future__ import annotations

import atexit
import hashlib
import runpy
import sys

import torch
from _report import report
from torch.optim.optimizer import register_optimizer_step_pre_hook

hashes: list[str] = []


def record(optimizer: torch.optim.Optimizer, *_: object) -> None:
    h = hashlib.sha256()
    for group in optimizer.param_groups:
        for p in group["params"]:
            h.update(p.detach().numpy().tobytes())
    hashes.append(h.hexdigest()[:16])


def finish() -> None:
    import horovod.torch

    report({"hashes": hashes, "drop_in": hasattr(horovod.torch.init, "__prague_target__")})


register_optimizer_step_pre_hook(record)
# Registered before the script runs, so it runs after everything the script registers.
atexit.register(finish)
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
