"""Helpers for worker scripts: where this rank is, and how to report results to the test."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def launcher_rank() -> int:
    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    raise RuntimeError("not started by horovodrun or mpirun")


def report(data: dict[str, Any], rank: int | None = None) -> None:
    rank = launcher_rank() if rank is None else rank
    path = Path(os.environ["PRAGUE_TEST_OUT"]) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rank": rank, **data}))
    tmp.rename(path)


def digest(tensors: Iterable[Any]) -> str:
    """A short hash of the values of ``tensors`` (PyTorch tensors or TensorFlow variables), in
    order: equal on two ranks exactly when they hold the same values."""
    h = hashlib.sha256()
    for t in tensors:
        h.update((t.detach().numpy() if hasattr(t, "detach") else t.numpy()).tobytes())
    return h.hexdigest()[:16]
