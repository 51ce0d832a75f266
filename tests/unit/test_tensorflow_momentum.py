"""``momentum_correction`` under TensorFlow: a Keras optimizer's momentum takes its share of
each group average's move of a variable. Horovod's collectives stood in for; no job."""

from __future__ import annotations

import os
import warnings
import weakref

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")
tf_keras = pytest.importorskip("tf_keras")
tf_binding = pytest.importorskip("horovod_prague.tensorflow.binding")
momentum = pytest.importorskip("horovod_prague.tensorflow.momentum")

from horovod_prague.common.config import MOMENTUM_CORRECTION  # noqa: E402
from horovod_prague.common.overlap import Overlap  # noqa: E402

from .test_integer_buffers import GroupCollectives, _apply, _member  # noqa: E402
from .test_momentum_correction import blocking_averages, configured, job_fixture  # noqa: E402

Job = configured(tf_binding.TensorflowBinding)
job = job_fixture(tf_binding, momentum)


@pytest.fixture(autouse=True)
def nothing_followed_yet(monkeypatch):
    """Each test's optimizers are new to ``follow_momentum``."""
    monkeypatch.setattr(momentum, "_followed", weakref.WeakSet())


def _keras3(name: str):
    def make(**options):
        keras = pytest.importorskip("keras")
        return getattr(keras.optimizers, name)(**options)

    return make


OPTIMIZERS = {
    "sgd": (lambda **o: tf_keras.optimizers.SGD(**o), 1.0),
    "legacy-sgd": (lambda **o: tf_keras.optimizers.legacy.SGD(**o), 1.0),
    "rmsprop": (lambda **o: tf_keras.optimizers.RMSprop(**o), -1.0),
    "legacy-rmsprop": (lambda **o: tf_keras.optimizers.legacy.RMSprop(**o), -1.0),
    "loss-scaled-sgd": (
        lambda **o: tf_keras.mixed_precision.LossScaleOptimizer(
            tf_keras.optimizers.SGD(**o), dynamic=False, initial_scale=1.0
        ),
        1.0,
    ),
    "keras3-sgd": (_keras3("SGD"), 1.0),
    "keras3-rmsprop": (_keras3("RMSprop"), -1.0),
}


def _stepped(variable: tf.Variable, kind: str = "sgd", **options) -> tuple[object, float]:
    """A ``kind`` optimizer after one step of ``variable`` on gradient 1, followed by the
    binding, and the sign its momentum takes a move with."""
    make, sign = OPTIMIZERS[kind]
    opt = make(**{"learning_rate": 0.5, "momentum": 0.9, **options})
    opt.apply_gradients([(tf.ones_like(variable), variable)])
    momentum.follow_momentum(opt)
    return opt, sign


def _buffer(opt: object, variable: tf.Variable) -> list[float]:
    found = momentum.MomentumShare.of(opt)
    assert found is not None
    buffer = found.buffer(variable)
    assert buffer is not None
    return buffer.numpy().tolist()


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_each_keras_kind_takes_its_share_of_a_move_in_its_own_sign(job, kind):
    """SGD's ``m`` (``var += m``) gains ``share * move``; RMSprop's (``var -= m``) loses it."""
    shared = job(momentum_correction="0.3")
    variable = tf.Variable([0.0, 0.0])
    opt, sign = _stepped(variable, kind)
    before = _buffer(opt, variable)
    shared.models.moved(variable, tf.constant([1.0, -2.0]), 1.0)
    assert _buffer(opt, variable) == pytest.approx([before[0] + sign * 0.3, before[1] - sign * 0.6])


@pytest.mark.parametrize(("flag", "scale"), [(False, 1.0), (True, 0.5)])
def test_an_overlapped_average_moves_the_momentum_by_its_share_of_the_move(job, flag, scale):
    """Two members, 4 apart, average; each steps on meanwhile: the variable moves by the group
    mean minus its snapshot (times the agreed damping), SGD's ``m`` by ``share`` of that."""
    shared = job(momentum_correction="0.3")
    variables = [tf.Variable([0.0, 0.0]), tf.Variable([4.0, 4.0])]
    opts = [_stepped(v)[0] for v in variables]
    snapshots = [v.numpy() for v in variables]
    buffers_before = [_buffer(o, v) for o, v in zip(opts, variables, strict=True)]
    pending = [
        shared.start_average([v], "g", _member(position), 2, Overlap(flag, 0.5))
        for position, v in enumerate(variables)
    ]
    for v in variables:
        v.assign_add([1.0, 1.0])  # a step taken while the average runs
    _apply(pending)
    mean = (snapshots[0] + snapshots[1]) / 2
    for v, o, snap, before in zip(variables, opts, snapshots, buffers_before, strict=True):
        move = mean - snap
        assert v.numpy().tolist() == pytest.approx((snap + 1.0 + scale * move).tolist())
        assert _buffer(o, v) == pytest.approx((before + 0.3 * scale * move).tolist())


def test_auto_corrects_by_the_default_share_and_0_by_none(job):
    variable = tf.Variable([0.0])
    shared = job()
    opt, _ = _stepped(variable)
    shared.models.moved(variable, tf.constant([1.0]), 1.0)
    assert _buffer(opt, variable) == pytest.approx([-0.5 + MOMENTUM_CORRECTION])
    off = job(momentum_correction="0")
    off.models.follow(momentum.MomentumShare.of(opt), opt)
    off.models.moved(variable, tf.constant([1.0]), 1.0)
    assert _buffer(opt, variable) == pytest.approx([-0.5 + MOMENTUM_CORRECTION])


def test_above_the_measured_momentum_the_share_is_scaled_down(job):
    shared = job(momentum_correction="0.2")
    variable = tf.Variable([0.0])
    opt, _ = _stepped(variable, momentum=0.99)
    shared.models.moved(variable, tf.constant([1.0]), 1.0)
    assert _buffer(opt, variable) == pytest.approx([-0.5 + 0.02])


@pytest.mark.parametrize(
    "make",
    [
        lambda: tf_keras.optimizers.SGD(0.1),
        lambda: tf_keras.optimizers.legacy.SGD(0.1),
        lambda: tf_keras.optimizers.Adam(0.1),
        lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
    ],
    ids=["sgd-without-momentum", "legacy-sgd-without-momentum", "adam", "tf-v1-momentum"],
)
def test_an_optimizer_without_keras_momentum_is_not_followed_and_says_so_if_asked(job, make):
    job()  # auto: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        momentum.follow_momentum(make())
    assert not momentum.binding.models.followed
    job(momentum_correction="0.3")
    with pytest.warns(UserWarning, match="keeps no momentum for it to correct"):
        momentum.follow_momentum(make())
    assert not momentum.binding.models.followed


def test_a_variable_the_optimizer_does_not_update_is_left_alone(job):
    shared = job(momentum_correction="0.3")
    variable, other = tf.Variable([0.0]), tf.Variable([0.0])
    opt, _ = _stepped(variable)
    shared.models.moved(other, tf.constant([1.0]), 1.0)
    assert _buffer(opt, variable) == pytest.approx([-0.5])
    assert momentum.MomentumShare.of(opt).buffer(other) is None


def test_an_optimizer_seen_at_every_step_warns_once(job):
    """The tape's hook passes the optimizer at every eager step."""
    job(momentum_correction="0.3")
    opt = tf_keras.optimizers.Adam(0.1)
    with pytest.warns(UserWarning) as caught:
        momentum.follow_momentum(opt)
        momentum.follow_momentum(opt)
    assert len(caught) == 1


def test_an_explicit_share_of_0_follows_nothing(job):
    job(momentum_correction="0")
    _stepped(tf.Variable([0.0]))
    assert not momentum.binding.models.followed


@pytest.fixture
def wrapping(job, monkeypatch):
    """``job``, made the binding ``DistributedOptimizer`` registers with (no Prague step is
    taken: the tests update through the wrapped class's own ``apply_gradients``)."""
    tf_optimizer = pytest.importorskip("horovod_prague.tensorflow.optimizer")

    def make(**options: str):
        made = job(**options)
        monkeypatch.setattr(made, "runtime", lambda: None)
        monkeypatch.setattr(tf_optimizer, "binding", made)
        return made

    return make, tf_optimizer


@pytest.mark.parametrize("kind", ["sgd", "legacy-sgd"])
def test_distributed_optimizer_follows_the_optimizer_it_wraps_once_however_often(wrapping, kind):
    """Wrapped twice (a script that compiles again), the optimizer's buffers, shared by
    both wrappers of a legacy optimizer, still take each move once."""
    make_job, tf_optimizer = wrapping
    shared = make_job(momentum_correction="0.3")
    variable = tf.Variable([0.0])
    original = OPTIMIZERS[kind][0](learning_rate=0.5, momentum=0.9)
    original.apply_gradients([(tf.ones_like(variable), variable)])
    process_set = tf_optimizer._hvd.global_process_set
    tf_optimizer.wrap_optimizer(original, process_set)
    wrapped = tf_optimizer.wrap_optimizer(original, process_set)
    assert shared.models.followed
    before = _buffer(wrapped, variable)
    shared.models.moved(variable, tf.constant([1.0]), 1.0)
    assert _buffer(wrapped, variable) == pytest.approx([before[0] + 0.3])


def test_the_tape_hook_follows_the_optimizer_that_updates_the_tapes_variables(wrapping):
    make_job, tf_optimizer = wrapping
    shared = make_job(momentum_correction="0.3")
    variable, other = tf.Variable([0.0]), tf.Variable([0.0])
    apply = tf_optimizer._taking_the_tape_step(tf_keras.optimizers.SGD.apply_gradients)
    untaped = tf_keras.optimizers.SGD(0.5, momentum=0.9)
    apply(untaped, [(tf.ones_like(other), other)])
    assert not shared.models.followed  # no tape's variable: not Prague's to correct
    shared.tape_sources[variable.ref()] = variable
    opt = tf_keras.optimizers.SGD(0.5, momentum=0.9)
    apply(opt, [(tf.ones_like(variable), variable)])
    shared.models.moved(variable, tf.constant([1.0]), 1.0)
    assert _buffer(opt, variable) == pytest.approx([-0.5 + 0.3])


@pytest.mark.parametrize("kind", ["sgd", "legacy-sgd"])
def test_an_optimizer_first_seen_while_a_function_is_traced_is_followed(job, kind):
    """The tape's hook sees the optimizer while ``fit`` or a ``tf.function`` step is traced,
    when a legacy optimizer's momentum is a variable that cannot be read in the graph."""
    shared = job(momentum_correction="0.3")
    variable = tf.Variable([0.0])
    opt = OPTIMIZERS[kind][0](learning_rate=0.5, momentum=0.9)

    @tf.function
    def step() -> None:
        opt.apply_gradients([(tf.ones_like(variable), variable)])
        momentum.follow_momentum(opt)

    step()
    shared.models.moved(variable, tf.constant([1.0]), 1.0)
    assert _buffer(opt, variable) == pytest.approx([-0.5 + 0.3])


class Heard:
    def __init__(self) -> None:
        self.moves: list[list[float]] = []

    def __call__(self, variable: tf.Variable, move: tf.Tensor, scale: float) -> None:
        self.moves.append((move * scale).numpy().tolist())


@pytest.mark.parametrize("share_of", [0, None], ids=["group", "world"])
def test_a_blocking_group_average_reports_each_members_move_and_a_world_average_none(
    monkeypatch, share_of
):
    """Two members at (0, 2) and (4, 2), with an integer counter: only the floating
    variable's move is reported, and only for a group's average (``share_of``)."""
    hvd = GroupCollectives(2)
    monkeypatch.setattr(tf_binding, "_hvd", hvd)
    heard = [Heard(), Heard()]
    values = [tf.Variable([0.0, 2.0]), tf.Variable([4.0, 2.0])]
    counters = [tf.Variable(7, dtype=tf.int64), tf.Variable(7, dtype=tf.int64)]

    pairs = [[v, c] for v, c in zip(values, counters, strict=True)]
    blocking_averages(Job, hvd, pairs, heard, share_of)
    assert [v.numpy().tolist() for v in values] == [[2.0, 2.0], [2.0, 2.0]]
    if share_of is None:
        assert [h.moves for h in heard] == [[], []]
    else:
        assert [h.moves for h in heard] == [[[2.0, 0.0]], [[-2.0, 0.0]]]
