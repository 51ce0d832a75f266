"""The data of ``prague-bench``'s workloads, made on this machine and cached as ``.npz``.

Every set is a dict of ``x``, ``y`` (training) and ``x_test``, ``y_test``, made the same on
every rank from fixed seeds, so all systems train on the same samples.

- ``mnist1d``: MNIST-1D (4000 training and 1000 test sequences of length 40, 10 classes).
- ``bn-mlp``: 16384 training and 2048 test points of 20 normal features, labelled by a random
  linear teacher into 4 classes.
- ``lm``: the Python standard library's top-level modules as bytes, in windows of 65: ``x``
  is a window's first 64 bytes and ``y`` its last 64 (the next byte at each position). One
  module in ten, by sorted name, is held out for the test windows.

    >>> d = teacher()
    >>> d["x"].shape, int(d["y"].max()), d["x_test"].shape
    ((16384, 20), 3, (2048, 20))
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable
from pathlib import Path

import numpy as np

DATA_SEED = 42
"""MNIST-1D's standard generation seed; also the seed of the other sets."""
CONTEXT = 64
"""The language model's context: bytes a window gives it, each with its next byte as label."""
LM_TRAIN_WINDOWS = 32768
LM_TEST_WINDOWS = 512


def cache_dir() -> Path:
    root = os.environ.get("HOROVOD_PRAGUE_CACHE") or Path.home() / ".cache" / "horovod-prague"
    return Path(root)


def mnist1d() -> dict[str, np.ndarray]:
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.seed = DATA_SEED
    data = make_dataset(args)
    return {
        "x": data["x"].astype(np.float32),
        "y": data["y"].astype(np.int64),
        "x_test": data["x_test"].astype(np.float32),
        "y_test": data["y_test"].astype(np.int64),
    }


def teacher(train: int = 16384, test: int = 2048) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(DATA_SEED)
    weights = rng.standard_normal((20, 4))
    x = rng.standard_normal((train + test, 20)).astype(np.float32)
    y = (x @ weights).argmax(1).astype(np.int64)
    return {"x": x[:train], "y": y[:train], "x_test": x[train:], "y_test": y[train:]}


def stdlib_text(root: Path | None = None) -> dict[str, np.ndarray]:
    root = root or Path(sysconfig.get_paths()["stdlib"])
    modules = sorted(root.glob("*.py"))
    if len(modules) < 20:
        raise RuntimeError(f"the lm workload reads Python's standard library; {root} has none")
    train = b"".join(m.read_bytes() for i, m in enumerate(modules) if i % 10)
    test = b"".join(m.read_bytes() for i, m in enumerate(modules) if not i % 10)
    out = {}
    for name, text, count in (("", train, LM_TRAIN_WINDOWS), ("_test", test, LM_TEST_WINDOWS)):
        tokens = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
        windows = tokens[: len(tokens) // (CONTEXT + 1) * (CONTEXT + 1)].reshape(-1, CONTEXT + 1)
        windows = windows[np.random.default_rng(DATA_SEED).permutation(len(windows))[:count]]
        out["x" + name], out["y" + name] = windows[:, :-1], windows[:, 1:]
    return out


MAKERS: dict[str, Callable[[], dict[str, np.ndarray]]] = {
    "mnist1d": mnist1d,
    "bn-mlp": teacher,
    "lm": stdlib_text,
}


def cached_path(workload: str) -> Path:
    return cache_dir() / ("mnist1d-standard.npz" if workload == "mnist1d" else f"{workload}.npz")


def load(workload: str, path: Path | None = None) -> dict[str, np.ndarray]:
    """A workload's data, made and cached at ``path`` the first time."""
    path = path or cached_path(workload)
    if not path.exists():
        data = MAKERS[workload]()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, **data)
        os.replace(tmp, path)
    with np.load(path) as f:
        return {k: f[k] for k in f.files}
