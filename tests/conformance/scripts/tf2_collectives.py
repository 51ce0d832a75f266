"""Horovod's other TensorFlow collectives around a training loop: an MLP on generated data.

Between epochs the workers exchange samples with ``hvd.alltoall`` (a shuffle across workers),
compute feature statistics with ``hvd.reducescatter``, count correct predictions with
``hvd.grouped_allreduce``, share a per-worker summary with ``hvd.allgather_object`` and take
rank 0's learning-rate decision with ``hvd.broadcast_object``; the tensor collectives run
eagerly in some epochs and inside a ``tf.function`` in others, and all of them once more after
training. Every result is checked against what it means.

    horovodrun -np 4 -H localhost:4 --gloo python tf2_collectives.py
"""

# conformance: framework=tensorflow
# conformance: metric=accuracy, tolerance=0.03

import argparse
import os

# Horovod 0.28 needs the Keras 2 API (tf-keras): TensorFlow must load it as tf.keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import harness  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser(description="Horovod TensorFlow collectives in training")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=4, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.02, help="learning rate for a single worker")
parser.add_argument("--seed", type=int, default=3, help="seed of the generated data")

FEATURES = 16
CLASSES = 4


def generate(seed, n_train=4096, n_test=1024):
    """Inputs from a normal distribution (feature j shifted by j / 4), labelled by a fixed
    random two-layer "teacher"."""
    rng = np.random.RandomState(seed)
    w1 = rng.normal(size=(FEATURES, 8))
    w2 = rng.normal(size=(8, CLASSES))
    x = rng.normal(size=(n_train + n_test, FEATURES)) + np.arange(FEATURES) / 4
    x = x.astype(np.float32)
    y = np.argmax(np.tanh((x - np.arange(FEATURES) / 4) @ w1) @ w2, axis=1).astype(np.int64)
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def check(condition, what):
    if not condition:
        raise RuntimeError(f"rank {hvd.rank()}: {what}")


def main():
    args = parser.parse_args()

    # Horovod: initialize Horovod.
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    # Horovod: pin a GPU per process when there are GPUs; keep to one thread per op on CPUs.
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(3000 + rank)

    # Horovod: rank 0's settings for the run reach every worker.
    settings = hvd.broadcast_object(
        {"lr": args.lr * size, "decay": 0.5, "from": rank} if rank == 0 else None, root_rank=0
    )
    check(settings["from"] == 0, f"broadcast_object gave {settings}")

    (x_train, y_train), (x_test, y_test) = generate(args.seed)
    # Which samples of the training set each worker holds: a shard by rank to begin with.
    held = [np.arange(r, len(x_train), size) for r in range(size)]

    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(64, activation="relu", input_shape=(FEATURES,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(CLASSES),
        ]
    )
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(settings["lr"], momentum=0.9)

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss_value = loss_fn(labels, logits)

        # Horovod: add Horovod's DistributedGradientTape.
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss_value, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        # Horovod: broadcast the initial variables from rank 0 after the first step.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)
        correct = tf.reduce_sum(tf.cast(tf.argmax(logits, axis=1) == labels, tf.float32))
        return loss_value, correct

    def exchange(images, indices):
        """Sends an equal part of this worker's samples to every worker."""
        return hvd.alltoall(images), hvd.alltoall(indices)

    def feature_means(images):
        """This worker's slice of the features' means over all workers."""
        return hvd.reducescatter(tf.reduce_mean(images, axis=0))

    def counts(correct, seen):
        return hvd.grouped_allreduce([correct, seen], op=hvd.Sum)

    def uneven_exchange():
        """Rank r sends r + 1 rows to rank j (each row [r, j]) and gets j + 1 from rank j."""
        rows = tf.constant([[rank, j] for j in range(size) for _ in range(rank + 1)], tf.int32)
        return hvd.alltoall(rows, splits=tf.constant([rank + 1] * size, tf.int32))

    compiled = {
        "exchange": tf.function(exchange),
        "feature_means": tf.function(feature_means),
        "counts": tf.function(counts),
        "uneven_exchange": tf.function(uneven_exchange),
    }
    eager = {
        "exchange": exchange,
        "feature_means": feature_means,
        "counts": counts,
        "uneven_exchange": uneven_exchange,
    }

    def check_collectives(functions, where, mine, correct, seen):
        # reducescatter: this worker's FEATURES / size features of the mean of the workers'
        # means (equal shards, so the mean over the whole training set).
        part = FEATURES // size
        means = functions["feature_means"](tf.constant(x_train[mine])).numpy()
        expected = np.mean([x_train[h].mean(axis=0) for h in held], axis=0)
        expected = expected[rank * part : (rank + 1) * part]
        check(
            means.shape == (part,) and np.allclose(means, expected, atol=1e-4),
            f"{where}: reducescatter gave {means}, expected {expected}",
        )

        # grouped_allreduce: the counts summed over the workers, as every worker reports them.
        total_correct, total_seen = (float(t) for t in functions["counts"](correct, seen))
        reported = hvd.allgather_object((float(correct), float(seen)))
        check(
            total_correct == sum(c for c, _ in reported)
            and total_seen == sum(s for _, s in reported),
            f"{where}: grouped_allreduce gave {total_correct, total_seen}, reports {reported}",
        )

        # alltoall with splits: r + 1 rows from every rank r.
        rows, received = functions["uneven_exchange"]()
        expected_rows = [[r, rank] for r in range(size) for _ in range(r + 1)]
        check(
            rows.numpy().tolist() == expected_rows
            and received.numpy().tolist() == [r + 1 for r in range(size)],
            f"{where}: alltoall with splits gave {rows.numpy().tolist()}, {received.numpy()}",
        )
        return total_correct / total_seen

    def shuffle_across_workers(functions, where, epoch):
        """Every worker permutes its samples and sends a quarter to each worker; returns the
        indices this worker holds afterwards, checked against what every worker sent."""
        sent = [
            held[r][np.random.RandomState(100 * epoch + r).permutation(len(held[r]))]
            for r in range(size)
        ]
        mine = sent[rank]
        images, indices = functions["exchange"](tf.constant(x_train[mine]), tf.constant(mine))
        part = len(mine) // size
        expected = np.concatenate([sent[r][rank * part : (rank + 1) * part] for r in range(size)])
        check(
            np.array_equal(indices.numpy(), expected),
            f"{where}: alltoall gave indices {indices.numpy()[:8]}..., expected {expected[:8]}...",
        )
        check(
            np.array_equal(images.numpy(), x_train[expected]),
            f"{where}: alltoall's samples are not those of the indices",
        )
        for r in range(size):
            held[r] = np.concatenate([sent[j][r * part : (r + 1) * part] for j in range(size)])
        return held[rank]

    step = 0
    lr = settings["lr"]
    for epoch in range(args.epochs):
        mine = held[rank]
        batches = (
            tf.data.Dataset.from_tensor_slices((x_train[mine], y_train[mine]))
            .shuffle(len(mine), seed=args.seed + epoch)
            .batch(args.batch_size, drop_remainder=True)
        )
        correct = seen = 0.0
        for images, labels in batches:
            loss_value, batch_correct = training_step(images, labels, step == 0)
            harness.slow_step()
            step += 1
            correct += float(batch_correct)
            seen += float(len(labels))

        functions, where = (eager, "eager") if epoch % 2 == 0 else (compiled, "tf.function")
        where = f"{where}, epoch {epoch}"
        train_accuracy = check_collectives(
            functions, where, mine, tf.constant(correct), tf.constant(seen)
        )
        shuffle_across_workers(functions, where, epoch)

        # Horovod: every worker's summary of the epoch, in rank order.
        summaries = hvd.allgather_object({"rank": rank, "steps": step, "loss": float(loss_value)})
        check(
            [s["rank"] for s in summaries] == list(range(size)),
            f"{where}: allgather_object gave {summaries}",
        )
        # Horovod: rank 0 decides the next epoch's learning rate for everyone.
        decision = lr * settings["decay"] if epoch == args.epochs - 2 else lr
        decided = hvd.broadcast_object((rank, decision), root_rank=0)
        check(decided[0] == 0, f"{where}: broadcast_object gave {decided}")
        lr = decided[1]
        opt.learning_rate.assign(lr)
        if rank == 0:
            losses = ", ".join(f"{s['loss']:.3f}" for s in summaries)
            print(f"epoch {epoch}: train accuracy {train_accuracy:.4f}, losses {losses}")

    # After training, once more: both ways.
    mine = held[rank]
    for functions, where in ((compiled, "tf.function, end"), (eager, "eager, end")):
        check_collectives(functions, where, mine, tf.constant(1.0), tf.constant(2.0))

    # Test accuracy: correct predictions and samples summed over the workers' test shards.
    x_part, y_part = x_test[rank::size], y_test[rank::size]
    predictions = np.argmax(model(x_part, training=False).numpy(), axis=1)
    test_correct, test_seen = hvd.grouped_allreduce(
        [tf.constant(float(np.sum(predictions == y_part))), tf.constant(float(len(y_part)))],
        op=hvd.Sum,
    )
    accuracy = float(test_correct) / float(test_seen)
    check(float(test_seen) == len(y_test), f"grouped_allreduce counted {float(test_seen)} samples")
    if rank == 0:
        print(f"test accuracy {accuracy:.4f}", flush=True)
    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
