"""Pace scaling: a rank behind the others takes larger steps, so its data keeps its weight."""

from __future__ import annotations

import types

import pytest
import torch

from horovod_prague.common import binding as common_binding
from horovod_prague.common.config import PragueConfig
from horovod_prague.common.coordinator import GroupGeneratorClient, GroupGeneratorServer
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.protocol import new_token
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology
from horovod_prague.torch.optimizer import _learning_rates_scaled


def _gg(size: int = 4) -> GroupGenerator:
    return GroupGenerator(make_strategy(PragueConfig(strategy="random"), Topology(size, size)))


def test_pace_is_the_mean_step_count_over_the_ranks_own():
    gg = _gg()
    assert gg.pace(3) is None  # nothing reported yet
    for rank, steps in enumerate([30, 30, 30, 10]):
        gg.next_group(rank, steps)
    assert gg.pace(3) == pytest.approx(25 / 10)
    assert gg.pace(0) == pytest.approx(25 / 30)
    gg.next_group(3, 20)  # a later report replaces the earlier one
    assert gg.pace(3) == pytest.approx(27.5 / 20)


def test_without_reported_steps_the_pace_counts_requests():
    gg = _gg(2)
    for _ in range(3):
        gg.next_group(0)
    gg.next_group(1)
    assert gg.pace(1) == pytest.approx(2.0)
    assert gg.pace(0) == pytest.approx(2 / 3)


def test_the_next_reply_carries_the_pace_and_bad_step_counts_are_refused():
    gg = _gg(2)
    token = new_token()
    with GroupGeneratorServer(gg, token, "fp") as server:
        host, port = server.address
        with (
            GroupGeneratorClient(host, port, token, rank=0, timeout=5) as zero,
            GroupGeneratorClient(host, port, token, rank=1, timeout=5) as one,
        ):
            zero.hello("fp")
            one.hello("fp")
            assert zero.pace is None
            zero.next_group(12)
            one.next_group(4)
            assert one.pace == pytest.approx(2.0)
            zero.next_group(12)
            assert zero.pace == pytest.approx(8 / 12)
            for bad in (-1, "3", True, 2.5):
                with pytest.raises(RuntimeError, match="'steps' must be a non-negative integer"):
                    one.request("next", steps=bad)


class _Binding(common_binding.Binding):
    def tensors(self, source):
        return list(source)

    def average(self, tensors, name, process_set, size):
        raise AssertionError("not used")


def _binding(pace: float | None, steps: int, limit: float = 4.0) -> _Binding:
    b = _Binding(types.ModuleType("hvd"))
    b._runtime = types.SimpleNamespace(
        config=PragueConfig(pace_limit=limit), client=types.SimpleNamespace(pace=pace)
    )
    b._exchange_counts["steps"] = steps
    return b


@pytest.mark.parametrize(
    ("pace", "steps", "limit", "scale"),
    [
        (2.5, 20, 4.0, 2.5),  # behind: larger steps
        (0.9, 20, 4.0, 0.9),  # ahead: slightly smaller ones
        (9.0, 20, 4.0, 4.0),  # clipped to the limit
        (0.1, 20, 4.0, 0.25),
        (2.5, common_binding.PACE_WARMUP - 1, 4.0, 1.0),  # too early to trust the counts
        (None, 20, 4.0, 1.0),
        (2.5, 20, 1.0, 1.0),  # turned off
    ],
)
def test_step_scale_follows_the_pace_within_the_limit(pace, steps, limit, scale):
    assert _binding(pace, steps, limit).step_scale() == pytest.approx(scale)


def test_pace_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="pace_limit: must be >= 1"):
        PragueConfig(pace_limit=0.5)


@pytest.mark.parametrize("tensor_lr", [False, True])
def test_learning_rates_are_scaled_for_the_step_and_restored_exactly(tensor_lr):
    w = torch.nn.Parameter(torch.ones(3))
    lrs = [0.1, 0.03]
    opt = torch.optim.SGD(
        [
            {"params": [w], "lr": torch.tensor(lrs[0]) if tensor_lr else lrs[0]},
            {"params": [torch.nn.Parameter(torch.ones(1))], "lr": lrs[1]},
        ],
        momentum=0.9,
    )
    before = [g["lr"] for g in opt.param_groups]
    w.grad = torch.ones(3)
    with _learning_rates_scaled(opt.param_groups, 2.5):
        assert [float(g["lr"]) for g in opt.param_groups] == pytest.approx([0.25, 0.075])
        opt.step()
    assert all(g["lr"] is b for g, b in zip(opt.param_groups, before, strict=True))
    assert torch.allclose(w.detach(), torch.full((3,), 1 - 0.25))
