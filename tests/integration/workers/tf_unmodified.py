"""Run a TensorFlow or Keras training script unchanged and record a hash of the variables
each optimizer step is about to update, before the step.

    tf_unmodified.py SCRIPT [ARGS...]

tf-keras' optimizer base class is patched (outside the script) to hash the variables it is
given, staged with ``tf.py_function`` so that it also runs inside a traced step. Each rank
reports its list of hashes, a hash of the variables at exit (after Prague's final average),
and whether Prague's drop-in replaced Horovod's functions in this process.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
from _report import digest, report  # noqa: E402
from tf_keras.src.optimizers import optimizer as keras_optimizer  # noqa: E402

hashes: list[str] = []
trained: list[tf.Variable] = []


apply_gradients = keras_optimizer.Optimizer.apply_gradients


def recording(self, grads_and_vars, *args, **kwargs):
    pairs = list(grads_and_vars)
    variables = [v for _, v in pairs]
    trained[:] = variables
    if tf.executing_eagerly():
        hashes.append(digest(variables))
    else:

        def record(*_handles):
            hashes.append(digest(variables))
            return tf.constant(0)

        tf.py_function(record, inp=[v.handle for v in variables], Tout=tf.int32)
    return apply_gradients(self, pairs, *args, **kwargs)


def finish() -> None:
    import horovod.tensorflow

    report(
        {
            "hashes": hashes,
            "final": digest(trained),
            "drop_in": hasattr(horovod.tensorflow.init, "__prague_target__"),
        }
    )


keras_optimizer.Optimizer.apply_gradients = recording
# Registered before the script runs, so it runs after everything the script registers.
atexit.register(finish)
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
