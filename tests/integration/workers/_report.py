"""Helpers for worker scripts: where this rank is, and how to report results to the test."""

from __future__ import annotations

import json
import os
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
