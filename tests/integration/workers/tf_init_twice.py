"""``init_twice.py`` as a plain Horovod TensorFlow script: ``hvd.init()`` again (the same
options, then another), an eager ``DistributedGradientTape`` loop, ``shutdown``, ``init`` and
training on in the same process."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod 0.28 needs tf-keras

import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402
from _report import digest, report  # noqa: E402


def train(model: tf.keras.Model, optimizer: tf.keras.optimizers.Optimizer, steps: int) -> None:
    for _ in range(steps):
        x = tf.random.normal((16, 4))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - tf.reduce_sum(x, 1, keepdims=True)) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))


hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
hvd.init()
tf.random.set_seed(hvd.rank())
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.05)
hvd.broadcast_variables(model.variables, root_rank=0)
train(model, optimizer, 8)
try:
    hvd.init(sync_every=5)
    refused = None
except ValueError as e:
    refused = str(e)
train(model, optimizer, 4)
hvd.shutdown()
after_first = digest(model.trainable_variables)
hvd.init()
hvd.init()
train(model, optimizer, 8)
hvd.shutdown()
report(
    {
        "drop_in": hasattr(hvd.init, "__prague_target__"),
        "refused": refused,
        "after_first": after_first,
        "after_second": digest(model.trainable_variables),
    }
)
