"""A plain Horovod Keras script: two ``model.fit`` calls with validation data.

    keras_epoch_end_models.py

The first gives every rank validation data, with Horovod's callbacks; the second gives it to
rank 0 alone, without ``MetricAverageCallback`` (stock Horovod runs that: ``fit``'s
validation then runs no collective). A callback notes a digest of each rank's trainable
weights (BatchNorm's moving statistics stay each rank's own, as with Horovod's Keras
optimizer) when each validation begins, and each step sleeps 10 ms, 5x that with probability
1/4, so that under ``--prague`` the ranks' group histories diverge. Reports each fit's
digests and the final trainable weights' digest.
"""

from __future__ import annotations

import os
import random
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod 0.28 needs tf-keras

import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _report import digest, report  # noqa: E402

hvd.init()
tf.random.set_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(768, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
x_train, y_train = x[:512][hvd.rank() :: hvd.size()], y[:512][hvd.rank() :: hvd.size()]
slow = random.Random(hvd.rank())


class Notes(tf.keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.digests: list[str] = []

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.01 * (5 if slow.random() < 0.25 else 1))

    def on_test_begin(self, logs=None):
        self.digests.append(digest(self.model.trainable_weights))


model = tf.keras.Sequential(
    [
        tf.keras.Input((8,)),
        tf.keras.layers.Dense(16),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.ReLU(),
        tf.keras.layers.Dense(2),
    ]
)
model.compile(
    optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.05, momentum=0.9)),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
every_rank, rank_0 = Notes(), Notes()
model.fit(
    x_train,
    y_train,
    batch_size=16,
    epochs=3,
    validation_data=(x[512:], y[512:]),
    callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        every_rank,
    ],
    verbose=0,
)
model.fit(
    x_train,
    y_train,
    batch_size=16,
    epochs=2,
    validation_data=(x[512:], y[512:]) if hvd.rank() == 0 else None,
    callbacks=[rank_0],
    verbose=0,
)
report(
    {
        "every_rank": every_rank.digests,
        "rank_0": rank_0.digests,
        "final": digest(model.trainable_weights),
    }
)
