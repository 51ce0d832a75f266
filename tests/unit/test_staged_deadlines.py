"""StagedDeadlines: a staged collective that ends in time is never overdue; one that does not
is reported once per job; a reset's ``close`` stops every watch without a report."""

from __future__ import annotations

from horovod_prague.common.script_collectives import Started
from horovod_prague.common.staged_deadlines import StagedDeadlines

COLLECTIVE = Started("HorovodAllreduce_x_0", (0, 1, 2, 3))


def _deadlines(seconds: float, said: list[str]) -> StagedDeadlines:
    def wait_with_deadline(started, wait):
        wait(seconds, lambda: f"{started.name} late")

    return StagedDeadlines(wait_with_deadline, lambda e: said.append(str(e)))


def test_only_the_first_overdue_collective_of_a_job_is_reported():
    said: list[str] = []
    deadlines = _deadlines(0.05, said)
    deadlines.begin("a", COLLECTIVE)
    deadlines.begin("b", Started("HorovodAllgather_y_0", (0, 1)))
    deadlines.join()
    assert len(said) == 1 and said[0].endswith("late"), said


def test_close_stops_the_watches_without_a_report():
    said: list[str] = []
    deadlines = _deadlines(5.0, said)
    deadlines.begin("a", COLLECTIVE)
    deadlines.close()
    deadlines.join()
    deadlines.begin("b", COLLECTIVE)  # after close: not watched
    deadlines.join()
    assert said == []


def test_a_site_that_begins_again_ends_its_earlier_call():
    """A call whose op failed never ran its end; the site's next call ends its watch."""
    said: list[str] = []
    deadlines = _deadlines(0.3, said)
    deadlines.begin("a", COLLECTIVE)
    deadlines.begin("a", COLLECTIVE)
    deadlines.end("a")
    deadlines.join()
    assert said == []
