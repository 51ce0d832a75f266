"""When a rank stops: the errors that say a rank is gone, and the sentence that names it.

A group average or a script's collective that waits on a rank that stopped, hung or lost its
host ends in an error (a missed deadline, a closed connection, Horovod shut down). The step
path's public functions wear ``naming_the_stopped_rank``, which lengthens such an error with
who most likely holds the wait up, as the Group Generator's ``stats`` tell it (``diagnosis``
words the ranks and hosts); under Horovod elastic the error becomes the one on which
``hvd.elastic.run`` resets instead.

    @naming_the_stopped_rank
    def partial_allreduce(self, tensors, group): ...
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any

from . import diagnosis
from .group_generator import holding_up
from .overlap import GroupWaitTimeout
from .protocol import GroupGeneratorTimeout
from .runtime import PragueRuntime, elastic
from .script_collectives import Started, not_reached
from .strategies import Group


def naming_the_stopped_rank(method: Callable[..., Any]) -> Callable[..., Any]:
    """A method of an object whose ``job.runtime`` is its job's ``PragueRuntime`` (or None):
    its errors that say a rank is gone also name the rank that most likely holds it up, or
    the ranks and host that are lost (same exception type, longer message)."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as e:
            if getattr(e, "names_the_stopped_rank", False):
                raise
            gone = says_a_rank_is_gone(e)
            if elastic() and (gone or process_set_dropped(e)):
                # Horovod elastic resets; the survivors' new world names no one.
                if is_horovod_internal(e):
                    raise
                raise for_elastic(e) from e
            if not gone:
                raise
            rt: PragueRuntime | None = self.job.runtime
            if isinstance(e, GroupWaitTimeout) and rt is not None:
                named = GroupWaitTimeout(f"{e}. {who_holds_up(rt, e.group)}")
                named.group = e.group
                named.names_the_stopped_rank = True  # type: ignore[attr-defined]
                raise named from None
            named = with_more(e, who_is_gone(rt))
            named.names_the_stopped_rank = True  # type: ignore[attr-defined]
            if named is e:
                raise
            raise named from e

    return call


def says_a_rank_is_gone(error: Exception) -> bool:
    """A missed deadline, a Group Generator that is gone or silent, or Horovod's own error (a
    peer's connection closed: Horovod shuts down and fails every collective)."""
    return (
        isinstance(error, (GroupWaitTimeout, ConnectionError, GroupGeneratorTimeout))
        or is_horovod_internal(error)
        # TensorFlow's Horovod ops fail with the framework's own error type, saying so.
        or "Horovod has been shut down" in str(error)
    )


def process_set_dropped(error: Exception) -> bool:
    """Horovod no longer has a process set that Prague registered for this world. Under
    elastic, a survivor's group average can fail so after a lost peer, where it should reset
    as after any lost peer."""
    message = str(error)  # Horovod's C++ ops and its Python side word it differently
    return "Process set" in message and "does not exist" in message


def for_elastic(error: Exception) -> Exception:
    """``error`` as Horovod's ``HorovodInternalError``, on which ``hvd.elastic.run`` restores
    the last committed state and resets instead of ending the job."""
    from horovod.common.exceptions import HorovodInternalError

    internal = HorovodInternalError(f"{type(error).__name__}: {error}")
    internal.names_the_stopped_rank = True  # type: ignore[attr-defined]
    return internal


def is_horovod_internal(error: Exception) -> bool:
    return any(cls.__name__ == "HorovodInternalError" for cls in type(error).__mro__)


def with_more(error: Exception, more: str) -> Exception:
    """``error``'s type with ``more`` after its message (a note where the type cannot)."""
    if not more:
        return error
    try:
        return type(error)(f"{error}. {more}")
    except TypeError:
        error.add_note(more)
        return error


def who_is_gone(rt: PragueRuntime | None) -> str:
    """After an error that says a rank is gone: which ranks and hosts (``who_holds_up``)."""
    if rt is None or not rt.started:
        return ""
    return who_holds_up(rt, None)


def who_holds_up(rt: PragueRuntime, group: Group | None) -> str:
    """Which rank most likely holds up this rank's wait on ``group``, and which ranks and
    hosts are gone.

    Ranks report the groups they wait on long (``awaiting``): following who waits on
    whom from ``group`` leads to the ranks that wait on nothing, which have stopped or
    hung. Without ``group``, or where that finds none, the rank that has not asked the
    Group Generator for anything for the longest time. Then (``diagnosis``) the ranks
    whose connection ended before they finished, and hosts none of whose ranks has been
    heard from for a quarter of the timeout.
    """
    try:
        stats = rt.client.stats()
    except Exception as e:  # noqa: BLE001  (any failure here says rank 0 is in trouble)
        return (
            f"The Group Generator on rank 0 did not answer either ({e}): "
            f"{diagnosis.unreachable_generator(rt.hosts)}"
        )
    if diagnosis.partly_lost(stats.get("lost") or [], rt.hosts):
        time.sleep(diagnosis.LOSS_SETTLE_S)  # the rest of that host may be going too
        with contextlib.suppress(Exception):
            stats = rt.client.stats()
    silence: list[float | None] = stats.get("silence") or []
    waits = [None if w is None else tuple(w) for w in stats.get("waits") or []]
    lost = diagnosis.gone(stats.get("lost") or [], rt.hosts)
    cut_off = diagnosis.silent_hosts(rt.hosts, silence, waits, rt.config.timeout / 4)
    hosts = "".join(f". {part}" for part in (lost, cut_off) if part)
    if group is not None and len(waits) == len(silence):
        stopped = [r for r in holding_up(group, rt.rank, waits) if silence[r] is not None]
        if stopped:
            who = f"Rank {stopped[0]}" if len(stopped) == 1 else f"Ranks {stopped}"
            ago = ", ".join(f"{silence[r]:.1f} s" for r in stopped)
            return (
                f"{who} held up group {list(group)}: waited for, directly or through "
                f"other groups, while waiting on no group, and silent towards the Group "
                f"Generator for {ago}: most likely stopped or hung{hosts}"
            )
    candidates = [r for r, seconds in enumerate(silence) if seconds is not None]
    if not candidates:
        return hosts[2:]
    silent = max(candidates, key=silence.__getitem__)
    return (
        f"Rank {silent} last asked the Group Generator for a group {silence[silent]:.1f} s "
        "ago, the longest of all ranks: most likely it stopped or hung, holding up every "
        f"group that waits for it{hosts}"
    )


def who_did_not_reach(rt: PragueRuntime, started: Started) -> str:
    """Which members of ``started``'s set did not reach the script's collective, as the Group
    Generator says; raises where it cannot say."""
    stats = rt.client.stats()
    collectives = stats.get("collectives") or [None] * rt.topology.size
    silence = stats.get("silence") or [0.0] * rt.topology.size
    return not_reached(started, rt.rank, collectives, silence)


def late_script_collective(
    rt: PragueRuntime, started: Started, timeout: float, earlier: list[str]
) -> str:
    """What a script's collective that missed its deadline says (``earlier``: who had not
    reached it half way)."""
    try:
        who = who_did_not_reach(rt, started)
    except Exception as e:  # noqa: BLE001  (the error says what is known)
        who = (
            f"{earlier[0]}, half way through the wait (the Group Generator did not answer "
            f"at its end: {e})"
            if earlier
            else f"the Group Generator did not answer ({e}), so who did not reach it is unknown"
        )
    return (
        f"Horovod collective {started.name!r} on ranks {list(started.ranks)} did not "
        f"complete within {timeout:g} s: {who}. Every member of a process set must call "
        "its collectives in one order; if a rank may take longer than that to reach one, "
        "raise the timeout (--prague-timeout, HOROVOD_PRAGUE_TIMEOUT)"
    )
