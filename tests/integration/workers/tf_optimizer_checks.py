"""TensorFlow ``DistributedOptimizer`` with ``backward_passes_per_step``, and when a tape takes
its step, on 4 ranks:
``horovodrun -np 4 ... run_pytest.py tf_optimizer_checks.py``.

Checks use Horovod's own collectives (``horovod.tensorflow``), not the guarded ones.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow as raw  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from _report import same_on_all_ranks  # noqa: E402

import horovod_prague.keras as hvd_keras  # noqa: E402
import horovod_prague.tensorflow as hvd  # noqa: E402
from horovod_prague.common.overlap import wait_until  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def prague():
    hvd.init(strategy="random", group_size=2, timeout=30, seed=5)
    yield
    hvd.shutdown()


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("average", [False, True], ids=["summed", "averaged"])
def test_gradients_accumulate_over_the_passes_then_apply_once(traced, average):
    """Three passes: nothing applied and no Prague step after the first two; the third applies
    the sum (or the mean) of the three gradients. A local variable shows the exact update;
    a shared one is averaged with the step's group, and ends the same on every rank."""
    rank = hvd.rank()
    local = tf.Variable([0.0, 0.0])
    shared = tf.Variable([float(rank)])
    opt = hvd.DistributedOptimizer(
        tf_keras.optimizers.SGD(learning_rate=1.0),
        backward_passes_per_step=3,
        average_aggregated_gradients=average,
    )
    opt.register_local_var(local)

    def one_pass(k: tf.Tensor) -> tf.Tensor:
        grads = [tf.stack([k, 10.0 * k + rank]), tf.constant([1.0])]
        return opt.apply_gradients(zip(grads, [local, shared], strict=True))

    step = tf.function(one_pass) if traced else one_pass
    steps_before = hvd.exchange_stats()["steps"]
    applied = [bool(step(tf.constant(k))) for k in (1.0, 2.0, 3.0)]
    assert applied == [False, False, True]
    assert hvd.exchange_stats()["steps"] == steps_before + 1
    assert int(opt.iterations.numpy()) == 3
    scale = 1 / 3 if average else 1.0
    expected = -scale * np.array([6.0, 60.0 + 3 * rank], dtype=np.float32)
    np.testing.assert_allclose(local.numpy(), expected, rtol=1e-6)
    hvd.average_model([shared])
    assert same_on_all_ranks(raw, shared)


def test_keras_fit_takes_one_prague_step_per_accumulated_batch():
    rank = hvd.rank()
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential(
        [tf_keras.layers.Dense(4, activation="relu"), tf_keras.layers.Dense(1)]
    )
    model.build((None, 3))
    opt = hvd_keras.DistributedOptimizer(
        tf_keras.optimizers.SGD(learning_rate=0.05), backward_passes_per_step=2
    )
    model.compile(optimizer=opt, loss="mse")
    x = np.random.default_rng(rank).normal(size=(64, 3)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    steps_before = hvd.exchange_stats()["steps"]
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert hvd.exchange_stats()["steps"] == steps_before + 8  # 16 batches, 2 per step
    assert history.history["loss"][-1] < history.history["loss"][0]
    for v in model.variables:
        assert same_on_all_ranks(raw, v)  # fit ends with a consensus


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize(
    "make_optimizer",
    [
        tf_keras.optimizers.SGD,
        tf_keras.optimizers.legacy.SGD,
        tf.compat.v1.train.GradientDescentOptimizer,
    ],
    ids=["keras", "keras-legacy", "compat.v1"],
)
def test_a_tape_takes_its_step_when_the_optimizer_applies_its_gradients(traced, make_optimizer):
    """The group average starts right after the update, not at the next ``gradient`` call;
    updated without an optimizer, the step waits for the next ``gradient`` call."""
    rank = hvd.rank()
    w = tf.Variable([float(rank), 1.0])
    opt = make_optimizer(learning_rate=0.1)

    def train(by_optimizer: bool) -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        (grad,) = hvd.DistributedGradientTape(tape).gradient(loss, [w])
        if by_optimizer:
            opt.apply_gradients([(grad, w)])
        else:
            w.assign_sub(0.1 * grad)

    by_optimizer = tf.function(lambda: train(True)) if traced else lambda: train(True)
    by_hand = tf.function(lambda: train(False)) if traced else lambda: train(False)
    steps = hvd.exchange_stats()["steps"]
    by_optimizer()
    assert hvd.exchange_stats()["steps"] == steps + 1
    by_optimizer()
    assert hvd.exchange_stats()["steps"] == steps + 2
    by_hand()
    assert hvd.exchange_stats()["steps"] == steps + 2  # deferred: the tape cannot see it
    by_hand()
    assert hvd.exchange_stats()["steps"] == steps + 3
    hvd.average_model([w])
    assert hvd.exchange_stats()["steps"] == steps + 4
    assert same_on_all_ranks(raw, w)


def test_weighting_by_progress_weighs_each_rank_in_both_paths(monkeypatch):
    """As the PyTorch check: each model counts by its rank's ``average_weight()``."""
    binding = hvd._binding
    monkeypatch.setattr(binding, "average_weight", lambda: float(hvd.rank() + 1))
    world, size = raw.global_process_set, hvd.size()
    weights = [r + 1.0 for r in range(size)]
    expected = sum(w * (10.0 * r + 1) for r, w in enumerate(weights)) / sum(weights)
    blocking = tf.Variable(tf.fill([3], 10.0 * hvd.rank() + 1))
    binding.average([blocking], "check.tf.weighted.0", world, size)
    np.testing.assert_allclose(blocking.numpy(), expected, rtol=1e-6)
    overlapped = tf.Variable(tf.fill([2], 10.0 * hvd.rank() + 1))
    pending = binding.start_average([overlapped], "check.tf.weighted.1", world, size)
    overlapped.assign_add(tf.fill([2], 5.0))  # a local step while the average runs
    wait_until(pending.ready, 30, lambda: "the weighted average did not complete")
    pending.apply()
    np.testing.assert_allclose(overlapped.numpy(), expected + 5.0, rtol=1e-6)
