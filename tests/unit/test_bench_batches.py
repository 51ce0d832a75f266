"""Which examples a ``prague-bench`` rank trains on, by ``--sampling``."""

import numpy as np
import pytest

from horovod_prague.bench.worker import Batches

EXAMPLES, SIZE, BATCH = 40, 4, 5


def passes(sampling: str, rank: int, count: int) -> list[set[int]]:
    """The examples of each of the rank's first ``count`` passes (a pass is 10 examples)."""
    batches = Batches(sampling, EXAMPLES, rank, SIZE, seed=3)
    taken = np.concatenate([batches.next(BATCH) for _ in range(2 * count)])
    return [set(taken[i * 10 : (i + 1) * 10].tolist()) for i in range(count)]


def test_a_fixed_shard_is_the_same_every_pass():
    for rank in range(SIZE):
        assert all(p == set(range(rank, EXAMPLES, SIZE)) for p in passes("shard", rank, 4))


def test_epoch_sampling_splits_each_pass_among_ranks_and_redraws_the_split():
    by_rank = [passes("epoch", rank, 4) for rank in range(SIZE)]
    for e in range(4):
        shards = [by_rank[rank][e] for rank in range(SIZE)]
        assert set().union(*shards) == set(range(EXAMPLES))  # disjoint and covering
        assert sum(map(len, shards)) == EXAMPLES
    assert len({frozenset(by_rank[0][e]) for e in range(4)}) > 1  # the shard changes


@pytest.mark.parametrize("sampling", ["shard", "epoch", "whole"])
def test_batches_repeat_under_a_seed(sampling):
    a, b = (Batches(sampling, EXAMPLES, 1, SIZE, seed=7) for _ in range(2))
    for _ in range(12):
        assert a.next(BATCH).tolist() == b.next(BATCH).tolist()
