"""The two hooks the conformance scripts call: a step that is sometimes slow, and the final report.

The scripts are plain Horovod training scripts; this module is the only thing they use that a
user's script would not have. It needs neither Horovod nor a framework to import: the rank comes
from the launcher's environment, and the model is read duck-typed (PyTorch modules or state
dicts, Keras models, ``tf.Module``\\ s, or lists of tensors and variables).

- ``slow_step()``: once per training step. With ``CONFORMANCE_SLOW="BASE_S,FACTOR,PROB[,SEED]"``
  it sleeps ``BASE_S``, or ``BASE_S * FACTOR`` with probability ``PROB``, the way a GPU step
  sometimes stalls; the draw comes from ``random.Random`` seeded by (seed, rank, step count), so
  a rank's slow steps are the same in every run. Unset: no sleep.
- ``report(state, metric)``: with ``CONFORMANCE_OUT`` set, writes
  ``$CONFORMANCE_OUT/rank{HOROVOD_RANK}.json`` = ``{"digest", "metric", "rank"}``, where the
  digest is a SHA-256 over the model's tensors (names, dtypes, shapes and exact bytes, in the
  model's own order).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

_steps = 0


def launcher_rank() -> int:
    """This process's rank, as ``horovodrun`` (or ``mpirun``) set it in the environment."""
    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    raise RuntimeError(
        "harness: no rank in the environment (HOROVOD_RANK): start the script with horovodrun"
    )


def parse_slow(spec: str) -> tuple[float, float, float, int]:
    """``"BASE_S,FACTOR,PROB[,SEED]"`` as numbers; a malformed value is an error naming it.

    >>> parse_slow("0.03,5,0.25")
    (0.03, 5.0, 0.25, 0)
    >>> parse_slow("0.01, 2, 0.5, 7")
    (0.01, 2.0, 0.5, 7)
    """
    parts = [p.strip() for p in spec.split(",")]
    try:
        if len(parts) not in (3, 4):
            raise ValueError
        base, factor, prob = (float(p) for p in parts[:3])
        seed = int(parts[3]) if len(parts) == 4 else 0
    except ValueError:
        raise ValueError(
            f"CONFORMANCE_SLOW={spec!r}: expected BASE_S,FACTOR,PROB[,SEED], "
            'e.g. "0.03,5,0.25"'
        ) from None
    if base < 0 or factor < 0 or not 0 <= prob <= 1:
        raise ValueError(
            f"CONFORMANCE_SLOW={spec!r}: BASE_S and FACTOR must be >= 0 and PROB in [0, 1]"
        )
    return base, factor, prob, seed


def step_delay(spec: str, rank: int, step: int) -> float:
    """How long step ``step`` of rank ``rank`` sleeps under ``CONFORMANCE_SLOW=spec``.

    >>> step_delay("0.03,5,0", 1, 0)
    0.03
    >>> step_delay("0.03,5,1", 1, 0)
    0.15
    >>> step_delay("0.1,5,0.5", 2, 9) == step_delay("0.1,5,0.5", 2, 9)
    True
    """
    base, factor, prob, seed = parse_slow(spec)
    draw = random.Random(f"{seed}:{rank}:{step}").random()
    return round(base * factor, 9) if draw < prob else base


def slow_step() -> None:
    """Sleep like one training step on an accelerator that is sometimes slow (see the module)."""
    global _steps
    spec = os.environ.get("CONFORMANCE_SLOW")
    step, _steps = _steps, _steps + 1
    if spec:
        time.sleep(step_delay(spec, launcher_rank(), step))


def _named_tensors(state: Any) -> Iterator[tuple[str, Any]]:
    """(name, tensor) for every tensor of ``state``, in the model's own fixed order."""
    if isinstance(state, dict):
        for key, value in state.items():
            yield str(key), value
        return
    state_dict = getattr(state, "state_dict", None)
    if callable(state_dict) and not hasattr(state, "variables"):  # a torch.nn.Module
        yield from _named_tensors(state_dict())
        return
    for attr in ("weights", "variables"):  # a Keras model, then a tf.Module
        found = getattr(state, attr, None)
        if found is not None and not callable(found):
            state = found
            break
    if isinstance(state, Iterable) and not isinstance(state, (str, bytes)):
        for i, value in enumerate(state):
            yield str(getattr(value, "name", i)), value
        return
    raise TypeError(
        f"harness.report: cannot read tensors from {type(state).__name__}: pass a torch module "
        "or state_dict, a Keras model, a tf.Module or a list of tensors/variables"
    )


def _tensor_bytes(value: Any) -> tuple[str, tuple[int, ...], bytes]:
    """(dtype, shape, exact bytes) of a torch tensor, a TF tensor/variable or an array."""
    import numpy as np

    if type(value).__module__.startswith("torch"):
        tensor = value.detach().cpu()
        if tensor.is_sparse:
            tensor = tensor.to_dense()
        flat = tensor.contiguous().reshape(-1)
        # bfloat16 has no numpy dtype: the raw bytes, through a byte view.
        raw = flat.view(__import__("torch").uint8).numpy().tobytes() if flat.numel() else b""
        return str(tensor.dtype), tuple(tensor.shape), raw
    numpy_of = getattr(value, "numpy", None)
    array = np.ascontiguousarray(numpy_of() if callable(numpy_of) else np.asarray(value))
    return str(array.dtype), tuple(array.shape), array.tobytes()


def digest(state: Any) -> str:
    """SHA-256 over ``state``'s tensors: names, dtypes, shapes and bytes, in order."""
    h = hashlib.sha256()
    for name, value in _named_tensors(state):
        dtype, shape, raw = _tensor_bytes(value)
        h.update(f"{name}|{dtype}|{shape}|{len(raw)}\n".encode())
        h.update(raw)
    return h.hexdigest()


def report(state: Any, metric: float) -> None:
    """Write this rank's final model digest and metric to ``$CONFORMANCE_OUT`` (if set).

    Every rank calls it once, at the very end: after training and after the script's last
    Horovod collective.
    """
    out = os.environ.get("CONFORMANCE_OUT")
    if not out:
        return
    rank = launcher_rank()
    record = {"rank": rank, "digest": digest(state), "metric": float(metric)}
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".rank{rank}.json.partial"
    partial.write_text(json.dumps(record))
    partial.replace(folder / f"rank{rank}.json")
