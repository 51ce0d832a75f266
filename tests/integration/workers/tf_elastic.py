"""A plain Horovod elastic TensorFlow script: ``hvd.elastic.run`` with
``TensorFlowKerasState``, a ``DistributedGradientTape`` loop, a commit every few steps. The
fault and the report are ``elastic_torch.py``'s.

    horovodrun --gloo -np 4 --min-np 2 -H localhost:2,127.0.0.1:2 [--prague] \\
        python tf_elastic.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod 0.28 needs tf-keras

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _report import digest, report  # noqa: E402

STEPS = int(os.environ.get("PRAGUE_ELASTIC_STEPS", "40"))
COMMIT_EVERY = 5


def main() -> None:
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype("float32")
    y = (x[:, :2].sum(axis=1) > 0).astype("int64")

    tf.random.set_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8,)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(2),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(0.05 * hvd.size(), momentum=0.5)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    host = os.environ.get("HOROVOD_HOSTNAME", "")
    kill_host = os.environ.get("PRAGUE_KILL_HOST")
    kill_step = int(os.environ.get("PRAGUE_KILL_STEP", "-1"))
    sizes: list[int] = []
    resets: list[int] = []

    def on_reset() -> None:
        resets.append(hvd.size())
        optimizer.learning_rate.assign(0.05 * hvd.size())

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, step=0)
    state.register_reset_callbacks([on_reset])

    def one_step(i: int) -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(y[i : i + 8], model(x[i : i + 8], training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    @hvd.elastic.run
    def train(state: hvd.elastic.TensorFlowKerasState) -> None:
        sizes.append(hvd.size())
        try:
            while state.step < STEPS:
                if host == kill_host and hvd.local_rank() == 0 and state.step == kill_step:
                    if len(sizes) == 1:
                        os._exit(17)
                one_step((state.step * hvd.size() + hvd.rank()) % 32 * 8)
                state.step += 1
                if state.step % COMMIT_EVERY == 0:
                    state.commit()
        except Exception as e:  # what made this rank reset, for the job's log
            print(f"rank {hvd.rank()} of {hvd.size()}: {type(e).__name__}: {e}", flush=True)
            raise

    train(state)
    loss = hvd.allreduce(loss_fn(y, model(x)), name="final_loss")
    report(
        {
            "host": host,
            "size": hvd.size(),
            "sizes": sizes,
            "step": int(state.step),
            "resets": resets,
            "parameters": digest(model.trainable_variables),
            "model": digest(model.variables),
            "loss": float(loss),
        },
        rank=hvd.rank(),
    )


if __name__ == "__main__":
    main()
