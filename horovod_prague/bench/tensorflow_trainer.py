"""The benchmark's TensorFlow rank: stock ``horovod.tensorflow``, a ``tf.function`` step and
``DistributedGradientTape``, as Horovod's TensorFlow 2 examples train."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import numpy as np

from horovod_prague.bench.trainer import CONV_LAYERS, Trainer

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod 0.28's wrappers need tf-keras

import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402


def cnn() -> tf.keras.Model:
    layers: list[Any] = [tf.keras.Input(shape=(40,)), tf.keras.layers.Reshape((40, 1))]
    for channels, kernel in CONV_LAYERS:
        layers.append(
            tf.keras.layers.Conv1D(channels, kernel, strides=2, padding="same", activation="relu")
        )
    layers += [tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)]
    return tf.keras.Sequential(layers)


class FrameworkTrainer(Trainer):
    hvd = hvd
    prague_module = "horovod_prague.tensorflow"

    def __init__(
        self,
        data: dict[str, np.ndarray],
        params: int,
        lr: float,
        seed: int,
        batch: int,
        workload: str = "mnist1d",
    ) -> None:
        if workload != "mnist1d":
            raise ValueError(f"workload {workload!r} is PyTorch's; TensorFlow trains mnist1d")
        tf.config.threading.set_intra_op_parallelism_threads(1)  # before any TF op runs
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        tf.random.set_seed(seed)
        self.x, self.y = data["x"], data["y"]
        self.x_test, self.y_test = data["x_test"], data["y_test"]
        self.model = cnn()
        self.communicated = tf.Variable(tf.zeros([params]), name="communicated")
        self.variables = [*self.model.trainable_variables, self.communicated]
        hvd.broadcast_variables([*self.model.variables, self.communicated], root_rank=0)
        opt = tf.keras.optimizers.SGD(lr, momentum=0.9)
        self.loss_fn = loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def train_step(x: tf.Tensor, y: tf.Tensor) -> None:
            with tf.GradientTape() as tape:
                logits = self.model(x, training=True)
                loss = loss_fn(y, logits) + 0.0 * tf.reduce_sum(self.communicated)
            tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(loss, self.variables)
            opt.apply_gradients(zip(grads, self.variables, strict=True))

        self.train_step = train_step
        train_step.get_concrete_function(
            tf.TensorSpec([batch, self.x.shape[1]], tf.float32),
            tf.TensorSpec([batch], tf.as_dtype(self.y.dtype)),
        )

    def step(self, batch: np.ndarray, weight: float = 1.0) -> float:
        if weight != 1.0:
            raise ValueError("the TensorFlow rank takes no loss weight (--balanced is PyTorch's)")
        began = time.perf_counter()
        self.train_step(self.x[batch], self.y[batch])
        return time.perf_counter() - began

    def test(self) -> tuple[float, float]:
        logits = self.model(self.x_test, training=False)
        predicted = np.argmax(logits.numpy(), axis=1)
        return float(np.mean(predicted == self.y_test)), float(self.loss_fn(self.y_test, logits))

    def digest(self) -> str:
        h = hashlib.sha256()
        for v in [*self.model.variables, self.communicated]:
            h.update(v.numpy().tobytes())
        return h.hexdigest()

    def barrier(self) -> None:
        hvd.allreduce(tf.constant(0.0), name="bench.barrier")

    def end(self) -> None:
        hvd.allreduce(tf.constant(0.0), name="bench.end")
