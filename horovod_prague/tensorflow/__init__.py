"""Horovod's TensorFlow API plus Prague's partial all-reduce.

Everything ``horovod.tensorflow`` exports is here under the same name; ``init`` also takes the
Prague options, and ``next_group``, ``partial_allreduce``, ``average_model`` and ``finish``
work on ``tf.Variable`` lists (or a ``tf.Module``/Keras model's ``variables``)::

    import horovod_prague.tensorflow as hvd

    hvd.init(strategy="smart")
    ...apply the local gradient...
    hvd.partial_allreduce(model.variables, hvd.next_group())

Runs eagerly (outside ``tf.function``): the group is decided at run time by the Group Generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import horovod.tensorflow as _hvd
import tensorflow as tf
from horovod.tensorflow import *  # noqa: F403  (the whole Horovod API, re-exported)

from ..common.binding import Binding


class TensorflowBinding(Binding):
    def tensors(self, source: Any) -> list[tf.Variable]:
        if isinstance(source, tf.Module) or hasattr(source, "variables"):
            return list(source.variables)
        if isinstance(source, tf.Variable):
            return [source]
        return list(source)

    def average(
        self, variables: Sequence[tf.Variable], name: str, process_set: Any, size: int
    ) -> None:
        by_dtype: dict[tf.DType, list[tf.Variable]] = {}
        for v in variables:
            by_dtype.setdefault(v.dtype, []).append(v)
        for dtype, same in by_dtype.items():
            tag = f"{name}.{dtype.name}"
            values = [tf.convert_to_tensor(v) for v in same]
            if dtype.is_floating or dtype.is_complex:
                averaged = _hvd.grouped_allreduce(
                    values, op=_hvd.Average, name=tag, process_set=process_set
                )
            else:
                summed = _hvd.grouped_allreduce(
                    values, op=_hvd.Sum, name=tag, process_set=process_set
                )
                averaged = [s // size for s in summed]
            for v, a in zip(same, averaged, strict=True):
                v.assign(a)


_binding = TensorflowBinding(_hvd)
init = _binding.init
runtime = _binding.runtime
config = _binding.config
next_group = _binding.next_group
partial_allreduce = _binding.partial_allreduce
average_model = _binding.average_model
finish = _binding.finish
shutdown = _binding.shutdown
