"""A plain Horovod TensorFlow script with uneven shards and ``hvd.join()``: Horovod's preamble,
a ``DistributedGradientTape`` loop, two epochs each ended by ``join``, then a metric
all-reduce. Reports as ``join_uneven.py`` does.

    horovodrun -np 4 [--prague] python tf_join_uneven.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod 0.28 needs tf-keras

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np
import tensorflow as tf
from _report import digest, prague_stats, report

BATCH = 8
EPOCHS = 2


def main() -> None:
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((512, 16)).astype("float32")
    y = (x[:, :4].sum(axis=1) > 0).astype("int64")
    # Uneven shards: rank r holds 48 + 32 r samples (6, 10, 14, 18 batches on 4 ranks).
    start = sum(48 + 32 * r for r in range(hvd.rank()))
    xs, ys = x[start : start + 48 + 32 * hvd.rank()], y[start : start + 48 + 32 * hvd.rank()]

    tf.random.set_seed(hvd.rank())  # different initial weights: the broadcast must fix them
    model = tf.keras.Sequential(
        [
            tf.keras.Input((16,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(2),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(0.05 * hvd.size(), momentum=0.5)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hvd.broadcast_variables(model.variables, root_rank=0)

    steps, joined, after_join = 0, [], []
    for epoch in range(EPOCHS):
        for i in range(0, len(xs), BATCH):
            with tf.GradientTape() as tape:
                loss = loss_fn(ys[i : i + BATCH], model(xs[i : i + BATCH], training=True))
            tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            steps += 1
        joined.append(int(hvd.join()))
        after_join.append(digest(model.variables))
        loss = hvd.allreduce(loss_fn(y, model(x)), name=f"val_loss.{epoch}")
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {float(loss):.4f}", flush=True)

    stats = prague_stats(hvd)
    report({"steps": steps, "joined": joined, "after_join": after_join, "stats": stats})


if __name__ == "__main__":
    main()
