"""What a torch average sends and how it reads the group's result: no Horovod job needed."""

from __future__ import annotations

import pytest
import torch

from horovod_prague.common.overlap import Overlap
from horovod_prague.torch.binding import _received, _sent


def _group_mean(per_member: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """Horovod's Average over a group, position by position."""
    return [torch.stack(column).mean(0) for column in zip(*per_member, strict=True)]


@pytest.mark.parametrize("weighting", ["equal", "progress"])
def test_an_average_one_member_overlapped_is_damped_on_every_member(weighting):
    """Member 0 started the average while another of its own ran (flag 1), member 1 did not
    (flag 0): both apply 1 / in_flight, the same scale, so the group's mean is kept."""
    values = [torch.tensor([1.0, 3.0]), torch.tensor([5.0, -1.0])]
    weights = [4.0, 1.0] if weighting == "progress" else [None, None]
    flags = [True, False]
    sent = [
        _sent([v.clone()], w, Overlap(flag, 0.5))
        for v, w, flag in zip(values, weights, flags, strict=True)
    ]
    assert [len(s) for s in sent] == [2 if w is None else 3 for w in weights]
    for member, (w, flag) in enumerate(zip(weights, flags, strict=True)):
        (average,), scale = _received(_group_mean(sent), w, Overlap(flag, 0.5))
        assert scale == 0.5, f"member {member} must damp as the other does"
        w0, w1 = (1.0, 1.0) if w is None else weights
        torch.testing.assert_close(average, (w0 * values[0] + w1 * values[1]) / (w0 + w1))


def test_an_average_nobody_overlapped_is_applied_whole():
    sent = [_sent([torch.tensor([float(r)])], 2.0, Overlap(False, 0.5)) for r in range(3)]
    (average,), scale = _received(_group_mean(sent), 2.0, Overlap(False, 0.5))
    assert scale == 1.0 and average.item() == pytest.approx(1.0)


def test_without_overlap_nothing_extra_is_sent():
    data = [torch.ones(3), torch.zeros(2)]
    assert [t.shape for t in _sent(data, None, None)] == [(3,), (2,)]
    results, scale = _received([torch.ones(3), torch.zeros(2)], None, None)
    assert scale == 1.0 and len(results) == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.complex64])
def test_the_flag_travels_in_every_floating_dtype(dtype):
    sent = _sent([torch.ones(2, dtype=dtype)], None, Overlap(True, 0.5))
    assert sent[-1].dtype == dtype and sent[-1].shape == (1,)
    _, scale = _received(sent, None, Overlap(True, 0.5))
    assert scale == 0.5
