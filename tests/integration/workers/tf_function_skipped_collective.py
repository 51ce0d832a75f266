"""``tf_skipped_collective.py`` with its steps and collectives inside ``tf.function``s:
a plain TensorFlow 2 loop whose rank 3 skips one unnamed ``hvd.allgather``."""

from __future__ import annotations

import random
import time

import horovod.tensorflow as hvd
import tensorflow as tf
import tf_keras as keras
from _report import report

hvd.init()
tf.random.set_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


@tf.function
def gather(x):
    return hvd.allgather(x)


@tf.function
def total(x):
    return hvd.allreduce(x, op=hvd.Sum)


slow = random.Random(hvd.rank())
gathered = 0
for step in range(24):
    time.sleep(0.01 * (5 if slow.random() < 0.25 else 1))
    loss = train_step(tf.random.normal((4, 8)))
    if step == 0:
        hvd.broadcast_variables(model.variables, root_rank=0)
    if step % 8 == 7:
        losses = gather(tf.reshape(loss, [1]))
        assert losses.shape == (hvd.size(),), losses.shape
        gathered += 1

began = time.monotonic()
try:
    if hvd.rank() != 3:
        gather(tf.ones([1]))
    total(tf.ones([1]))
    report({"error": None, "gathered": gathered})
except Exception as e:
    after = time.monotonic() - began
    report({"error": type(e).__name__, "message": str(e), "after": after, "gathered": gathered})
    raise
