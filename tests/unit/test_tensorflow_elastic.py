"""``hvd.elastic.run`` for TensorFlow and Keras under Prague: a step that lost a worker
resets; any other error reaches the script (Horovod's own returned from ``train`` on an
``UnknownError`` it did not recognise, as if training had ended)."""

import pytest

tf = pytest.importorskip("tensorflow")
elastic = pytest.importorskip("horovod_prague.tensorflow.elastic")


class State:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def sync(self) -> None:
        self.calls.append("sync")

    def restore(self) -> None:
        self.calls.append("restore")

    def on_reset(self) -> None:
        self.calls.append("on_reset")


@pytest.fixture
def resets(monkeypatch):
    done: list[int] = []
    monkeypatch.setattr(elastic, "_reset", lambda: done.append(1))
    return done


def test_a_step_that_lost_a_worker_in_a_grouped_average_resets(resets):
    errors = [
        tf.errors.UnknownError(
            None, None, "Horovod has been shut down [Op:HorovodGroupedAllreduce]"
        )
    ]

    @elastic.run
    def train(state: State) -> str:
        if errors:
            raise errors.pop()
        return "done"

    state = State()
    assert train(state) == "done"
    assert resets == [1]
    assert state.calls == ["sync", "restore", "on_reset", "sync"]


@pytest.mark.parametrize(
    "error",
    [
        tf.errors.UnknownError(None, None, "Graph execution error: NaN in the loss"),
        tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [8,2] vs. [8,3]"),
        tf.errors.FailedPreconditionError(None, None, "HorovodAllreduce: Mismatched shapes"),
    ],
    ids=["unknown", "invalid-argument", "failed-precondition"],
)
def test_any_other_error_reaches_the_script(resets, error):
    @elastic.run
    def train(state: State) -> None:
        raise error

    with pytest.raises(type(error)):
        train(State())
    assert resets == []
