"""Elastic TensorFlow 2 training with Horovod: an MLP on a generated classification task.

``hvd.elastic.TensorFlowKerasState`` holds the model, the optimizer, the epoch and the batch;
``@hvd.elastic.run`` runs the training loop (a ``@tf.function`` step with
``hvd.DistributedGradientTape``), which commits the state every few batches. Run by
``horovodrun`` in elastic mode:

    horovodrun -np 4 --min-np 2 --network-interface lo --host-discovery-script ./discover.sh \
        --gloo python tf2_elastic.py

where ``discover.sh`` prints the hosts that may run workers (here ``localhost:4``). With a
single host, Horovod's elastic mode needs the network interface named (``lo``): it finds the
interfaces common to the hosts only when there are two or more.
"""

# conformance: framework=tensorflow
# conformance: metric=accuracy, tolerance=0.04
# conformance: args=--min-np 2 --network-interface lo --host-discovery-script scripts/discover.sh

import argparse
import os

# Horovod 0.28 needs the Keras 2 API (tf-keras): TensorFlow must load it as tf.keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import harness  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser(description="Elastic TensorFlow 2 training")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=4, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.02, help="learning rate for a single worker")
parser.add_argument("--commit-every", type=int, default=8, help="batches between commits")
parser.add_argument("--seed", type=int, default=5, help="seed of the generated data")

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
    tf.keras.utils.set_random_seed(2000 + hvd.rank())

    (x_train, y_train), (x_test, y_test) = generate(args.seed)

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
    def training_step(images, labels, allreduce=True):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss_value = loss_fn(labels, logits)

        # Horovod: add Horovod's DistributedGradientTape.
        if allreduce:
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss_value, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss_value

    # Horovod: one local step creates the optimizer's variables, so that the state can
    # synchronize them across workers.
    training_step(x_train[: args.batch_size], y_train[: args.batch_size], allreduce=False)

    def shard():
        # Horovod: every worker trains on its own shard of the current world.
        return x_train[hvd.rank() :: hvd.size()], y_train[hvd.rank() :: hvd.size()]

    @hvd.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            x_shard, y_shard = shard()
            steps = len(x_shard) // args.batch_size
            batches = (
                tf.data.Dataset.from_tensor_slices((x_shard, y_shard))
                .shuffle(len(x_shard), seed=args.seed + state.epoch)
                .batch(args.batch_size, drop_remainder=True)
                .skip(state.batch)
                .take(steps - state.batch)
            )
            for images, labels in batches:
                loss_value = training_step(images, labels)
                harness.slow_step()
                state.batch += 1
                if state.batch % args.commit_every == 0:
                    # Horovod: commit the state every few batches.
                    state.commit()
            if hvd.rank() == 0:
                print(f"epoch {state.epoch}: last loss {float(loss_value):.4f}", flush=True)
            state.epoch += 1
            state.batch = 0
            state.commit()

    def on_state_reset():
        # Horovod: the learning rate follows the number of workers.
        opt.learning_rate.assign(args.lr * hvd.size())

    # Horovod: the state is synchronized from rank 0 when training starts.
    state = hvd.elastic.TensorFlowKerasState(model, opt, epoch=0, batch=0)
    state.register_reset_callbacks([on_state_reset])
    train(state)

    # Test accuracy on this worker's shard of the test set, averaged over the workers.
    x_part, y_part = x_test[hvd.rank() :: hvd.size()], y_test[hvd.rank() :: hvd.size()]
    predictions = np.argmax(model(x_part, training=False).numpy(), axis=1)
    accuracy = hvd.allreduce(tf.constant(np.mean(predictions == y_part), dtype=tf.float32))
    if hvd.rank() == 0:
        print(f"test accuracy {float(accuracy):.4f}", flush=True)
    harness.report(model, float(accuracy))


if __name__ == "__main__":
    main()
