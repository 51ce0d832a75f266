"""A Keras model with an integer variable that counts its training calls, under Prague's
default (overlapped averages, two in flight).

    tf_integer_buffers.py STEPS

The counter is a non-trainable int64 variable of a layer, averaged as part of the model
(``DistributedOptimizer(model=...)``). After ``model.fit`` over STEPS batches and
``hvd.shutdown()`` (the final world average), each rank reports the counter, the
optimizer's ``iterations`` and a digest of the model's variables.

Two int64 variables whose sums over the ranks overflow int64: ``equal``, the same on every
rank, and ``large``, different on each (set at the end of the first batch, after the
broadcast), both reported when set and at the end: averages must leave ``equal`` as it is
and give every rank ``large``'s exact floor mean in the end.
"""

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402
from _report import digest, report  # noqa: E402

import horovod_prague.keras as hvd  # noqa: E402

EQUAL = [2**62, 2**63 - 1, 7, -(2**63)]


def large(rank: int) -> list[int]:
    """Int64 values near the ends of the range, different on each rank."""
    return [2**63 - 1 - 3 * rank, -(2**63) + 5 * rank, 2**62 + rank * 2**55, -rank]


class Counted(keras.layers.Layer):
    def build(self, input_shape: tf.TensorShape) -> None:
        self.kernel = self.add_weight("kernel", (input_shape[-1], 1))
        self.calls = tf.Variable(0, dtype=tf.int64, trainable=False, name="calls")
        self.equal = tf.Variable(EQUAL, dtype=tf.int64, trainable=False, name="equal")
        self.large = tf.Variable([0] * 4, dtype=tf.int64, trainable=False, name="large")

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        if training:
            self.calls.assign_add(1)
        return x @ self.kernel


steps = int(sys.argv[1])
hvd.init()
rank = hvd.rank()
layer = Counted()
model = keras.Sequential([keras.Input((4,)), layer])
optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), model=model)
model.compile(optimizer=optimizer, loss="mse")
rng = np.random.default_rng(rank)
x = rng.normal(size=(8 * steps, 4)).astype("float32")
y = x.sum(1, keepdims=True) + rank
start: dict[str, list[int]] = {}


class SetLarge(keras.callbacks.Callback):
    """Sets this rank's ``large`` once the first batch's broadcast has made every rank's
    variables equal."""

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if batch == 0:
            layer.large.assign(large(rank))
            start.update(
                equal_start=layer.equal.numpy().tolist(),
                large_start=layer.large.numpy().tolist(),
            )


model.fit(
    x,
    y,
    batch_size=8,
    epochs=1,
    shuffle=False,
    verbose=0,
    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), SetLarge()],
)
hvd.shutdown()
report(
    {
        "calls": int(layer.calls.numpy()),
        "iterations": int(optimizer.iterations.numpy()),
        **start,
        "equal": layer.equal.numpy().tolist(),
        "large": layer.large.numpy().tolist(),
        "digest": digest(model.variables),
    }
)
