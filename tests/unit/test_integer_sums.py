"""The exact int64 group means of ``integer_sums``, against Python's unbounded integers.

Each function runs on ``Int64``, an int that fails on any intermediate value outside the
int64 range (what an int64 tensor would wrap silently), and on PyTorch and TensorFlow int64
tensors, the types the bindings give it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from horovod_prague.common.integer_sums import (
    HALF,
    INT64_MAX,
    INT64_MIN,
    MAX_SIZE,
    corrected,
    floor_mean,
    halves,
    sums,
)
from horovod_prague.common.overlap import integer_share


def _checked(name: str) -> Callable[[int, int], Int64]:
    """``int``'s operator ``name``, its result an ``Int64``."""

    def op(self: int, other: int) -> Int64:
        return Int64(getattr(int, name)(int(self), int(other)))

    return op


class Int64(int):
    """An int whose arithmetic fails where an int64's would leave the int64 range."""

    def __new__(cls, value: int) -> Int64:
        if not INT64_MIN <= value <= INT64_MAX:
            raise OverflowError(f"{value} is outside the int64 range")
        return super().__new__(cls, value)

    __add__, __radd__ = _checked("__add__"), _checked("__radd__")
    __sub__, __rsub__ = _checked("__sub__"), _checked("__rsub__")
    __mul__, __rmul__ = _checked("__mul__"), _checked("__rmul__")
    __floordiv__, __mod__ = _checked("__floordiv__"), _checked("__mod__")


def _clip(x: int, low: int, high: int) -> Int64:
    return Int64(min(max(x, low), high))


def _clamped(x: int) -> int:
    return min(max(x, INT64_MIN), INT64_MAX)


INT64 = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(INT64_MAX - 2**34, INT64_MAX),
    st.integers(INT64_MIN, INT64_MIN + 2**34),
    st.sampled_from([INT64_MIN, INT64_MAX, 2**62, -(2**62), -1, 0, HALF - 1, HALF, -HALF]),
)
SIZES = st.integers(2, 64)
ROWS = SIZES.flatmap(
    lambda n: st.lists(st.lists(INT64, min_size=3, max_size=3), min_size=n, max_size=n)
)
"""A group's members, each holding a tensor of three int64 values."""
GROUPS = st.one_of(
    SIZES.flatmap(lambda n: st.lists(INT64, min_size=n, max_size=n)),
    st.tuples(INT64, SIZES).map(lambda v: [v[0]] * v[1]),  # every member holds the same value
)


def test_the_int64_check_catches_an_overflow():
    with pytest.raises(OverflowError):
        Int64(INT64_MAX) + 1


@given(INT64)
@example(INT64_MIN)
@example(INT64_MAX)
def test_halves_are_the_arithmetic_shift_and_the_low_32_bits(x):
    hi, lo = halves(Int64(x))
    assert (hi, lo) == (x >> 32, x & 0xFFFFFFFF)
    assert hi * HALF + lo == x
    assert -(2**31) <= hi < 2**31 and 0 <= lo < HALF


@given(GROUPS)
@example([2**62] * 4)
@example([INT64_MAX] * 64)
@example([INT64_MIN] * 64)
@example([INT64_MIN, INT64_MAX])
@example([INT64_MAX] * 63 + [INT64_MAX - 1])
def test_the_floor_mean_and_the_remainder_are_exact(values):
    size = len(values)
    sum_hi, sum_lo = sums(Int64(v) for v in values)  # each half's sum is an int64
    mean, remainder = floor_mean(sum_hi, sum_lo, size)
    assert (mean, remainder) == divmod(sum(values), size)
    shares = [mean + (p < remainder) for p in range(size)]
    assert shares == [integer_share(sum(values), size, p) for p in range(size)]
    assert all(INT64_MIN <= s <= INT64_MAX for s in shares)
    if len(set(values)) == 1:
        assert shares == values


@given(INT64, INT64, INT64)
@example(INT64_MAX, 0, INT64_MIN)
@example(INT64_MIN, INT64_MIN, INT64_MAX)
@example(INT64_MAX, INT64_MAX, INT64_MAX)
@example(INT64_MIN, INT64_MAX, INT64_MAX)
@example(INT64_MAX - 3, 2**62, 2**62 - 3)
def test_the_correction_is_exact_or_clamped(target, share, snapshot):
    result = corrected(Int64(target), Int64(share), Int64(snapshot), _clip)
    assert result == _clamped(target + share - snapshot)


@settings(max_examples=50, deadline=None)
@given(ROWS)
@example([[2**62, INT64_MAX, 7]] * 4)
@example([[INT64_MIN, INT64_MIN, INT64_MAX]] * 64)
def test_torch_tensors_take_the_exact_means_and_corrections(rows):
    size = len(rows)
    values = torch.tensor(rows, dtype=torch.int64)
    hi, lo = halves(values)
    mean, remainder = floor_mean(hi.sum(0), lo.sum(0), size)
    exact = [divmod(sum(column), size) for column in zip(*rows, strict=True)]
    assert list(zip(mean.tolist(), remainder.tolist(), strict=True)) == exact
    target, snapshot = values[0], values[-1]
    result = corrected(target, mean, snapshot, torch.clamp)
    expected = [_clamped(t + m - s) for t, (m, _), s in zip(rows[0], exact, rows[-1], strict=True)]
    assert result.tolist() == expected


@settings(max_examples=20, deadline=None)
@given(ROWS)
@example([[2**62, INT64_MAX, 7]] * 4)
@example([[INT64_MIN, INT64_MIN, INT64_MAX]] * 64)
def test_tensorflow_tensors_take_the_exact_means_and_corrections(rows):
    tf_binding = pytest.importorskip("horovod_prague.tensorflow.binding")
    tf = tf_binding.tf
    size = len(rows)
    values = tf.constant(rows, tf.int64)
    hi, lo = halves(values)
    mean, remainder = floor_mean(tf.reduce_sum(hi, 0), tf.reduce_sum(lo, 0), size)
    exact = [divmod(sum(column), size) for column in zip(*rows, strict=True)]
    got = zip(mean.numpy().tolist(), remainder.numpy().tolist(), strict=True)
    assert list(got) == exact
    result = corrected(values[0], mean, values[-1], tf_binding._clip)
    expected = [_clamped(t + m - s) for t, (m, _), s in zip(rows[0], exact, rows[-1], strict=True)]
    assert result.numpy().tolist() == expected


@pytest.mark.parametrize("size", [0, MAX_SIZE + 1])
def test_a_group_too_large_or_empty_for_exact_means_is_refused(size):
    with pytest.raises(ValueError, match=f"a group of {size} members"):
        floor_mean(0, 0, size)
