"""Run a training script unchanged and record, at every optimizer step, a hash of its model.

    unmodified.py SCRIPT [ARGS...]

A global optimizer step pre-hook (a PyTorch feature, outside the script) hashes the parameters
of the optimizer that is stepping, before the step: that is the model left by the previous
step's averaging. Each rank reports its list of hashes, a hash of the last stepped optimizer's
parameters at exit (after Prague's final average), and whether Prague's drop-in replaced
Horovod's functions in this process.
"""

from __future__ import annotations

import atexit
import runpy
import sys

import torch
from _report import digest, report
from torch.optim.optimizer import register_optimizer_step_pre_hook

hashes: list[str] = []
stepped: list[torch.optim.Optimizer] = []


def parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def record(optimizer: torch.optim.Optimizer, *_: object) -> None:
    stepped[:] = [optimizer]
    hashes.append(digest(parameters(optimizer)))


def finish() -> None:
    import horovod.torch

    report(
        {
            "hashes": hashes,
            "final": digest(parameters(stepped[0])) if stepped else None,
            "drop_in": hasattr(horovod.torch.init, "__prague_target__"),
        }
    )


register_optimizer_step_pre_hook(record)
# Registered before the script runs, so it runs after everything the script registers.
atexit.register(finish)
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
