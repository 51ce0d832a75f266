"""Ranks as threads of one process: a real Group Generator, the real ``Binding``, and
collectives matched by name (``Collectives``) in place of Horovod's.

    run_ranks(2, 0, script)      # script(rank, binding) on two threads; re-raises their errors
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from horovod_prague.common.binding import Binding
from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator, Owed
from horovod_prague.common.overlap import Overlap
from horovod_prague.common.strategies import Group, make_strategy
from horovod_prague.common.topology import Topology


class Collectives:
    """Every in-process rank's averages, matched by collective name as Horovod matches them:
    a rank's j-th collective of a name meets the others' j-th of it (a name is reused once
    its collective is done)."""

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.calls: dict[str, list[dict[int, list[np.ndarray]]]] = {}
        self.names: list[tuple[int, str]] = []
        self.cond = threading.Condition()

    def average(self, name: str, group: Group, rank: int, values: Sequence[np.ndarray]) -> None:
        with self.cond:
            j = self.names.count((rank, name))
            self.names.append((rank, name))
            occurrences = self.calls.setdefault(name, [])
            occurrences.extend({} for _ in range(j + 1 - len(occurrences)))
            sent = occurrences[j]
            sent[rank] = [v.copy() for v in values]
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: len(sent) == len(group), self.timeout):
                raise TimeoutError(f"rank {rank} waited on {name} with group {group}")
            means = [np.mean([sent[r][i] for r in group], axis=0) for i in range(len(values))]
        for v, m in zip(values, means, strict=True):
            v[...] = m


class InProcessRuntime:
    """What ``Binding`` asks of ``PragueRuntime``, with the GG called directly."""

    def __init__(self, gg: GroupGenerator, rank: int, sync_every: int) -> None:
        self.gg = gg
        self.rank = rank
        self.config = types.SimpleNamespace(weighting="equal", timeout=5.0, sync_every=sync_every)
        self.started = True
        self.world = gg.world
        self.topology = types.SimpleNamespace(size=gg.size)
        self.finished = False
        self.finals = 0
        self.syncs = 0
        self.client = types.SimpleNamespace(waiting=lambda group: None)

    def next_group(self) -> Group:
        return self.gg.next_group(self.rank)

    def sync(self) -> Owed:
        self.syncs += 1
        return self.gg.sync(self.rank, self.syncs)

    def settle(self, members: Group) -> Owed:
        return self.gg.settle(self.rank, members)

    def finish(self) -> Owed:
        if self.finished:
            return Owed([], 0)
        self.finished = True
        return self.gg.finish(self.rank)

    def rejoin(self) -> None:
        if self.finished:
            self.syncs = self.gg.rejoin(self.rank)
            self.finished = False

    def process_set(self, group: Group) -> Group:
        return tuple(group)

    def name(self, group: Group) -> str:
        return "prague." + "-".join(map(str, group))


class HorovodJoin:
    """Horovod's ``join`` across the threads: returns, on every rank, once all have joined,
    the rank that joined last."""

    def __init__(self, size: int, timeout: float = 10.0) -> None:
        self.size = size
        self.timeout = timeout
        self.joined: list[int] = []
        self.cond = threading.Condition()

    def __call__(self, rank: int) -> int:
        with self.cond:
            self.joined.append(rank)
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: len(self.joined) >= self.size, self.timeout):
                raise TimeoutError(f"rank {rank} waited in join; joined: {self.joined}")
            return self.joined[self.size - 1]


class InProcessBinding(Binding):
    def __init__(self, runtime: InProcessRuntime, collectives: Collectives) -> None:
        super().__init__(hvd=types.SimpleNamespace(global_process_set=runtime.world))
        self.job.runtime = runtime  # type: ignore[assignment]
        self.collectives = collectives

    def tensors(self, source: Any) -> list[Any]:
        return list(source)

    def scratch(self) -> Any:
        return np.zeros(1)

    def average(
        self,
        tensors: Sequence[Any],
        name: str,
        process_set: Any,
        size: int,
        overlap: Overlap | None = None,
        share_of: int | None = None,
    ) -> None:
        self.collectives.average(name, process_set, self.job.runtime.rank, tensors)


def random_generator(size: int, sync_every: int = 0) -> GroupGenerator:
    """A Group Generator of ``random`` groups over ``size`` ranks on one node."""
    return GroupGenerator(
        make_strategy(PragueConfig(strategy="random"), Topology(size, size)), sync_every
    )


def run_ranks(
    size: int,
    sync_every: int,
    script: Callable[[int, InProcessBinding], None],
    collectives: Collectives | None = None,
) -> GroupGenerator:
    gg = random_generator(size, sync_every)
    collectives = collectives or Collectives()
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        try:
            script(rank, InProcessBinding(InProcessRuntime(gg, rank, sync_every), collectives))
        except BaseException as e:  # noqa: BLE001  (reported by the test)
            errors.append(e)

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a rank did not end"
    return gg
