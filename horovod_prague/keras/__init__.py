"""Horovod's Keras API (``horovod.tensorflow.keras``) plus Prague's functions.

Horovod's Keras wrappers need the legacy Keras 2 API (tf-keras); this package sets
``TF_USE_LEGACY_KERAS=1`` when it is imported before TensorFlow. Import it first::

    import horovod_prague.keras as hvd
    hvd.init(strategy="smart")
"""

from __future__ import annotations

import os
import sys
import warnings

if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
elif os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    warnings.warn(
        "TensorFlow was imported before horovod_prague.keras without "
        "TF_USE_LEGACY_KERAS=1; Horovod's Keras wrappers may fail under Keras 3",
        stacklevel=2,
    )

from horovod.tensorflow.keras import *  # noqa: E402,F403  (the whole Horovod Keras API)

from ..tensorflow import (  # noqa: E402
    average_model,
    config,
    finish,
    init,
    next_group,
    partial_allreduce,
    runtime,
    shutdown,
)

__all__ = [
    "average_model",
    "config",
    "finish",
    "init",
    "next_group",
    "partial_allreduce",
    "runtime",
    "shutdown",
]
