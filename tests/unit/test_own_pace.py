"""Own pace (``horovod_prague.torch.pace``): shares that follow the speeds, the same number of
batches on every rank, every sample of the epoch once."""

from __future__ import annotations

import types
from collections import Counter

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset

from horovod_prague.common import shares
from horovod_prague.common.binding import Job
from horovod_prague.torch import pace


def test_shares_follow_the_speeds_and_sum_to_the_total():
    assert shares.shares([2.0, 1.0, 1.0], total=400, batches=4) == [200, 100, 100]
    assert sum(shares.shares([1.3, 0.7, 0.11, 5.0], total=1001, batches=7)) == 1001


def test_a_very_slow_rank_keeps_a_quarter_of_its_equal_share():
    counts = shares.shares([1.0, 1.0, 1.0, 1e-6], total=400, batches=4)
    assert counts == [125, 125, 125, 25]


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_shares_of_tiny_batches_never_divide_by_zero(batch):
    rng = __import__("random").Random(batch)
    for _ in range(500):
        n = rng.randint(2, 9)
        speeds = [rng.uniform(0.01, 1.0) for _ in range(n)]
        batches = rng.randint(1, 40)
        total = n * batches * batch
        counts = shares.shares(speeds, total=total, batches=batches)
        assert sum(counts) == total and min(counts) >= 0, (speeds, total, batches)


def test_an_unpaced_pass_leaves_the_training_passs_scale():
    (loader, *_) = _loaders(size=4, n=100, batch=8)
    binding = _binding()
    binding.job.stats.scale = 1.6  # a paced training pass runs
    list(pace.OwnPaceBatches(loader.batch_sampler, binding))  # an evaluation, equal split
    assert binding.job.stats.scale == 1.6


def test_bad_speeds_are_refused_by_name():
    with pytest.raises(ValueError, match="own pace"):
        shares.shares([1.0, float("nan")], total=10, batches=1)


def _binding(own_pace: str = "on", size: int = 4) -> types.SimpleNamespace:
    config = types.SimpleNamespace(own_pace=own_pace)
    job = Job(runtime=types.SimpleNamespace(config=config, finished=False))
    return types.SimpleNamespace(job=job, hvd=types.SimpleNamespace(size=lambda: size))


def _loaders(size: int, n: int, batch: int, drop_last: bool = False) -> list[DataLoader]:
    data = TensorDataset(torch.arange(n))
    return [
        DataLoader(
            data,
            batch_size=batch,
            drop_last=drop_last,
            sampler=DistributedSampler(data, num_replicas=size, rank=r, seed=3),
        )
        for r in range(size)
    ]


@pytest.mark.parametrize("drop_last", [False, True])
def test_every_rank_takes_the_same_batches_and_the_epoch_is_seen_once(drop_last):
    loaders = _loaders(size=4, n=1003, batch=32, drop_last=drop_last)
    binding = _binding()
    batches = [pace.OwnPaceBatches(loader.batch_sampler, binding) for loader in loaders]
    equal = [[list(b) for b in bs.batch_sampler] for bs in batches]  # the sampler's own split
    for bs in batches:
        bs.sampler.set_epoch(5)
        setattr(bs.sampler, pace.SPEEDS, [4.0, 4.0, 1.0, 1.0])
    taken = [list(bs) for bs in batches]
    assert {len(t) for t in taken} == {len(loaders[0])}  # the same number of batches
    sizes = [sum(map(len, t)) for t in taken]
    assert sizes[0] > 3 * sizes[3] and sizes[0] == sizes[1]
    seen = Counter(i for t in taken for b in t for i in b)
    before = Counter(i for t in equal for b in t for i in b)
    assert sum(seen.values()) == sum(before.values())  # as many samples as the equal split
    if drop_last:
        assert max(seen.values()) == 1
    else:
        assert set(seen) == set(range(1003))  # every sample, each once but the padding
        assert sum(seen.values()) - len(seen) == 4 * 251 - 1003
    assert [bs.taken for bs in batches] == sizes
    assert binding.job.stats.scale == pytest.approx(sizes[3] / (sum(sizes) / 4))


def test_a_pass_before_the_speeds_are_known_is_the_samplers_own():
    (loader, *_) = _loaders(size=4, n=100, batch=8)
    bs = pace.OwnPaceBatches(loader.batch_sampler, _binding())
    assert list(bs) == list(loader.batch_sampler)


def test_the_pass_end_keeps_every_ranks_speed():
    (loader, *_) = _loaders(size=2, n=64, batch=8)
    bs = pace.OwnPaceBatches(loader.batch_sampler, _binding(size=2))
    list(bs)
    gathered = []

    def allgather(tensor, name):
        gathered.append(name)
        return torch.cat([tensor, torch.tensor([[32.0, 4.0]], dtype=torch.float64)])

    pace.pass_ended(bs, bs.measured(), allgather)
    speeds = getattr(bs.sampler, pace.SPEEDS)
    assert speeds[1] == 8.0 and speeds[0] > 0 and gathered == ["prague.own_pace"]


def test_only_a_loader_over_a_sampler_of_every_rank_is_paced():
    binding = _binding()
    (loader, *_) = _loaders(size=4, n=64, batch=8)
    assert pace._paced(loader, loader.batch_sampler, binding)
    assert not pace._paced(loader, loader.batch_sampler, _binding(own_pace="off"))
    assert not pace._paced(loader, loader.batch_sampler, _binding(size=8))
    plain = DataLoader(TensorDataset(torch.arange(8)), batch_size=2)
    assert not pace._paced(plain, plain.batch_sampler, binding)
    custom = BatchSampler(loader.sampler, 8, False)
    assert pace._paced(loader, custom, binding)


class _ReversedSampler(DistributedSampler):
    """A subclass with an order of its own: each rank's part reversed."""

    def __iter__(self):
        return reversed(list(super().__iter__()))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("n", [96, 1003])
def test_the_dealt_order_is_every_ranks_part_in_turn(shuffle, drop_last, n):
    data = TensorDataset(torch.arange(n))
    for kind in (DistributedSampler, _ReversedSampler):
        ranks = [
            kind(data, num_replicas=5, rank=r, shuffle=shuffle, seed=7, drop_last=drop_last)
            for r in range(5)
        ]
        for r in ranks:
            r.set_epoch(3)
        parts = [list(r) for r in ranks]
        expected = [i for turn in zip(*parts, strict=True) for i in turn]
        assert shares.dealt_order(ranks[2]) == expected, kind
        assert list(ranks[2]) == parts[2]  # the sampler itself is left as it was
