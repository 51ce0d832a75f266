"""A TensorFlow script's start as in Horovod's own examples, then a few training steps.

    tf_preamble.py tensorflow|keras|explicit

``hvd.init()`` comes first, then every ``tf.config`` setting that TensorFlow accepts only
before its runtime is initialized: memory growth and one visible GPU per process (where there
are GPUs), thread pools, visible CPUs and logical CPU devices. Then a short training run
(``horovod.tensorflow`` with a tape, ``horovod.tensorflow.keras`` with ``model.fit`` and
Horovod's callbacks, or ``horovod_prague.tensorflow`` called explicitly). Each rank reports
what TensorFlow then runs with and a hash of its variables after the script's end (after
Prague's final average, under the flag).
"""

from __future__ import annotations

import atexit
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _report import digest, report  # noqa: E402

API = sys.argv[1]
if API == "keras":
    import horovod.tensorflow.keras as hvd
elif API == "explicit":
    import horovod_prague.tensorflow as hvd
else:
    import horovod.tensorflow as hvd

model: tf.keras.Model | None = None


def finish() -> None:
    import horovod.tensorflow

    report(
        {
            "final": digest(model.variables),
            "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
            "logical_cpus": len(tf.config.list_logical_devices("CPU")),
            "drop_in": hasattr(horovod.tensorflow.init, "__prague_target__"),
        }
    )


# Registered first, so it runs after everything registered later (Prague's leave included).
atexit.register(finish)

hvd.init()
gpus = tf.config.experimental.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_visible_devices(cpus, "CPU")
tf.config.set_logical_device_configuration(
    cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(8,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1),
    ]
)
rng = np.random.default_rng(hvd.rank())
x = rng.normal(size=(128, 8)).astype(np.float32)
y = x.sum(axis=1, keepdims=True)

if API == "keras":
    model.compile(
        optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
        loss="mse",
    )
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
    ]
    model.fit(x, y, batch_size=32, epochs=2, callbacks=callbacks, verbose=0)
else:
    opt = tf.keras.optimizers.SGD(0.01)
    if API == "explicit":
        opt = hvd.DistributedOptimizer(opt)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)
        if API != "explicit":
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    hvd.broadcast_variables(model.variables, root_rank=0)
    for start in range(0, len(x), 32):
        loss = step(x[start : start + 32], y[start : start + 32])
    hvd.allreduce(loss, name="final_loss")
    if API == "explicit":
        hvd.finish(model)
