"""Own pace (``horovod_prague.torch.pace``): shares that follow the speeds, the same number of
batches on every rank, every sample of the epoch once."""

from __future__ import annotations

import itertools
import threading
import time
import types
from collections import Counter

import horovod.torch as hvd
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset

from horovod_prague.common import shares, step_stats
from horovod_prague.common.binding import Job
from horovod_prague.torch import pace


def test_shares_follow_the_speeds_and_sum_to_the_total():
    assert shares.shares([2.0, 1.0, 1.0], total=400, batches=4) == [200, 100, 100]
    assert sum(shares.shares([1.3, 0.7, 0.11, 5.0], total=1001, batches=7)) == 1001


def test_a_very_slow_rank_keeps_a_quarter_of_its_equal_share():
    counts = shares.shares([1.0, 1.0, 1.0, 1e-6], total=400, batches=4)
    assert counts == [125, 125, 125, 25]


def test_a_very_fast_rank_takes_at_most_twice_its_equal_share():
    counts = shares.shares([1e6, 1.0, 1.0, 1.0, 1.0], total=1000, batches=4)
    assert counts == [400, 150, 150, 150, 150]


def test_shares_stay_in_bounds_and_follow_the_order_of_the_speeds():
    rng = __import__("random").Random(11)
    for _ in range(2000):
        n = rng.randint(2, 17)
        speeds = [rng.choice([rng.uniform(0.01, 1.0), rng.uniform(1.0, 100.0)]) for _ in range(n)]
        batches = rng.randint(1, 30)
        total = rng.randint(n * batches * 2, n * batches * 64)
        counts = shares.shares(speeds, total=total, batches=batches)
        equal = total / n
        assert sum(counts) == total, (speeds, total, batches)
        assert max(counts) <= max(-(-total // n), shares.MAX_SHARE * equal)
        assert min(counts) >= min(total // n, shares.MIN_SHARE * equal)
        ranked = sorted(range(n), key=lambda i: speeds[i])
        assert all(counts[a] <= counts[b] + 1 for a, b in itertools.pairwise(ranked))


@pytest.mark.parametrize(
    "speeds", [[1.0, 1e-60], [1.0, 1.0, 1.0, 1e-70], [1e308, 5e-324], [1e-300, 1e-300, 2e-300]]
)
def test_shares_of_speeds_far_apart_still_sum_to_the_total(speeds):
    counts = shares.shares(speeds, total=4000, batches=10)
    assert sum(counts) == 4000 and max(counts) <= 2 * 4000 / len(speeds)


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


def _pass_end(bs: pace.OwnPaceBatches, other: list[float]) -> list[str]:
    """End ``bs``'s pass (rank 0 of 2) where rank 1 reports ``other``; the names summed."""
    summed = []

    def allreduce(tensor, op, name):
        assert op is hvd.Sum and tensor[1].tolist() == [0.0, 0.0]
        summed.append(name)
        return tensor + torch.tensor([[0.0, 0.0], other], dtype=torch.float64)

    pace.pass_ended(bs, bs.measured(), allreduce)
    return summed


def test_the_pass_end_keeps_every_ranks_speed():
    (loader, *_) = _loaders(size=2, n=64, batch=8)
    bs = pace.OwnPaceBatches(loader.batch_sampler, _binding(size=2))
    list(bs)
    assert _pass_end(bs, [32.0, 4.0]) == ["prague.own_pace"]
    speeds = getattr(bs.sampler, pace.SPEEDS)
    assert speeds[1] == 8.0 and speeds[0] > 0


def test_a_pass_a_rank_left_early_keeps_the_speeds():
    """A rank in Horovod's ``join`` sums zeros: the speeds stay those of the pass before (or
    none), as on the joined rank, which took no part."""
    (loader, *_) = _loaders(size=2, n=64, batch=8)
    bs = pace.OwnPaceBatches(loader.batch_sampler, _binding(size=2))
    list(bs)
    _pass_end(bs, [0.0, 0.0])
    assert getattr(bs.sampler, pace.SPEEDS, None) is None
    list(bs)
    _pass_end(bs, [32.0, 4.0])
    before = getattr(bs.sampler, pace.SPEEDS)
    list(bs)
    _pass_end(bs, [0.0, 0.0])
    assert getattr(bs.sampler, pace.SPEEDS) == before


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
@pytest.mark.parametrize("n", [3, 96, 1003])
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
        assert shares._deals_one_permutation(ranks[2]) == (kind is DistributedSampler)
        assert list(ranks[2]) == parts[2]  # the sampler itself is left as it was


def test_speeds_of_a_world_of_another_size_are_not_used():
    (loader, *_) = _loaders(size=4, n=100, batch=8)
    bs = pace.OwnPaceBatches(loader.batch_sampler, _binding())
    setattr(bs.sampler, pace.SPEEDS, [4.0, 1.0])  # gathered before a reset to 4 ranks
    assert list(bs) == list(loader.batch_sampler)


def test_a_fast_ranks_batch_is_at_most_twice_the_scripts():
    (loader, *_) = _loaders(size=8, n=800, batch=10)
    bs = pace.OwnPaceBatches(loader.batch_sampler, _binding(size=8))
    setattr(bs.sampler, pace.SPEEDS, [100.0] + [1.0] * 7)
    batches = list(bs)
    assert len(batches) == 10 and max(map(len, batches)) == 20
    assert bs.binding.job.stats.scale == 2.0


def test_a_loader_without_batching_spans_every_rank():
    (loader, *_) = _loaders(size=4, n=64, batch=8)
    kinds = (DistributedSampler,)
    assert pace.spans_every_rank(loader.sampler, 4, kinds) is loader.sampler  # batch_size=None
    assert pace.spans_every_rank(loader.batch_sampler, 4, kinds) is loader.sampler
    assert pace.spans_every_rank(loader.batch_sampler, 8, kinds) is None
    custom = types.SimpleNamespace(sampler=loader.sampler)  # a batch sampler of its own
    assert pace.spans_every_rank(custom, 4, kinds) is None


def _clock(monkeypatch: pytest.MonkeyPatch, readings: list[float]) -> None:
    """``perf_counter`` of step_stats and pace (theirs alone) gives ``readings`` in turn."""
    left = iter(readings)

    def tick() -> float:
        value = next(left, None)
        assert value is not None, "the test's clock ran out of readings"
        return value

    fake = types.SimpleNamespace(perf_counter=tick)
    monkeypatch.setattr(step_stats, "time", fake)
    monkeypatch.setattr(pace, "time", fake)


def test_time_with_other_ranks_is_counted_once_and_left_out_of_busy_time(monkeypatch):
    _clock(monkeypatch, [0.0, 9.0, 10.0, 11.0, 17.0, 23.0])  # every reading, in turn
    stats = step_stats.StepStats()
    with stats.away():  # at 0.0, a script's collective ...
        with stats.away():  # ... whose wait is inside it: counted once
            pass
    (loader, *_) = _loaders(size=4, n=64, batch=8)
    binding = _binding()
    binding.job.stats = stats
    bs = pace.OwnPaceBatches(loader.batch_sampler, binding)
    batches = iter(bs)
    next(batches)  # the pass begins at 10.0, with 9 s away before it
    with stats.away():  # from 11.0 to 17.0 with the others
        pass
    list(batches)
    assert bs.measured() == (16.0, 7.0)  # at 23.0: 13 s of wall time, 6 of them away


def test_time_away_is_this_threads_alone_and_an_open_span_counts():
    stats = step_stats.StepStats()
    inside, leave = threading.Event(), threading.Event()

    def metric_thread() -> None:
        with stats.away():  # a collective on another thread, open across the check
            inside.set()
            leave.wait(timeout=10)

    thread = threading.Thread(target=metric_thread)
    thread.start()
    assert inside.wait(timeout=10)
    assert stats.away_seconds() == 0.0  # the training thread's compute is not away
    began = time.perf_counter()
    with stats.away():
        open_span = stats.away_seconds()
        assert 0.0 <= open_span <= time.perf_counter() - began
    assert stats.away_seconds() >= open_span
    leave.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
