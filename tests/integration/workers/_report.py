"""Helpers for worker scripts: where this rank is, and how to report results to the test."""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np


def launcher_rank() -> int:
    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    raise RuntimeError("not started by horovodrun or mpirun")


def prague_stats(hvd: Any) -> dict[str, int]:
    """This rank's ``exchange_stats()`` when the drop-in replaced Horovod's ``hvd`` (under
    ``--prague``), from the Prague package that stands in for it; ``{}`` under stock Horovod."""
    target = getattr(hvd.init, "__prague_target__", None)
    return importlib.import_module(target).exchange_stats() if target else {}


def report(data: dict[str, Any], rank: int | None = None) -> None:
    rank = launcher_rank() if rank is None else rank
    path = Path(os.environ["PRAGUE_TEST_OUT"]) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rank": rank, **data}))
    tmp.rename(path)


def wait_for_reports(ranks: Iterable[int], limit_s: float) -> None:
    """Return once each of ``ranks`` has called ``report``, or after ``limit_s`` seconds."""
    out = Path(os.environ["PRAGUE_TEST_OUT"])
    paths = [out / f"rank{r}.json" for r in ranks]
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not all(p.exists() for p in paths):
        time.sleep(0.05)


def digest(tensors: Iterable[Any]) -> str:
    """A short hash of the values of ``tensors`` (PyTorch tensors or TensorFlow variables), in
    order: equal on two ranks exactly when they hold the same values."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(_array(t).tobytes())
    return h.hexdigest()[:16]


def _array(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):
        return t.detach().numpy()
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


_check_names = itertools.count()


def same_on_all_ranks(horovod: Any, values: Any, name: str | None = None) -> bool:
    """Whether every rank holds the same ``values`` (a tensor, or a list of tensors or arrays),
    by Horovod's own ``allgather_object`` on the ``horovod`` module given (stock Horovod's,
    so that the check itself runs no Prague code). Every rank must call it at the same point."""
    values = values if isinstance(values, list | tuple) else [values]
    name = name or f"check.same.{next(_check_names)}"
    return len(set(horovod.allgather_object(digest(values), name=name))) == 1
