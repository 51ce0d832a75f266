"""Exact group means of int64 tensors, from sums that cannot overflow.

A group's integer tensors are summed by Horovod in int64 and each member then takes the floor
mean or its ``integer_share`` of the sum. The sum of int64 values wraps: two ranks that both
hold ``2**63 - 1`` would end with ``-1``. So an int64 value ``x`` travels as two halves,
``hi = x // 2**32`` (in ``[-2**31, 2**31)``, the arithmetic shift ``x >> 32``) and
``lo = x % 2**32`` (in ``[0, 2**32)``, the low 32 bits), with ``x = hi * 2**32 + lo``, both in
the same int64 collective as the other tensors. A group of ``size`` members sums each half
without overflow while ``size < 2**31``; ``floor_mean`` recovers the floor mean and the
remainder of the whole sum ``S = S_hi * 2**32 + S_lo`` from the two sums (for
``size < 2**30``), and ``corrected`` adds an overlapped average's correction exactly. No
intermediate value of either leaves the int64 range, so they are exact on int64 tensors of
any framework whose ``//`` and ``%`` round toward negative infinity (Python's ints, NumPy,
PyTorch, TensorFlow), not only modulo ``2**64``.

Smaller integer types, widened to int64, are summed whole: their sums cannot overflow.

    >>> floor_mean(*sums([2**63 - 1] * 4), 4)
    (9223372036854775807, 0)
    >>> floor_mean(*sums([-(2**63), 2**63 - 1, 5]), 3)
    (1, 1)
    >>> corrected(2**63 - 1, 0, -(2**63), clip=lambda x, low, high: min(max(x, low), high))
    9223372036854775807
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

HALF = 2**32
"""The weight of the high half: ``x == hi * HALF + lo``."""

MAX_SIZE = 2**30 - 1
"""The largest group ``floor_mean`` is exact for: ``r * HALF + S_lo < 2 * size * HALF``."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

T = TypeVar("T")
Clip = Callable[[Any, int, int], Any]
"""``clip(x, low, high)``: ``x`` clamped to ``[low, high]``, element by element."""


def halves(x: T) -> tuple[T, T]:
    """``(hi, lo)`` of each int64 element: ``x == hi * 2**32 + lo`` and ``0 <= lo < 2**32``.

    >>> halves(-1), halves(2**63 - 1), halves(-(2**63))
    ((-1, 4294967295), (2147483647, 4294967295), (-2147483648, 0))
    """
    return x // HALF, x % HALF  # type: ignore[operator]


def sums(values: Iterable[int]) -> tuple[int, int]:
    """The sums of the halves of ``values``: what a group's collective returns (a reference
    for tests and doctests; the frameworks sum the halves' tensors)."""
    split = [halves(v) for v in values]
    return sum(hi for hi, _ in split), sum(lo for _, lo in split)


def floor_mean(sum_hi: T, sum_lo: T, size: int) -> tuple[T, T]:
    """The floor mean and the remainder, ``divmod(S, size)``, of the whole sums
    ``S = sum_hi * 2**32 + sum_lo`` of ``size`` members' halves.

    With ``q, r = divmod(sum_hi, size)``, ``S = (q * size + r) * 2**32 + sum_lo``, so
    ``divmod(S, size) = (q * 2**32 + m, k)`` for ``m, k = divmod(r * 2**32 + sum_lo, size)``.
    ``q`` is within the range of a high half, so ``q * 2**32`` is an int64; ``r * 2**32 +
    sum_lo < 2 * size * 2**32`` is one for ``size < 2**30``; and the last sum is the floor
    mean of int64 values, which lies between their minimum and maximum.
    """
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"a group of {size} members: integer means need 1 to {MAX_SIZE}")
    quotient, remainder = sum_hi // size, sum_hi % size  # type: ignore[operator]
    rest = remainder * HALF + sum_lo
    return quotient * HALF + rest // size, rest % size


def corrected(target: T, share: T, snapshot: T, clip: Clip) -> T:
    """``target + share - snapshot``, an overlapped average's correction of an int64 tensor,
    computed exactly and clamped to the int64 range where the exact value is outside it.

    Added half by half: ``hi`` stays within three times a half's range and ``lo`` within
    ``(-2**32, 2**33)``; carrying ``lo``'s overflow into ``hi`` leaves ``0 <= lo < 2**32``, and
    the value ``hi * 2**32 + lo`` is an int64 exactly when ``hi`` is within a high half's
    range. Outside it, ``hi`` is clamped to that range and ``lo`` to ``0`` or ``2**32 - 1``.
    """
    (t_hi, t_lo), (s_hi, s_lo), (n_hi, n_lo) = halves(target), halves(share), halves(snapshot)
    lo = t_lo + s_lo - n_lo  # type: ignore[operator]
    hi = t_hi + s_hi - n_hi + lo // HALF  # type: ignore[operator]
    lo = lo % HALF
    kept = clip(hi, INT64_MIN // HALF, INT64_MAX // HALF)
    lo = clip(lo + clip(hi - kept, -1, 1) * HALF, 0, HALF - 1)
    return kept * HALF + lo
