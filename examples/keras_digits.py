"""Horovod Keras example: an MLP on scikit-learn's digits, trained with ``model.fit``.

A plain Horovod script (``horovod.tensorflow.keras`` with tf-keras); it has no Prague code.
Run it as stock Horovod, or with Prague:

    horovodrun -np 4 -H localhost:4 --gloo python examples/keras_digits.py
    horovodrun -np 4 -H localhost:4 --gloo --prague smart python examples/keras_digits.py

On 2 CPU cores it reaches a test accuracy of 0.93 or more in 20 epochs either way
(docs/usage.md).
"""

import argparse
import os

# Horovod 0.28's Keras wrappers need the Keras 2 API (tf-keras), not Keras 3.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

parser = argparse.ArgumentParser(description="Keras digits example")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
parser.add_argument("--epochs", type=int, default=20, help="number of epochs to train")
parser.add_argument("--lr", type=float, default=0.05, help="learning rate per rank")
parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum")
parser.add_argument("--seed", type=int, default=42, help="random seed")


def datasets(seed):
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        (digits.data / 16.0).astype(np.float32), digits.target, test_size=0.25, random_state=seed
    )

    # Every rank trains and tests on its own shard.
    def shard(x):
        return x[hvd.rank() :: hvd.size()]

    return shard(x_train), shard(y_train), shard(x_test), shard(y_test)


def main():
    args = parser.parse_args()
    hvd.init()
    # Horovod's preamble: one GPU per process, grown as needed; a thread per rank on CPUs.
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(args.seed)
    x_train, y_train, x_test, y_test = datasets(args.seed)

    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    # Horovod's rule: scale the learning rate by the number of ranks.
    lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(lr, momentum=args.momentum))
    model.compile(
        optimizer=opt,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    callbacks = [
        # Start every rank from rank 0's variables.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Report each epoch's metrics averaged over all ranks.
        hvd.callbacks.MetricAverageCallback(),
        # Ramp the learning rate up from args.lr to lr over the first epochs.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=3),
    ]
    history = model.fit(
        x_train,
        y_train,
        batch_size=args.batch_size,
        epochs=args.epochs,
        callbacks=callbacks,
        verbose=0,
    )
    _, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    accuracy = float(hvd.allreduce(accuracy, name="test_accuracy"))
    if hvd.rank() == 0:
        # MetricAverageCallback made these the means over all ranks.
        print(f"train loss {history.history['loss'][-1]:.4f}", flush=True)
        print(f"learning rate after warm-up {history.history['lr'][-1]:.4f}", flush=True)
        print(f"final test accuracy {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
