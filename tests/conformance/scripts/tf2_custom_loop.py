"""TensorFlow 2 custom training loop with Horovod: an MLP on a generated classification task.

A ``@tf.function`` step with ``hvd.DistributedGradientTape``, the model's and optimizer's
variables broadcast from rank 0 after the first step, and the loss averaged across workers
with ``hvd.allreduce`` and gathered with ``hvd.allgather``, eagerly and inside a
``tf.function``. Each collective's result is checked against what it means.

    horovodrun -np 4 -H localhost:4 --gloo python tf2_custom_loop.py
"""

# conformance: framework=tensorflow
# conformance: metric=accuracy, tolerance=0.03
# conformance: long=test_multihost runs it with --prague across two hosts
# conformance: known-gap=0.754-0.780 in 16 --prague runs, stock 0.798 (128 steps), cause open

import argparse
import os

# Horovod 0.28 needs the Keras 2 API (tf-keras): TensorFlow must load it as tf.keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import harness  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser(description="TensorFlow 2 custom loop on a generated task")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=4, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.02, help="learning rate for a single worker")
parser.add_argument("--log-every", type=int, default=10, help="steps between loss reports")
parser.add_argument("--seed", type=int, default=7, help="seed of the generated data")

FEATURES = 16
CLASSES = 4


def generate(seed, n_train=4096, n_test=1024):
    """Inputs from a normal distribution, labelled by a fixed random two-layer "teacher"."""
    rng = np.random.RandomState(seed)
    w1 = rng.normal(size=(FEATURES, 8))
    w2 = rng.normal(size=(8, CLASSES))
    x = rng.normal(size=(n_train + n_test, FEATURES)).astype(np.float32)
    y = np.argmax(np.tanh(x @ w1) @ w2, axis=1).astype(np.int64)
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def check(condition, what):
    if not condition:
        raise RuntimeError(f"rank {hvd.rank()}: {what}")


def main():
    args = parser.parse_args()

    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin a GPU per process when there are GPUs; keep to one thread per op on CPUs.
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    # A different initialization on every worker: the broadcast after the first step makes
    # them equal.
    tf.keras.utils.set_random_seed(1000 + hvd.rank())

    (x_train, y_train), (x_test, y_test) = generate(args.seed)
    # Horovod: every worker trains on its own shard.
    x_shard, y_shard = x_train[hvd.rank() :: hvd.size()], y_train[hvd.rank() :: hvd.size()]
    steps_per_epoch = len(x_shard) // args.batch_size
    dataset = (
        tf.data.Dataset.from_tensor_slices((x_shard, y_shard))
        .shuffle(len(x_shard), seed=args.seed)
        .batch(args.batch_size, drop_remainder=True)
    )

    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(64, activation="relu", input_shape=(FEATURES,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(CLASSES),
        ]
    )
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # Horovod: scale the learning rate by the number of workers.
    opt = tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss_value = loss_fn(labels, logits)

        # Horovod: add Horovod's DistributedGradientTape.
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss_value, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        # Horovod: broadcast the initial variables from rank 0 once the first step has
        # created the optimizer's slots.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)
        return loss_value

    @tf.function
    def loss_across_workers(loss_value):
        """The average loss, every worker's loss, and a gather of unequal lengths."""
        averaged = hvd.allreduce(loss_value)
        every = hvd.allgather(tf.reshape(loss_value, [1]))
        ragged = hvd.allgather(tf.fill([hvd.rank() + 1, 2], tf.cast(hvd.rank(), tf.float32)))
        return averaged, every, ragged

    def check_loss_collectives(loss_value, averaged, every, where):
        every = every.numpy()
        check(every.shape == (hvd.size(),), f"{where}: allgather gave shape {every.shape}")
        check(
            every[hvd.rank()] == loss_value.numpy(),
            f"{where}: allgather's row {hvd.rank()} is {every[hvd.rank()]}, "
            f"not this rank's loss {loss_value.numpy()}",
        )
        check(
            abs(float(averaged) - float(np.mean(every))) < 1e-5,
            f"{where}: allreduce gave {float(averaged)}, the mean of {every} is {np.mean(every)}",
        )

    step = 0
    for epoch in range(args.epochs):
        # Horovod: rank 0 picks the epoch's shuffle seed; the others take it from the broadcast.
        proposal = tf.constant(args.seed * 100 + epoch * 10 + hvd.rank(), dtype=tf.int64)
        epoch_seed = hvd.broadcast(proposal, root_rank=0)
        check(
            int(epoch_seed) == args.seed * 100 + epoch * 10,
            f"broadcast from rank 0 gave {int(epoch_seed)}",
        )
        batches = dataset.shuffle(len(x_shard), seed=int(epoch_seed))
        for images, labels in batches.take(steps_per_epoch):
            loss_value = training_step(images, labels, step == 0)
            harness.slow_step()
            step += 1
            if step % args.log_every == 0:
                if step % (2 * args.log_every) == 0:
                    # Eagerly: Horovod's collectives as plain calls.
                    averaged = hvd.allreduce(loss_value)
                    every = hvd.allgather(tf.reshape(loss_value, [1]))
                    check_loss_collectives(loss_value, averaged, every, f"eager, step {step}")
                else:
                    averaged, every, ragged = loss_across_workers(loss_value)
                    check_loss_collectives(
                        loss_value, averaged, every, f"tf.function, step {step}"
                    )
                    expected = np.concatenate(
                        [np.full((r + 1, 2), r, np.float32) for r in range(hvd.size())]
                    )
                    check(
                        np.array_equal(ragged.numpy(), expected),
                        f"allgather of unequal lengths gave {ragged.numpy().tolist()}",
                    )
                if hvd.rank() == 0:
                    print(f"epoch {epoch} step {step}: loss {float(averaged):.4f}", flush=True)

    # Test accuracy on this worker's shard of the test set, averaged over the workers.
    x_part, y_part = x_test[hvd.rank() :: hvd.size()], y_test[hvd.rank() :: hvd.size()]
    predictions = np.argmax(model(x_part, training=False).numpy(), axis=1)
    accuracy = hvd.allreduce(tf.constant(np.mean(predictions == y_part), dtype=tf.float32))
    if hvd.rank() == 0:
        print(f"test accuracy {float(accuracy):.4f}", flush=True)
    harness.report(model, float(accuracy))


if __name__ == "__main__":
    main()
