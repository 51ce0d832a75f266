"""Uneven step counts under TensorFlow, on 2 ranks with ``sync_every=2``: ranks take different
numbers of optimizer steps (a tape's deferred step or a wrapped optimizer's), then meet in a
guarded global collective and ``finish``. Exits non-zero if the models differ; a hang ends in
the job's timeout. As ``sync_every_uneven.py``, for PyTorch.

    horovodrun -np 2 python tf_sync_every_uneven.py tape|optimizer uneven|skipped
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod 0.28 needs tf-keras

import horovod.tensorflow as raw  # noqa: E402
import tensorflow as tf  # noqa: E402
from _report import same_on_all_ranks  # noqa: E402

import horovod_prague.tensorflow as hvd  # noqa: E402


def main(api: str, scenario: str) -> None:
    hvd.init(strategy="random", sync_every=2, timeout=20, seed=1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.random.set_seed(hvd.rank())
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    if api == "optimizer":
        optimizer = hvd.DistributedOptimizer(optimizer)
    x = tf.random.normal((8, 4), seed=hvd.rank())
    steps = (1 if hvd.rank() == 0 else 3) if scenario == "uneven" else 7
    for step in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x)))
        if api == "tape":
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        if scenario == "skipped" and hvd.rank() == 0 and step % 2:
            continue  # a rank that skips its step on its own (a loss scale's overflow)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    total = hvd.allreduce(tf.reduce_sum(model.trainable_variables[0]), name="loss")
    hvd.finish(model)
    assert same_on_all_ranks(raw, [v.numpy() for v in model.variables], "check.model")
    assert same_on_all_ranks(raw, [total.numpy()], "check.loss")
    print(f"rank {hvd.rank()}: {api} {scenario} ok", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
