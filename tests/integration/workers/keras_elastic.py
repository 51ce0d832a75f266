"""A plain Horovod elastic Keras script: ``model.fit`` inside ``hvd.elastic.run`` with
``KerasState`` and Horovod's elastic callbacks (epoch and batch state, a commit every few
batches), the way Horovod's Keras elastic example trains. The step is Keras's own
``tf.function``. The fault and the report are ``elastic_torch.py``'s.

    horovodrun --gloo -np 4 --min-np 2 -H localhost:2,127.0.0.1:2 [--prague] \\
        python keras_elastic.py

Hosts added or removed, when asked for (``elastic_torch.py``'s variables): rank 0 writes
``PRAGUE_NEW_HOSTS`` into ``PRAGUE_HOSTS_FILE`` at batch ``PRAGUE_CHANGE_STEP`` of the first
world; training then goes on, epoch after epoch, until two epochs have ended in a world of
``PRAGUE_NEW_SIZE`` ranks (at most ``MAX_EPOCHS``).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod 0.28 needs tf-keras

import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _report import digest, prague_stats, report  # noqa: E402

EPOCHS = 4
BATCHES = 10
"""Batches per epoch."""
COMMIT_EVERY = 5
MAX_EPOCHS = 400
CHANGED_EPOCHS = 2


class DieAt(tf.keras.callbacks.Callback):
    """The fault: this worker exits at a batch of the first world (``sizes``: the size of
    each world this process trained in)."""

    def __init__(self, state: hvd.elastic.KerasState, sizes: list[int], batch: int) -> None:
        super().__init__()
        self.state, self.sizes, self.at = state, sizes, (batch // BATCHES, batch % BATCHES)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if len(self.sizes) == 1 and (self.state.epoch, batch) == self.at:
            os._exit(17)


class ChangeHosts(tf.keras.callbacks.Callback):
    """Rank 0 of the first world lists the new hosts for the discovery script at a batch."""

    def __init__(
        self, state: hvd.elastic.KerasState, sizes: list[int], path: str, batch: int
    ) -> None:
        super().__init__()
        self.state, self.sizes, self.path = state, sizes, path
        self.at = (batch // BATCHES, batch % BATCHES)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if len(self.sizes) == 1 and hvd.rank() == 0 and (self.state.epoch, batch) == self.at:
            with open(self.path, "w") as f:
                f.write(os.environ["PRAGUE_NEW_HOSTS"].replace(",", "\n") + "\n")


class StopInTheNewWorld(tf.keras.callbacks.Callback):
    """Ends training once ``CHANGED_EPOCHS`` epochs ended in a world of ``size`` ranks: the
    same epoch on every rank of a world (the state's, synced from rank 0)."""

    def __init__(self, state: hvd.elastic.KerasState, size: int, changed_at: list[int]) -> None:
        super().__init__()
        self.state, self.size, self.changed_at = state, size, changed_at

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        # After UpdateEpochStateCallback's: the state counts the epochs ended.
        if self.changed_at and self.state.epoch >= self.changed_at[0] + CHANGED_EPOCHS:
            self.model.stop_training = True


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
    hosts_file = os.environ.get("PRAGUE_HOSTS_FILE")
    new_size = int(os.environ.get("PRAGUE_NEW_SIZE", "0"))
    sizes: list[int] = []
    resets: list[int] = []
    first_epochs: list[int] = []  # the state's epoch at each start of ``train``
    changed_at: list[int] = []  # the state's epoch when this rank first trained in the new world

    def data() -> tf.data.Dataset:
        shard = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank())
        return shard.repeat().batch(8)

    # One step makes the optimizer's variables, so that a state's sync finds the same ones on
    # every rank; after a reset it meets the first step of workers that join (Horovod's way).
    model.fit(data(), steps_per_epoch=1, epochs=1, verbose=0)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    def on_reset() -> None:
        resets.append(hvd.size())
        tf.keras.backend.set_value(model.optimizer.learning_rate, 0.05 * hvd.size())
        model.fit(data(), steps_per_epoch=1, epochs=1, verbose=0)

    state.register_reset_callbacks([on_reset])
    die = DieAt(state, sizes, kill_batch) if kill else None
    change = None
    if hosts_file:
        change = ChangeHosts(state, sizes, hosts_file, int(os.environ["PRAGUE_CHANGE_STEP"]))
    callbacks = [
        hvd.elastic.UpdateEpochStateCallback(state),
        hvd.elastic.UpdateBatchStateCallback(state),
        hvd.elastic.CommitStateCallback(state, batches_per_commit=COMMIT_EVERY),
        *([die] if die else []),
        *([change, StopInTheNewWorld(state, new_size, changed_at)] if change else []),
    ]

    @hvd.elastic.run
    def train(state: hvd.elastic.KerasState) -> None:
        sizes.append(hvd.size())
        first_epochs.append(int(state.epoch))
        if hvd.size() == new_size and not changed_at:
            changed_at.append(int(state.epoch))
        try:
            model.fit(
                data(),
                steps_per_epoch=BATCHES,
                epochs=(MAX_EPOCHS if hosts_file else EPOCHS) - state.epoch,
                callbacks=callbacks,
                verbose=0,
            )
        except Exception as e:  # what made this rank reset, for the job's log
            print(f"rank {hvd.rank()} of {hvd.size()}: {type(e).__name__}: {e}", flush=True)
            raise

    train(state)
    loss = hvd.allreduce(model.evaluate(x, y, verbose=0)[0], name="final_loss")
    stats = prague_stats(hvd)  # this world's, under the flag
    report(
        {
            "host": host,
            "size": hvd.size(),
            "sizes": sizes,
            "epoch": int(state.epoch),
            "resets": resets,
            "first_epochs": first_epochs,
            "changed_at": changed_at,
            "parameters": digest(model.trainable_variables),
            "model": digest(model.variables),
            "loss": float(loss),
            "stats": stats,
        },
        rank=hvd.rank(),
    )


if __name__ == "__main__":
    main()
