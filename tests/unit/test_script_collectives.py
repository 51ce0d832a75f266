"""The script's own collectives under Prague: names every member gives alike, the Group
Generator's record of who waits in which, and what a missed deadline says."""

from __future__ import annotations

import inspect
import threading

import pytest

from horovod_prague.common.config import PragueConfig
from horovod_prague.common.generator_client import GroupGeneratorClient
from horovod_prague.common.generator_service import MAX_COLLECTIVE_NAME, GroupGeneratorServer
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.import_hook import TORCH_NAMED_FUNCTIONS
from horovod_prague.common.script_collectives import ScriptCollectives, Started, not_reached
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology

TOKEN = b"t" * 32


def test_unnamed_collectives_are_counted_per_process_set_and_named_ones_left_alone():
    """Members that ran different numbers of other operations (Prague's group averages, or
    collectives on sets they alone belong to) still give the k-th unnamed collective of a set
    the same name."""
    busy, idle = ScriptCollectives(), ScriptCollectives()
    for _ in range(5):
        busy.name("allreduce", None, 7)  # a set only `busy` belongs to
        busy.name("allreduce", "prague.0-1.n1.abc", 0)  # named: never counted
    assert busy.name("allgather", None, 0) == idle.name("allgather", None, 0)
    assert (
        busy.name("broadcast", None, 0) == idle.name("broadcast", None, 0) == ("broadcast.noname.2")
    )


def test_a_reset_job_counts_from_zero():
    """A reset replaces the job's record, so survivors name as a worker that joins does."""
    survivor = ScriptCollectives()
    survivor.name("allreduce", None, 0)
    assert ScriptCollectives().name("allreduce", None, 0) == "allreduce.noname.1"


def test_prague_collectives_are_not_remembered_and_each_handle_is_forgotten_once_waited():
    record = ScriptCollectives()
    record.started(1, "prague.world.n0.abcd1234.float32", (0, 1))
    record.started(2, "metric", (0, 1))
    assert record.finished(1) is None
    assert record.finished(2) == Started("metric", (0, 1))
    assert record.finished(2) is None


def test_names_are_unique_across_threads():
    record = ScriptCollectives()
    names: list[str] = []

    def name_many() -> None:
        for _ in range(500):
            names.append(record.name("allreduce", None, 0))

    threads = [threading.Thread(target=name_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(set(names)) == 2000


def test_not_reached_names_the_absent_members_and_where_they_are():
    started = Started("allgather.noname.5", (0, 2, 3))
    said = not_reached(started, 0, ["allgather.noname.5", None, "x", None], [0.1, 0.1, 0.1, None])
    assert said.startswith("ranks [2, 3] did not reach it")
    assert "rank 2 waits in 'x'" in said and "rank 3 has finished training" in said
    everyone = not_reached(started, 0, ["allgather.noname.5"] * 4, [0.1] * 4)
    assert everyone.startswith("every member reached it")


def test_the_group_generator_keeps_the_collective_a_rank_waits_in_until_it_asks_again():
    config = PragueConfig(strategy="static")
    with GroupGeneratorServer(
        GroupGenerator(make_strategy(config, Topology(4, 2))), TOKEN, "fp"
    ) as server:
        host, port = server.address
        clients = [GroupGeneratorClient(host, port, TOKEN, r, 5.0) for r in range(4)]
        try:
            for c in clients:
                c.hello("fp")
            clients[1].waiting((0, 1, 2, 3), "allgather.noname.3")
            clients[2].waiting((1, 2))
            stats = clients[0].stats()
            assert stats["collectives"] == [None, "allgather.noname.3", None, None]
            assert stats["waits"][1] == [0, 1, 2, 3]
            clients[1].next_group()
            assert clients[0].stats()["collectives"][1] is None
            for bad in ("", "x" * (MAX_COLLECTIVE_NAME + 1), 5, ["a"]):
                with pytest.raises(RuntimeError, match="'collective' must be a name"):
                    clients[3].request("waiting", group=[0, 3], collective=bad)
        finally:
            for c in clients:
                c.close()


def test_every_named_function_of_horovod_takes_a_name_and_a_process_set():
    """``horovod_prague.torch.collectives`` finds both arguments by name in Horovod's own
    signatures: a Horovod whose functions lacked them would fail here, not in a job."""
    mpi_ops = pytest.importorskip("horovod.torch.mpi_ops")
    from horovod_prague.common.import_hook import originals

    for function in TORCH_NAMED_FUNCTIONS:
        parameters = inspect.signature(getattr(originals(mpi_ops), function)).parameters
        assert {"name", "process_set"} <= set(parameters), function
