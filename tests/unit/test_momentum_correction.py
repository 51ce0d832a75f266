"""``momentum_correction``: an optimizer's momentum takes its share of each group average's
move of a parameter. Horovod's collectives stood in for; no job."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

from horovod_prague.common.binding import Binding
from horovod_prague.common.config import MOMENTUM_CORRECTION, PragueConfig
from horovod_prague.common.overlap import Overlap
from horovod_prague.torch import binding as torch_binding
from horovod_prague.torch import optimizer as optimizer_module

from .test_integer_buffers import GroupCollectives, _apply, _member


def configured(base: type[Binding]) -> type[Binding]:
    """``base``, a framework's binding, as a job with the options it is made with
    (``Job(hvd, momentum_correction="0.3")``), Horovod stood in for by ``hvd``."""

    class Job(base):  # type: ignore[misc, valid-type]
        def __init__(self, hvd: object, **options: str) -> None:
            super().__init__(hvd)
            self.options = PragueConfig(**options, timeout=10.0)

        def config(self) -> PragueConfig:
            return self.options

        def average_weight(self) -> float:
            return 1.0

    return Job


def job_fixture(binding_module: ModuleType, followers_module: ModuleType) -> Any:
    """A fixture that makes a job, of ``binding_module``'s binding, the binding whose moves
    ``followers_module``'s optimizers follow: ``job(momentum_correction="0.3")``."""

    @pytest.fixture
    def job(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Binding]:
        def make(**options: str) -> Binding:
            hvd = GroupCollectives(2)
            monkeypatch.setattr(binding_module, "_hvd", hvd)
            made = configured(type(binding_module.binding))(hvd, **options)
            monkeypatch.setattr(followers_module, "binding", made)
            return made

        return make

    return job


Job = configured(torch_binding.TorchBinding)
job = job_fixture(torch_binding, optimizer_module)


def _optimizer(param: torch.Tensor, cls=torch.optim.SGD, **options) -> torch.optim.Optimizer:
    """``cls`` wrapped as ``DistributedOptimizer`` wraps it, after one local step on gradient 1
    (SGD's momentum buffer then holds 1)."""
    wrapped = type(cls.__name__, (optimizer_module._PragueOptimizer, cls), {})
    opt = wrapped([param], **options)
    opt._prague_setup(1, None, None)
    param.grad = torch.ones_like(param)
    cls.step(opt)
    return opt


def _buffer(opt: torch.optim.Optimizer, param: torch.Tensor) -> torch.Tensor:
    return opt.state[param]["momentum_buffer"]


@pytest.mark.parametrize(("flag", "scale"), [(False, 1.0), (True, 0.5)])
def test_an_overlapped_average_moves_the_momentum_by_its_share_of_the_move(job, flag, scale):
    """Two members, 4 apart, average; each then steps on: the parameter moves by the group
    mean minus its snapshot (times the agreed damping), the buffer by ``-share * move / lr``."""
    shared = job(momentum_correction="0.3")
    params = [torch.full((3,), 0.0), torch.full((3,), 4.0)]
    opts = [_optimizer(p, lr=0.5, momentum=0.9) for p in params]
    snapshots = [p.clone() for p in params]
    buffers_before = [_buffer(o, p).clone() for o, p in zip(opts, params, strict=True)]
    pending = [
        shared.start_average([p], "g", _member(position), 2, Overlap(flag, 0.5))
        for position, p in enumerate(params)
    ]
    for p in params:
        p += 1.0  # a step taken while the average runs
    _apply(pending)
    mean = (snapshots[0] + snapshots[1]) / 2
    for p, o, snap, before in zip(params, opts, snapshots, buffers_before, strict=True):
        move = mean - snap
        torch.testing.assert_close(p, snap + 1.0 + scale * move)
        torch.testing.assert_close(_buffer(o, p), before - 0.3 * scale * move / 0.5)


def test_auto_corrects_by_the_default_share(job):
    job()
    param = torch.zeros(2)
    opt = _optimizer(param, lr=0.5, momentum=0.9)
    optimizer_module.binding.models.moved(param, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, param), torch.ones(2) - MOMENTUM_CORRECTION / 0.5)


def test_above_the_measured_momentum_the_share_is_scaled_down(job):
    """At momentum 0.99 the buffer keeps a move going ten times longer than at 0.9: it takes
    a tenth of the share, so the move carried on stays what was measured."""
    job(momentum_correction="0.2")
    param = torch.zeros(2)
    opt = _optimizer(param, lr=0.5, momentum=0.99)
    optimizer_module.binding.models.moved(param, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, param), torch.full((2,), 1.0 - 0.02 / 0.5))


def test_a_share_of_0_corrects_nothing(job):
    job(momentum_correction="0")
    param = torch.zeros(2)
    opt = _optimizer(param, lr=0.5, momentum=0.9)
    optimizer_module.binding.models.moved(param, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, param), torch.ones(2))


@pytest.mark.parametrize(
    ("cls", "options"),
    [(torch.optim.SGD, {"lr": 0.1}), (torch.optim.Adam, {"lr": 0.1})],
    ids=["sgd-without-momentum", "adam"],
)
def test_an_optimizer_without_a_momentum_buffer_does_not_follow_and_says_so_if_asked(
    job, cls, options
):
    job()  # auto: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _optimizer(torch.zeros(2), cls, **options)
    assert not optimizer_module.binding.models.followed
    job(momentum_correction="0.3")
    with pytest.warns(UserWarning, match="keeps no momentum for it to correct"):
        _optimizer(torch.zeros(2), cls, **options)
    assert not optimizer_module.binding.models.followed


def test_a_tensor_that_is_not_the_optimizers_parameter_is_left_alone(job):
    """A buffer (BatchNorm's statistics) or another optimizer's parameter: no entry made."""
    job(momentum_correction="0.3")
    param, other = torch.zeros(2), torch.zeros(2)
    opt = _optimizer(param, lr=0.5, momentum=0.9)
    optimizer_module.binding.models.moved(other, torch.ones(2), 1.0)
    assert other not in opt.state
    torch.testing.assert_close(_buffer(opt, param), torch.ones(2))


def test_groups_added_or_loaded_later_are_corrected_with_their_own_learning_rate(job):
    """``add_param_group`` adds a group; ``load_state_dict`` (an elastic restore) replaces
    every group, and a scheduler then changes the new ones' learning rate."""
    job(momentum_correction="0.5")
    first, later = torch.zeros(2), torch.zeros(2)
    opt = _optimizer(first, lr=0.5, momentum=0.9)
    opt.add_param_group({"params": [later], "lr": 0.25})
    later.grad = torch.ones(2)
    torch.optim.SGD.step(opt)
    optimizer_module.binding.models.moved(later, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, later), torch.ones(2) - 0.5 / 0.25)
    opt.load_state_dict(opt.state_dict())
    opt.param_groups[0]["lr"] = 0.1
    before = _buffer(opt, first).clone()
    optimizer_module.binding.models.moved(first, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, first), before - 0.5 / 0.1)


def test_two_wrappers_of_one_optimizer_correct_its_buffers_once(job):
    job(momentum_correction="0.5")
    param = torch.zeros(2)
    opt = _optimizer(param, lr=0.5, momentum=0.9)
    again = type(opt).__new__(type(opt))
    again.__dict__.update(opt.__dict__)  # as DistributedOptimizer copies the optimizer's state
    again._prague_setup(1, None, None)
    optimizer_module.binding.models.moved(param, torch.ones(2), 1.0)
    torch.testing.assert_close(_buffer(opt, param), torch.ones(2) - 0.5 / 0.5)


def blocking_averages(
    job: type[Binding],
    hvd: GroupCollectives,
    tensors: list[list[Any]],
    heard: list[Any],
    share_of: int | None,
    prepare: Callable[[Binding], None] = lambda b: None,
) -> None:
    """Each member, on its own thread and with its own job following the moves with its
    ``heard``, runs one blocking average of its ``tensors``: a group's (its position as
    ``share_of``) unless ``share_of`` is None (a world's)."""

    def member(position: int) -> None:
        b = job(hvd)
        prepare(b)
        b.models.follow(heard[position], heard[position])
        share = None if share_of is None else position
        b.average(tensors[position], "g", _member(position), len(tensors), None, share)

    threads = [threading.Thread(target=member, args=(p,)) for p in range(len(tensors))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)


class Heard:
    def __init__(self) -> None:
        self.moves: list[torch.Tensor] = []

    def __call__(self, tensor: torch.Tensor, move: torch.Tensor, scale: float) -> None:
        self.moves.append(move * scale)


@pytest.mark.parametrize("weighting", ["progress", "equal"])
@pytest.mark.parametrize("share_of", [0, None], ids=["group", "world"])
def test_a_blocking_group_average_reports_each_members_move_and_a_world_average_none(
    monkeypatch, weighting, share_of
):
    """Two members at (0, 2, 7) and (4, 2, 7), with an integer counter: only the floating
    tensor's move is reported, and only for a group's average (``share_of``)."""
    hvd = GroupCollectives(2)
    monkeypatch.setattr(torch_binding, "_hvd", hvd)
    heard = [Heard(), Heard()]
    values = [torch.tensor([0.0, 2.0]), torch.tensor([4.0, 2.0])]
    counters = [torch.tensor(7), torch.tensor(7)]

    def equal(b: Binding) -> None:
        if weighting == "equal":
            b.average_weight = lambda: None  # type: ignore[method-assign]

    blocking_averages(
        Job, hvd, [[v, c] for v, c in zip(values, counters, strict=True)], heard, share_of, equal
    )
    for v in values:
        torch.testing.assert_close(v, torch.tensor([2.0, 2.0]))
    if share_of is None:
        assert [h.moves for h in heard] == [[], []]
    else:
        torch.testing.assert_close(heard[0].moves, [torch.tensor([2.0, 0.0])])
        torch.testing.assert_close(heard[1].moves, [torch.tensor([-2.0, 0.0])])


def test_auto_is_the_measured_share_and_zero_turns_it_off():
    assert PragueConfig().momentum_share() == MOMENTUM_CORRECTION > 0
    assert PragueConfig(momentum_correction="0").momentum_share() == 0.0
    assert PragueConfig.from_sources(
        env={"HOROVOD_PRAGUE_MOMENTUM_CORRECTION": "0.5"}
    ).momentum_share() == pytest.approx(0.5)


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
