"""An elastic state's commit under Prague: host changes agreed without a global wait.

Horovod's ``State.commit`` saves the state, then asks whether the elastic driver announced a
host change (``check_host_updates``): the driver tells rank 0 alone, and rank 0's view
reaches every rank through a broadcast, a global collective that waits at every commit for
the slowest rank (and under Prague behind the guard's global average), which keeps the ranks
within a commit of each other. Under ``elastic_commit=local`` the ranks agree through the
Group Generator instead (``GroupGenerator.host_changes``): each rank reports the notices it
received at its commit, and the first rank to reach the k-th commit fixes the answer for it,
every change reported before, without waiting for the others. Only where the answer says
the hosts changed do the ranks wait for each other: a global average of the tracked models
(``Binding.settle``), which first runs the groups already decided, so that no rank enters
Horovod's reset while a partner waits in a group for it, and every rank enters it with one
model; then ``HostsUpdatedInterrupt``, as Horovod raises it.

A lost worker is no notice: the survivors' collectives fail, and Horovod restores the last
commit, each rank its own, then broadcasts rank 0's, as under ``global``; but here rank 0's
may be commits ahead of the others', the end of training included (a Keras script that fits
``epochs - state.epoch`` epochs then fits none and fails), so ``global`` stays the default
(docs/design.md, *Elastic training*).

    from horovod.torch.elastic import TorchState
    commit_without_waiting(TorchState, binding)   # what horovod_prague.torch.elastic does
"""

from __future__ import annotations

import functools
import queue
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .binding import Binding

Notice = tuple[float, int]
"""One host-change notice of Horovod's elastic driver: its timestamp and a
``HostUpdateResult`` (1 removed, 2 added)."""


def proposal(notices: list[Notice], last_timestamp: float) -> Notice:
    """What this rank reports of the host changes after ``last_timestamp``: the newest
    notice's timestamp and the updates of all newer notices together; ``(last_timestamp,
    0)``, no change, where there are none.

    >>> proposal([(5.0, 1), (7.0, 2), (3.0, 2)], last_timestamp=4.0)
    (7.0, 3)
    >>> proposal([(3.0, 2)], last_timestamp=4.0)
    (4.0, 0)
    """
    newer = [(t, int(u)) for t, u in notices if t > last_timestamp]
    if not newer:
        return last_timestamp, 0
    update = 0
    for _, u in newer:
        update |= u
    return max(t for t, _ in newer), update


def check_host_updates(state: Any, binding: Binding) -> None:
    """``state.check_host_updates()`` under ``elastic_commit=local`` (see the module doc)."""
    from horovod.common.exceptions import HostsUpdatedInterrupt
    from horovod.runner.elastic.worker import HostUpdateResult

    notice = proposal(_drain(state._host_messages), state._last_updated_timestamp)
    timestamp, update = binding.host_changes(notice)
    if not update:
        return
    state._last_updated_timestamp = timestamp
    binding.settle()
    raise HostsUpdatedInterrupt(update == HostUpdateResult.removed)


def commit_without_waiting(state_class: type, binding: Binding) -> None:
    """Point ``state_class``'s ``check_host_updates`` at ``check_host_updates`` where the job
    runs Prague with ``elastic_commit=local``, at Horovod's otherwise (idempotent)."""
    horovods: Callable[[Any], None] = state_class.check_host_updates
    if getattr(horovods, "__prague__", False):
        return

    @functools.wraps(horovods)
    def check(state: Any) -> None:
        if not binding.commits_alone():
            horovods(state)
            return
        check_host_updates(state, binding)

    check.__prague__ = True  # type: ignore[attr-defined]
    state_class.check_host_updates = check


def _drain(messages: queue.Queue) -> list[Notice]:
    notices = []
    while True:
        try:
            notices.append(messages.get_nowait())
        except queue.Empty:
            return notices
