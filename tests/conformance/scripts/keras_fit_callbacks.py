"""Keras ``model.fit`` with Horovod's callbacks: a small CNN on generated 12x12 images.

``hvd.DistributedOptimizer``, ``BroadcastGlobalVariablesCallback``, ``MetricAverageCallback``
and ``LearningRateWarmupCallback``, validation data every epoch, a checkpoint written by rank 0
only, steps per epoch scaled by the number of workers, and the test accuracy evaluated at the
end and averaged with ``hvd.allreduce``.

    horovodrun -np 4 -H localhost:4 --gloo python keras_fit_callbacks.py
"""

# conformance: framework=keras
# conformance: metric=accuracy, tolerance=0.03

import argparse
import os
import shutil
import tempfile

# Horovod 0.28's Keras wrappers need the Keras 2 API (tf-keras), not Keras 3.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import harness  # noqa: E402
import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser(description="Keras fit with Horovod callbacks")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=5, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.01, help="learning rate for a single worker")
parser.add_argument("--warmup-epochs", type=int, default=2, help="learning-rate warm-up epochs")
parser.add_argument("--seed", type=int, default=11, help="seed of the generated data")

SIDE = 12
CLASSES = 5


def generate(seed, n_train=3200, n_val=640, n_test=640):
    """Noisy images of one of five fixed random patterns, at a random brightness."""
    rng = np.random.RandomState(seed)
    patterns = rng.normal(size=(CLASSES, SIDE, SIDE, 1))
    n = n_train + n_val + n_test
    labels = rng.randint(CLASSES, size=n)
    brightness = rng.uniform(0.3, 1.0, size=(n, 1, 1, 1))
    images = brightness * patterns[labels] + rng.normal(scale=1.2, size=(n, SIDE, SIDE, 1))
    images = images.astype(np.float32)
    parts = np.split(np.arange(n), [n_train, n_train + n_val])
    return [(images[p], labels[p]) for p in parts]


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
    tf.keras.utils.set_random_seed(args.seed + hvd.rank())

    (x_train, y_train), (x_val, y_val), (x_test, y_test) = generate(args.seed)

    # Horovod: every worker reads its own shard of each set.
    def shard(array):
        return array[hvd.rank() :: hvd.size()]

    train = (
        tf.data.Dataset.from_tensor_slices((shard(x_train), shard(y_train)))
        .repeat()
        .shuffle(1000, seed=args.seed + hvd.rank())
        .batch(args.batch_size)
    )
    val = tf.data.Dataset.from_tensor_slices((shard(x_val), shard(y_val))).batch(64)

    model = tf.keras.Sequential(
        [
            tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(SIDE, SIDE, 1)),
            tf.keras.layers.MaxPooling2D(2),
            tf.keras.layers.Conv2D(16, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(CLASSES),
        ]
    )

    # Horovod: scale the learning rate by the number of workers, and wrap the optimizer.
    scaled_lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(scaled_lr, momentum=0.9))
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=opt,
        metrics=["accuracy"],
    )

    callbacks = [
        # Horovod: start every worker from rank 0's variables.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: average the metrics over the workers at the end of every epoch.
        hvd.callbacks.MetricAverageCallback(),
        # Horovod: ramp the learning rate up to the scaled one over the first epochs.
        hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs, verbose=0
        ),
        tf.keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs: harness.slow_step()
        ),
    ]

    # Horovod: checkpoints on rank 0 only, so that workers do not overwrite each other's.
    checkpoint_dir = None
    if hvd.rank() == 0:
        checkpoint_dir = tempfile.mkdtemp(prefix="keras-fit-checkpoints-")
        checkpoint = os.path.join(checkpoint_dir, "checkpoint-{epoch}.h5")
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(checkpoint))

    # Horovod: fewer steps per epoch with more workers, as each reads its own shard.
    history = model.fit(
        train,
        steps_per_epoch=len(x_train) // (args.batch_size * hvd.size()),
        epochs=args.epochs,
        validation_data=val,
        callbacks=callbacks,
        verbose=2 if hvd.rank() == 0 else 0,
    )

    # MetricAverageCallback leaves every worker with the same epoch metrics.
    val_accuracy = history.history["val_accuracy"][-1]
    every = np.asarray(hvd.allgather(np.array([val_accuracy], dtype=np.float32)))
    if every.shape != (hvd.size(),) or every.max() - every.min() > 1e-6:
        raise RuntimeError(f"rank {hvd.rank()}: averaged val_accuracy differs: {every}")

    if hvd.rank() == 0:
        saved = sorted(os.listdir(checkpoint_dir))
        expected = [f"checkpoint-{epoch + 1}.h5" for epoch in range(args.epochs)]
        if saved != expected:
            raise RuntimeError(f"rank 0 saved {saved}, expected {expected}")
        restored = tf.keras.models.load_model(
            os.path.join(checkpoint_dir, expected[-1]), compile=False
        )
        if len(restored.get_weights()) != len(model.get_weights()):
            raise RuntimeError("the last checkpoint does not hold the model's weights")
        shutil.rmtree(checkpoint_dir)

    # Test accuracy on this worker's shard, averaged over the workers (equal shards).
    _, accuracy = model.evaluate(shard(x_test), shard(y_test), batch_size=64, verbose=0)
    accuracy = float(hvd.allreduce(np.float32(accuracy)))
    if hvd.rank() == 0:
        print(f"val accuracy {val_accuracy:.4f}, test accuracy {accuracy:.4f}", flush=True)
    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
