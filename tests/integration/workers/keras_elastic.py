"""A plain Horovod elastic Keras script: ``model.fit`` inside ``hvd.elastic.run`` with
``KerasState`` and Horovod's elastic callbacks (epoch and batch state, a commit every few
batches), the way Horovod's Keras elastic example trains. The step is Keras's own
``tf.function``. The fault and the report are ``elastic_torch.py``'s.

    horovodrun --gloo -np 4 --min-np 2 -H localhost:2,127.0.0.1:2 [--prague] \\
        python keras_elastic.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod 0.28 needs tf-keras

import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _report import digest, report  # noqa: E402

EPOCHS = 4
BATCHES = 10
"""Batches per epoch."""
COMMIT_EVERY = 5


class DieAt(tf.keras.callbacks.Callback):
    """The fault: this worker exits at a batch of the first world."""

    def __init__(self, state: hvd.elastic.KerasState, epoch: int, batch: int) -> None:
        super().__init__()
        self.state, self.at = state, (epoch, batch)
        self.first_world = True

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self.first_world and (self.state.epoch, batch) == self.at:
            os._exit(17)


def main() -> None:
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 8)).astype("float32")
    y = (x[:, :2].sum(axis=1) > 0).astype("int64")

    tf.random.set_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8,)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.BatchNormalization(),
            tf.keras.layers.Dense(2),
        ]
    )
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.05 * hvd.size(), momentum=0.5))
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    host = os.environ.get("HOROVOD_HOSTNAME", "")
    kill = host == os.environ.get("PRAGUE_KILL_HOST") and hvd.local_rank() == 0
    kill_batch = int(os.environ.get("PRAGUE_KILL_STEP", "-1"))
    sizes: list[int] = []
    resets: list[int] = []

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    def on_reset() -> None:
        resets.append(hvd.size())
        tf.keras.backend.set_value(model.optimizer.learning_rate, 0.05 * hvd.size())

    state.register_reset_callbacks([on_reset])
    die = DieAt(state, kill_batch // BATCHES, kill_batch % BATCHES) if kill else None
    callbacks = [
        hvd.elastic.UpdateEpochStateCallback(state),
        hvd.elastic.UpdateBatchStateCallback(state),
        hvd.elastic.CommitStateCallback(state, batches_per_commit=COMMIT_EVERY),
        *([die] if die else []),
    ]

    def data() -> tf.data.Dataset:
        shard = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank())
        return shard.repeat().batch(8)

    @hvd.elastic.run
    def train(state: hvd.elastic.KerasState) -> None:
        sizes.append(hvd.size())
        if die and len(sizes) > 1:
            die.first_world = False
        try:
            model.fit(
                data(),
                steps_per_epoch=BATCHES,
                epochs=EPOCHS - state.epoch,
                callbacks=callbacks,
                verbose=0,
            )
        except Exception as e:  # what made this rank reset, for the job's log
            print(f"rank {hvd.rank()} of {hvd.size()}: {type(e).__name__}: {e}", flush=True)
            raise

    train(state)
    loss = hvd.allreduce(model.evaluate(x, y, verbose=0)[0], name="final_loss")
    report(
        {
            "host": host,
            "size": hvd.size(),
            "sizes": sizes,
            "epoch": int(state.epoch),
            "resets": resets,
            "parameters": digest(model.trainable_variables),
            "model": digest(model.variables),
            "loss": float(loss),
        },
        rank=hvd.rank(),
    )


if __name__ == "__main__":
    main()
