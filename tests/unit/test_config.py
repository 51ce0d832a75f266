"""Prague options: parsing, precedence and the errors bad values get."""

import socket
import threading

import pytest

from horovod_prague.common.config import MAX_TIMEOUT, PragueConfig
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import NODES_VAR, Topology


def test_keyword_arguments_beat_environment_beat_defaults():
    env = {"HOROVOD_PRAGUE_GROUP_SIZE": "4", "HOROVOD_PRAGUE_SEED": "9"}
    cfg = PragueConfig.from_sources({"group_size": 3}, env=env)
    assert (cfg.group_size, cfg.seed, cfg.strategy) == (3, 9, "smart")


def test_environment_values_are_typed():
    env = {"HOROVOD_PRAGUE_TIMEOUT": "2.5", "HOROVOD_PRAGUE_STRATEGY": "static", "X": "y"}
    cfg = PragueConfig.from_sources(env=env)
    assert cfg.timeout == 2.5 and cfg.strategy == "static"


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({"strategy": "fancy"}, {}, "strategy: unknown strategy 'fancy'"),
        ({"group_size": 1}, {}, "group_size: must be 0 \\(auto\\) or at least 2"),
        ({"threshold": -1}, {}, "threshold: must be >= 0"),
        ({"sync_every": -5}, {}, "sync_every"),
        ({"timeout": 0}, {}, "timeout"),
        ({"pool_size": 0}, {}, "pool_size"),
        ({}, {"HOROVOD_PRAGUE_GROUP_SIZE": "two"}, "HOROVOD_PRAGUE_GROUP_SIZE: expected int"),
        ({"group_size": 2.5}, {}, "group_size: expected an integer"),
        ({"coordinator_port": 70000}, {}, "coordinator_port"),
        ({}, {"HOROVOD_PRAGUE_WEIGHTING": "steps"}, "weighting: expected equal or progress"),
        ({"own_pace": "yes"}, {}, "own_pace: expected on or off, got 'yes'"),
        ({}, {"HOROVOD_PRAGUE_OWN_PACE": "1"}, "own_pace: expected on or off, got '1'"),
    ],
)
def test_bad_values_name_the_option(kwargs, env, message):
    with pytest.raises(ValueError, match=message):
        PragueConfig.from_sources(kwargs, env=env)


@pytest.mark.parametrize("seconds", ["inf", "-inf", "nan", "1e12", "604800.5", "-1", "0"])
def test_a_timeout_must_be_finite_positive_and_at_most_a_week(seconds):
    """Larger timeouts would pass the checks and overflow every socket timeout and thread
    wait on every rank; refused here, from ``init``'s keyword and from the variable."""
    message = r"^timeout: must be a number of seconds above 0 and at most 604800 \(a week\)"
    with pytest.raises(ValueError, match=message + ", got"):
        PragueConfig.from_sources({"timeout": float(seconds)}, env={})
    with pytest.raises(ValueError, match=message + f".*HOROVOD_PRAGUE_TIMEOUT='{seconds}'"):
        PragueConfig.from_sources(env={"HOROVOD_PRAGUE_TIMEOUT": seconds})
    # A keyword over a bad variable: the variable is not used, so it is not an error.
    assert (
        PragueConfig.from_sources({"timeout": 5}, {"HOROVOD_PRAGUE_TIMEOUT": seconds}).timeout == 5
    )


def test_the_longest_timeout_fits_sockets_and_thread_waits():
    assert PragueConfig(timeout=MAX_TIMEOUT).timeout == MAX_TIMEOUT == 7 * 24 * 3600
    assert MAX_TIMEOUT < threading.TIMEOUT_MAX
    with socket.socket() as sock:
        sock.settimeout(MAX_TIMEOUT)
        assert sock.gettimeout() == MAX_TIMEOUT


def test_a_bad_value_from_a_variable_names_the_variable():
    with pytest.raises(
        ValueError,
        match=r"^pool_size: must be at least 1, got 0 \(from HOROVOD_PRAGUE_POOL_SIZE='0'\)$",
    ):
        PragueConfig.from_sources(env={"HOROVOD_PRAGUE_POOL_SIZE": "0"})
    with pytest.raises(ValueError, match=r"^pool_size: must be at least 1, got 0$"):
        PragueConfig.from_sources({"pool_size": 0}, env={"HOROVOD_PRAGUE_POOL_SIZE": "2"})


def test_unknown_option_is_a_type_error_listing_the_known_ones():
    with pytest.raises(TypeError, match="unknown Prague option 'group'.*group_size"):
        PragueConfig.from_sources({"group": 2}, env={})


def test_group_size_larger_than_world():
    with pytest.raises(ValueError, match="group_size: 8 is larger than the world size 4"):
        make_strategy(PragueConfig(group_size=8), Topology(4, 4))


def test_fingerprint_ignores_local_only_options():
    a = PragueConfig(coordinator_port=1234)
    assert a.fingerprint() == PragueConfig().fingerprint()
    assert PragueConfig(seed=1).fingerprint() != PragueConfig().fingerprint()


def test_round_trip_through_environment():
    cfg = PragueConfig(strategy="random", group_size=3, threshold=0, seed=5)
    assert PragueConfig.from_sources(env=cfg.to_env()) == cfg


def test_topology_from_launchers():
    assert Topology.from_env({"HOROVOD_SIZE": "8", "HOROVOD_LOCAL_SIZE": "4"}) == Topology(8, 4)
    mpi = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert Topology.from_env(mpi) == Topology(4, 2)
    assert Topology.from_env({}) is None
    with pytest.raises(ValueError, match="do not split evenly"):
        Topology(6, 4)


def test_nodes_of_different_sizes():
    t = Topology.of_nodes([4, 2])
    assert (t.size, t.local_size, t.cross_size, t.uniform) == (6, 4, 2, False)
    assert [t.node_of(r) for r in range(6)] == [0, 0, 0, 0, 1, 1]
    assert t.ranks_on(1) == (4, 5)
    assert Topology.of_nodes([2, 2]) == Topology(4, 2)


def test_a_launcher_announcing_nodes_of_different_sizes_leaves_the_layout_unknown():
    # -H a:4,b:2: host b's ranks see 2 local ranks of 6 over 2 nodes; host a's, 4 of 6.
    env = {"HOROVOD_SIZE": "6", "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_SIZE": "2"}
    assert Topology.from_env(env) is None
    assert Topology.from_env({**env, "HOROVOD_LOCAL_SIZE": "4"}) is None
    assert Topology.from_env({**env, "HOROVOD_LOCAL_SIZE": "3"}) == Topology(6, 3)


def test_the_host_list_announced_by_horovodrun_gives_every_rank_the_layout():
    """``horovodrun -H h1:4,h2:2`` under MPI: no Gloo store, so the runner names each host's
    ranks (``NODES_VAR``) and each rank checks its own place against it."""

    def mpi(rank, local_rank, local_size, nodes="4,2", size=6):
        return {
            NODES_VAR: nodes,
            "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank),
        }

    for rank in range(6):
        env = mpi(rank, rank % 4, 4 if rank < 4 else 2)
        assert Topology.from_env(env) == Topology.of_nodes([4, 2])
    # mpirun --map-by node: rank 1 on the second host.
    with pytest.raises(ValueError, match="rank 1 would be rank 1 of 4 .* made it rank 0 of 2"):
        Topology.from_env(mpi(1, 0, 2))
    with pytest.raises(ValueError, match="6 in all, but 8 were started"):
        Topology.from_env(mpi(1, 1, 4, size=8))
