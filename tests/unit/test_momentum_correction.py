"""``momentum_correction``: an optimizer's momentum takes its share of each group average's
move of a parameter. Horovod's collectives stood in for; no job."""

from __future__ import annotations

import threading
import types

import pytest
import torch

from horovod_prague.common.binding import Binding
from horovod_prague.common.config import MOMENTUM_CORRECTION, PragueConfig
from horovod_prague.common.overlap import Overlap
from horovod_prague.torch import binding as torch_binding
from horovod_prague.torch.optimizer import _PragueOptimizer

from .test_integer_buffers import GroupCollectives, _apply, _member


def _optimizer(param: torch.Tensor, share: float, lr: float = 0.5) -> torch.optim.Optimizer:
    """SGD with momentum as ``DistributedOptimizer`` makes it, without a job: one step taken
    on gradient 1, so its momentum buffer holds 1."""
    cls = type("SGD", (_PragueOptimizer, torch.optim.SGD), {})
    opt = cls([param], lr=lr, momentum=0.9)
    opt._momentum_share = share
    opt._param_groups_by_id = {}
    param.grad = torch.ones_like(param)
    torch.optim.SGD.step(opt)
    return opt


def _buffer(opt: torch.optim.Optimizer, param: torch.Tensor) -> torch.Tensor:
    return opt.state[param]["momentum_buffer"]


@pytest.mark.parametrize(("flag", "scale"), [(False, 1.0), (True, 0.5)])
def test_an_overlapped_average_moves_the_momentum_by_its_share_of_the_move(
    flag, scale, monkeypatch
):
    """Two members, 4 apart, average; each then steps on: the parameter moves by the group
    mean minus its snapshot (times the agreed damping), the buffer by ``-share * move / lr``."""
    hvd = GroupCollectives(2)
    monkeypatch.setattr(torch_binding, "_hvd", hvd)
    params = [torch.full((3,), 0.0), torch.full((3,), 4.0)]
    opts = [_optimizer(p, share=0.3) for p in params]
    snapshots = [p.clone() for p in params]
    buffers_before = [_buffer(o, p).clone() for o, p in zip(opts, params, strict=True)]
    pending = []
    for position, (p, o) in enumerate(zip(params, opts, strict=True)):
        average = torch_binding.TorchPendingAverage(
            [p], "g", _member(position), 2, overlap=Overlap(flag, 0.5)
        )
        average.moved = o._take_momentum_share
        pending.append(average)
    for p in params:
        p += 1.0  # a step taken while the average runs
    _apply(pending)
    mean = (snapshots[0] + snapshots[1]) / 2
    for p, o, snap, before in zip(params, opts, snapshots, buffers_before, strict=True):
        move = mean - snap
        torch.testing.assert_close(p, snap + 1.0 + scale * move)
        torch.testing.assert_close(_buffer(o, p), before - 0.3 * scale * move / 0.5)


def test_above_the_measured_momentum_the_share_is_scaled_down():
    """At momentum 0.99 the buffer keeps a move going ten times longer than at 0.9: it takes
    a tenth of the share, so the move carried on stays what was measured."""
    param = torch.zeros(2)
    cls = type("SGD", (_PragueOptimizer, torch.optim.SGD), {})
    opt = cls([param], lr=0.5, momentum=0.99)
    opt._momentum_share, opt._param_groups_by_id = 0.2, {}
    param.grad = torch.ones(2)
    torch.optim.SGD.step(opt)
    opt._take_momentum_share(param, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, param), torch.full((2,), 1.0 - 0.02 / 0.5))


def test_without_a_share_or_momentum_nothing_but_the_parameter_moves():
    param = torch.zeros(2)
    opt = _optimizer(param, share=0.0)
    opt._take_momentum_share(param, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, param), torch.ones(2))
    plain = torch.zeros(2)
    cls = type("SGD", (_PragueOptimizer, torch.optim.SGD), {})
    no_momentum = cls([plain], lr=0.1)
    no_momentum._momentum_share, no_momentum._param_groups_by_id = 0.3, {}
    plain.grad = torch.ones(2)
    torch.optim.SGD.step(no_momentum)
    no_momentum._take_momentum_share(plain, torch.ones(2), 1.0)  # nothing to correct
    assert no_momentum.state[plain].get("momentum_buffer") is None


def test_a_tensor_that_is_not_the_optimizers_parameter_is_left_alone():
    """A buffer (BatchNorm's statistics) or another optimizer's parameter: no entry made."""
    param, other = torch.zeros(2), torch.zeros(2)
    opt = _optimizer(param, share=0.3)
    opt._take_momentum_share(other, torch.ones(2), 1.0)
    assert other not in opt.state
    torch.testing.assert_close(_buffer(opt, param), torch.ones(2))


def test_a_parameter_group_added_later_is_corrected_too():
    first, later = torch.zeros(2), torch.zeros(2)
    opt = _optimizer(first, share=0.5)
    opt.add_param_group({"params": [later], "lr": 0.25})
    later.grad = torch.ones(2)
    torch.optim.SGD.step(opt)
    opt._take_momentum_share(later, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, later), torch.ones(2) - 0.5 * 1.0 / 0.25)


def _blocking_average(share_of: int | None, monkeypatch) -> list[list[torch.Tensor]]:
    """Two members average blocking, weighted, on threads; what each one's follower heard."""
    hvd = GroupCollectives(2)
    monkeypatch.setattr(torch_binding, "_hvd", hvd)
    heard: list[list[torch.Tensor]] = [[], []]
    values = [torch.tensor([0.0, 2.0]), torch.tensor([4.0, 2.0])]

    def member(position: int) -> None:
        b = torch_binding.TorchBinding(hvd)
        b.average_weight = lambda: 1.0  # type: ignore[method-assign]
        b.config = lambda: types.SimpleNamespace(timeout=10.0)  # type: ignore[method-assign]
        b.follow_moves(lambda t, move, scale: heard[position].append(move * scale))
        b.average([values[position]], "g", _member(position), 2, None, share_of and position)

    threads = [threading.Thread(target=member, args=(p,)) for p in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    for v in values:
        torch.testing.assert_close(v, torch.tensor([2.0, 2.0]))
    return heard


def test_a_blocking_group_average_reports_each_members_move(monkeypatch):
    heard = _blocking_average(share_of=1, monkeypatch=monkeypatch)
    torch.testing.assert_close(heard[0], [torch.tensor([2.0, 0.0])])
    torch.testing.assert_close(heard[1], [torch.tensor([-2.0, 0.0])])


def test_a_world_average_leaves_the_momentum_alone(monkeypatch):
    assert _blocking_average(share_of=None, monkeypatch=monkeypatch) == [[], []]


def test_a_framework_that_cannot_follow_moves_refuses_the_option_at_init():
    class NoFollowing(Binding):
        def tensors(self, source):
            return list(source)

        def average(self, tensors, name, process_set, size, overlap=None, share_of=None):
            raise AssertionError("no average here")

    binding = NoFollowing(types.SimpleNamespace())
    with pytest.raises(ValueError, match="momentum_correction: NoFollowing cannot correct"):
        binding.init(momentum_correction="0.2")


def test_auto_is_a_share_where_the_framework_can_apply_it_and_none_elsewhere():
    assert PragueConfig().momentum_share(True) == MOMENTUM_CORRECTION > 0
    assert PragueConfig().momentum_share(False) == 0.0
    assert PragueConfig(momentum_correction="0").momentum_share(True) == 0.0
    assert PragueConfig.from_sources(
        env={"HOROVOD_PRAGUE_MOMENTUM_CORRECTION": "0.5"}
    ).momentum_share(True) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("share", "message"),
    [
        ("-0.1", "must be in \\[0, 1\\]"),
        ("1.5", "must be in \\[0, 1\\]"),
        ("nan", "must be in \\[0, 1\\]"),
        ("some", "expected 'auto' or a share from 0 to 1, got 'some'"),
    ],
)
def test_a_share_outside_0_to_1_is_refused(share, message):
    with pytest.raises(ValueError, match=f"momentum_correction: {message}"):
        PragueConfig(momentum_correction=share)
