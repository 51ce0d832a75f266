"""StagedDeadlines: a staged collective that ends in time is never overdue; one that does not
is reported once per job; a watch that begins ends the earlier one (whose op completed or
failed); a reset's ``close`` stops every watch without a report."""

from __future__ import annotations

from horovod_prague.common.script_collectives import Started
from horovod_prague.common.staged_deadlines import StagedDeadlines

COLLECTIVE = Started("HorovodAllreduce_x_0", (0, 1, 2, 3))


def _deadlines(said: list[str]) -> StagedDeadlines:
    def wait_with_deadline(started, timeout, wait):
        wait(timeout, lambda: f"{started.name} late")

    return StagedDeadlines(wait_with_deadline, lambda e, timeout: said.append(str(e)))


def test_an_overdue_collective_is_reported_once_per_job():
    said: list[str] = []
    deadlines = _deadlines(said)
    deadlines.begin("a", COLLECTIVE, 0.05)
    deadlines.join()
    deadlines.begin("b", Started("HorovodAllgather_y_0", (0, 1)), 0.05)
    deadlines.join()
    assert said == ["HorovodAllreduce_x_0 late"], said


def test_close_stops_the_watches_without_a_report():
    said: list[str] = []
    deadlines = _deadlines(said)
    deadlines.begin("a", COLLECTIVE, 5.0)
    deadlines.close()
    deadlines.join()
    deadlines.begin("b", COLLECTIVE, 0.05)  # after close: not watched
    deadlines.join()
    assert said == []


def test_a_watch_that_begins_ends_the_earlier_one():
    """A call whose op failed never ran its end: the next staged collective's watch ends it."""
    said: list[str] = []
    deadlines = _deadlines(said)
    deadlines.begin("a", COLLECTIVE, 0.3)
    deadlines.begin("b", COLLECTIVE, 0.3)
    deadlines.end("b")
    deadlines.join()
    assert said == []
