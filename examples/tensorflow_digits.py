"""Horovod TensorFlow 2 example: an MLP on scikit-learn's digits, with a custom training loop.

A plain Horovod script; it has no Prague code. Run it as stock Horovod, or with Prague:

    horovodrun -np 4 -H localhost:4 --gloo python examples/tensorflow_digits.py
    horovodrun -np 4 -H localhost:4 --gloo --prague smart python examples/tensorflow_digits.py

The training step is a ``tf.function``; ``--eager`` runs it eagerly instead. On 2 CPU cores it
reaches a test accuracy of 0.93 or more in 20 epochs either way (docs/usage.md).
"""

import argparse
import os

# Horovod 0.28's TensorFlow wrappers need the Keras 2 API (tf-keras), not Keras 3.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

parser = argparse.ArgumentParser(description="TensorFlow 2 digits example")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
parser.add_argument("--epochs", type=int, default=20, help="number of epochs to train")
parser.add_argument("--lr", type=float, default=0.05, help="learning rate per rank")
parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum")
parser.add_argument("--seed", type=int, default=42, help="random seed")
parser.add_argument("--log-interval", type=int, default=5, help="epochs between log lines")
parser.add_argument("--eager", action="store_true", help="run the training step eagerly")


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
    tf.random.set_seed(args.seed)
    tf.config.run_functions_eagerly(args.eager)
    x_train, y_train, x_test, y_test = datasets(args.seed)

    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # Horovod's rule: scale the learning rate by the number of ranks.
    opt = tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=args.momentum)

    @tf.function
    def train_step(x, y, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        # Broadcast after the first step, so that the optimizer's state exists.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)
        return loss

    rng = np.random.default_rng(args.seed + hvd.rank())
    first = True
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        for start in range(0, len(order), args.batch_size):
            batch = order[start : start + args.batch_size]
            loss = train_step(x_train[batch], y_train[batch], first)
            first = False
        logits = model(x_test, training=False)
        correct = float(np.sum(np.argmax(logits, axis=1) == y_test))
        accuracy = hvd.allreduce(tf.constant(correct / len(y_test))).numpy()
        if hvd.rank() == 0 and (epoch % args.log_interval == 0 or epoch == args.epochs):
            print(
                f"epoch {epoch}: train loss {float(loss):.4f}, test accuracy {accuracy:.4f}",
                flush=True,
            )
    if hvd.rank() == 0:
        print(f"final test accuracy {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
