"""``init`` called more than once, as Horovod allows: Horovod and Prague stood in for."""

from __future__ import annotations

import socket
import types
from typing import Any

import pytest

from horovod_prague.common import binding as binding_module
from horovod_prague.common.binding import Binding
from horovod_prague.common.overlap import OverlappedAverager
from horovod_prague.common.topology import Topology


class FakeRuntime:
    def __init__(self, config) -> None:
        self.config = config
        self.topology = Topology(4, 2)
        self.started = False
        self.finished = False
        self.closed = False

    def start(self) -> None:
        self.started = True

    def close(self) -> None:
        self.closed = True


class FakeHorovod:
    def __init__(self) -> None:
        self.initialized = False
        self.shutdowns = 0

    def shutdown(self) -> None:
        self.initialized = False
        self.shutdowns += 1


class StandInBinding(Binding):
    can_overlap = True

    def tensors(self, source):
        return list(source)

    def scratch(self):
        raise AssertionError("no average in these tests")

    def average(self, tensors, name, process_set, size, overlap=None, share_of=None):
        raise AssertionError("no average in these tests")


class LaterStartBinding(StandInBinding):
    starts_in_init = False


@pytest.fixture
def calls(monkeypatch):
    """What ``init`` did: runtimes made, hooks registered. Its ``initialize`` refuses an
    initialized Horovod, as the real one does."""
    made: dict[str, list] = {"runtimes": [], "atexit": []}

    def initialize(hvd, config, horovod_kwargs):
        if hvd.initialized:
            raise RuntimeError("Horovod is already initialized")
        hvd.initialized = True
        made["atexit"].append("horovod shutdown")  # as Horovod's init registers it, each time
        runtime = FakeRuntime(config)
        made["runtimes"].append(runtime)
        return runtime

    monkeypatch.setattr(binding_module, "initialize", initialize)

    def unregister(handler) -> None:
        made["atexit"][:] = [h for h in made["atexit"] if h != handler]

    monkeypatch.setattr(
        binding_module,
        "atexit",
        types.SimpleNamespace(register=made["atexit"].append, unregister=unregister),
    )
    monkeypatch.setattr(Binding, "_watch_for_crash", lambda self: made["atexit"].append("crash"))
    for name in ("STRATEGY", "GROUP_SIZE", "STALENESS", "TIMEOUT", "SEED"):
        monkeypatch.delenv(f"HOROVOD_PRAGUE_{name.upper()}", raising=False)
    return made


@pytest.mark.parametrize("kind", [StandInBinding, LaterStartBinding])
def test_a_second_init_with_the_same_options_does_nothing(calls, kind):
    b = kind(FakeHorovod())
    b.init(strategy="static", group_size=2)
    runtime, averager = b.job.runtime, b.job.averager
    assert isinstance(averager, OverlappedAverager)
    assert runtime.started == kind.starts_in_init
    b.init(strategy="static", group_size=2)
    b.init(group_size=2, strategy="static", staleness="auto")  # the same, spelt otherwise
    assert b.job.runtime is runtime and b.job.averager is averager
    assert calls["runtimes"] == [runtime]
    assert calls["atexit"].count("crash") == 1 and calls["atexit"].count(b._at_exit) == 1


def test_a_second_init_under_the_drop_in_takes_the_same_options_from_the_environment(
    calls, monkeypatch
):
    monkeypatch.setenv("HOROVOD_PRAGUE_STRATEGY", "random")
    monkeypatch.setenv("HOROVOD_PRAGUE_GROUP_SIZE", "3")
    b = StandInBinding(FakeHorovod())
    b.init()
    b.init()
    assert len(calls["runtimes"]) == 1
    assert calls["runtimes"][0].config.strategy == "random"


def test_a_second_init_with_other_options_names_each_with_both_values(calls):
    b = StandInBinding(FakeHorovod())
    b.init(strategy="static", group_size=2, timeout=30)
    runtime = b.job.runtime
    with pytest.raises(ValueError, match="called again with different options") as e:
        b.init(strategy="random", group_size=2, timeout=5)
    message = str(e.value)
    assert "strategy='random' (was 'static')" in message
    assert "timeout=5.0 (was 30.0)" in message
    assert "group_size" not in message
    assert b.job.runtime is runtime and len(calls["runtimes"]) == 1


def test_a_second_init_with_other_horovod_arguments_names_them(calls):
    b = StandInBinding(FakeHorovod())
    b.init(process_sets="dynamic")
    with pytest.raises(ValueError, match=r"process_sets=None \(was 'dynamic'\)"):
        b.init()
    with pytest.raises(ValueError, match=r"comm=\[0, 1\] \(was None\)"):
        b.init(comm=[0, 1], process_sets="dynamic")


def test_process_sets_given_again_by_the_same_ranks_are_the_same_argument(calls):
    class Set:
        def __init__(self, ranks):
            self.ranks = ranks

    b = StandInBinding(FakeHorovod())
    b.init(process_sets=[Set([0, 1])])
    b.init(process_sets=[Set([1, 0])])
    with pytest.raises(ValueError, match=r"process_sets=\[\[0, 2\]\] \(was \[\[0, 1\]\]\)"):
        b.init(process_sets=[Set([0, 2])])
    assert len(calls["runtimes"]) == 1


def test_init_after_shutdown_starts_afresh_with_any_options(calls):
    hvd = FakeHorovod()
    b = StandInBinding(hvd)
    b.init(strategy="static")
    first = b.job.runtime
    b.shutdown()
    assert first.closed and hvd.shutdowns == 1 and b.job.runtime is None
    b.init(strategy="random", staleness="0")
    assert len(calls["runtimes"]) == 2 and b.job.runtime is calls["runtimes"][1]
    # Blocking now: the old averager is gone.
    assert b.job.runtime.started and b.job.averager is None
    assert calls["atexit"].count("crash") == 1 and calls["atexit"].count(b._at_exit) == 1
    b.init(strategy="random", staleness="0")
    assert len(calls["runtimes"]) == 2


class PendingNeverApplied:
    def ready(self) -> bool:
        return True

    def apply(self) -> None:
        raise AssertionError("an average in flight at a reset must be dropped")


def test_an_elastic_reset_initializes_again_as_init_was_called(calls):
    """``hvd.elastic.run``'s reset: the old runtime is closed, Horovod shut down, and Prague
    initialized again with ``init``'s arguments; the averages in flight are dropped and the
    collective names and step counts start again, as on a worker that joins the new world."""
    hvd = FakeHorovod()
    b = StandInBinding(hvd)
    b.init(strategy="static", group_size=2)
    first = b.job.runtime
    b.job.averager.start(PendingNeverApplied(), (0, 1))
    b.job.names.occurrences[(0, 1)] += 3
    b.job.stats.counts["steps"] += 7
    b.reset()
    assert first.closed and hvd.shutdowns == 1
    assert calls["runtimes"] == [first, b.job.runtime] and b.job.runtime.started
    assert b.config().strategy == "static" and b.config().group_size == 2
    assert b.job.averager.in_flight() == 0 and not b.job.names.occurrences
    assert b.exchange_stats()["steps"] == 0 and b.average_weight() == 1.0
    assert calls["atexit"][-1] == b._at_exit  # after Horovod's init of the new world


def test_a_failed_init_can_be_retried(calls, monkeypatch):
    def failing(hvd, config, horovod_kwargs):
        raise RuntimeError("Horovod could not start")

    b = StandInBinding(FakeHorovod())
    with monkeypatch.context() as m:
        m.setattr(binding_module, "initialize", failing)
        with pytest.raises(RuntimeError, match="could not start"):
            b.init()
    b.init()
    assert len(calls["runtimes"]) == 1 and b.job.runtime.started


class FailingDrain:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def drain(self) -> None:
        raise self.error


LOST_GG = ConnectionError("lost the connection to the Prague Group Generator")
# TensorFlow's error type stood in for: what a survivor's group average raised once.
DROPPED_SET = ValueError("Allreduce: Process set provided does not exist, or has not been ...")


# PyTorch's survivor, from Horovod's Python side (``horovod.common.basics``), once in CI.
DROPPED_SET_PYTHON = ValueError("Process set does not exist or has not been registered.")


@pytest.mark.parametrize(
    "error",
    [LOST_GG, DROPPED_SET, DROPPED_SET_PYTHON],
    ids=["lost-gg", "dropped-set", "dropped-set-python"],
)
def test_under_elastic_a_lost_rank_is_horovods_internal_error(calls, monkeypatch, error):
    """On which ``hvd.elastic.run`` restores the committed state and resets (any other error
    ends the job)."""
    from horovod.common.exceptions import HorovodInternalError

    monkeypatch.setenv("HOROVOD_ELASTIC", "1")
    b = StandInBinding(FakeHorovod())
    b.init(strategy="static")
    b.job.averager = FailingDrain(error)
    with pytest.raises(HorovodInternalError, match=f"{type(error).__name__}: {error}"[:40]):
        b.drain()


def test_without_elastic_a_dropped_process_set_is_not_a_lost_rank(calls):
    """Outside elastic nothing resets: the error stays as Horovod gave it."""
    b = StandInBinding(FakeHorovod())
    b.init(strategy="static")
    b.job.averager = FailingDrain(DROPPED_SET)
    with pytest.raises(ValueError, match="Process set provided does not exist"):
        b.drain()


def test_under_elastic_groups_ignore_hosts_so_every_rank_derives_one_layout(monkeypatch):
    """A world after a reset may have hosts of 2 and 1 ranks: each rank sees only its own
    host's size, so the layout for the process sets added after init must not depend on it."""
    from horovod_prague.common.runtime import _topology_after_init

    monkeypatch.setenv("HOROVOD_ELASTIC", "1")
    for local_size in (2, 1):
        hvd = types.SimpleNamespace(
            size=lambda: 3, local_size=lambda n=local_size: n, is_homogeneous=lambda: False
        )
        assert _topology_after_init(hvd) == Topology(3, 3)


class RefusingHorovod:
    """Horovod whose ``init`` fails as 0.28.1's does when ranks register different process
    sets (the cause, "mismatching numbers of process sets", goes to its log)."""

    def __init__(self, homogeneous: bool = False, local_size: int = 2) -> None:
        self.homogeneous, self.local = homogeneous, local_size

    def ProcessSet(self, ranks):  # noqa: N802 (Horovod's name)
        return types.SimpleNamespace(ranks=ranks)

    def is_initialized(self):
        return False

    def init(self, **kwargs):
        if kwargs["process_sets"] != "dynamic":
            raise ValueError("Horovod initialization failed. Please check log messages above.")

    def is_homogeneous(self):
        return self.homogeneous

    def size(self):
        return 6

    def local_size(self):
        return self.local


class AcceptingHorovod(RefusingHorovod):
    """Horovod whose ``init`` takes whatever sets it is given."""

    def __init__(self, homogeneous: bool = False, local_size: int = 2) -> None:
        super().__init__(homogeneous, local_size)
        self.added: list[list[int]] = []

    def init(self, **kwargs):
        pass

    def rank(self):
        return 1

    def add_process_set(self, ranks):
        self.added.append(ranks)
        return types.SimpleNamespace(ranks=ranks)


def _launched_by_mpirun(monkeypatch, size: int, rank: int, local_size: int, local_rank: int):
    from horovod_prague.common.topology import NODES_VAR

    for key in (
        "HOROVOD_ELASTIC",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR",
        "HOROVOD_SIZE",
        "OMPI_MCA_orte_num_nodes",
        NODES_VAR,
    ):
        monkeypatch.delenv(key, raising=False)
    for key, value in {
        "OMPI_COMM_WORLD_SIZE": size,
        "OMPI_COMM_WORLD_RANK": rank,
        "OMPI_COMM_WORLD_LOCAL_SIZE": local_size,
        "OMPI_COMM_WORLD_LOCAL_RANK": local_rank,
    }.items():
        monkeypatch.setenv(key, str(value))


@pytest.mark.parametrize("nodes", [None, "4,2"])
def test_process_sets_refused_by_horovod_name_uneven_hosts_when_the_layout_was_a_guess(
    monkeypatch, nodes
):
    """``mpirun -H h1:4,h2:2`` alone, with no node count among the launcher's variables (Open
    MPI 5, another MPI): a rank of h2 takes 3 hosts of 2 from its own host's size and
    registers sets that h1's ranks do not, and Horovod's ``init`` refuses them.
    Its error names the uneven hosts too; where horovodrun named every host's ranks, it
    does not."""
    from horovod_prague.common import runtime as runtime_module
    from horovod_prague.common.config import PragueConfig
    from horovod_prague.common.topology import NODES_VAR

    _launched_by_mpirun(monkeypatch, 6, 4, 2, 0)
    if nodes:
        monkeypatch.setenv(NODES_VAR, nodes)
    with pytest.raises(RuntimeError, match="Horovod initialization failed") as e:
        runtime_module.initialize(RefusingHorovod(), PragueConfig(strategy="static"), {})
    hint = "this host runs 2 of the job's 6 ranks): launch with horovodrun"
    assert (hint in str(e.value)) == (nodes is None)


def test_a_refusal_on_one_host_says_nothing_of_hosts(monkeypatch):
    from horovod_prague.common import runtime as runtime_module
    from horovod_prague.common.config import PragueConfig

    _launched_by_mpirun(monkeypatch, 4, 1, 4, 1)
    with pytest.raises(RuntimeError, match="Horovod initialization failed") as e:
        runtime_module.initialize(RefusingHorovod(), PragueConfig(strategy="static"), {})
    assert "host" not in str(e.value)


def test_dynamic_process_sets_on_uneven_hosts_without_a_host_list_stop_every_rank(monkeypatch):
    """``mpirun -H h1:4,h2:2`` alone with ``hvd.init(process_sets="dynamic")`` and no node
    count among the launcher's variables: Horovod's ``init`` accepts it, and a rank of h2,
    whose 2 ranks divide the job's 6, would add sets for 3 hosts of 2 while h1's ranks stop;
    ``is_homogeneous()`` stops it too."""
    from horovod_prague.common import runtime as runtime_module
    from horovod_prague.common.config import PragueConfig

    _launched_by_mpirun(monkeypatch, 6, 4, 2, 0)
    with pytest.raises(RuntimeError, match="runs 2 of the job's 6 ranks.*launch with horovodrun"):
        runtime_module.initialize(
            RefusingHorovod(), PragueConfig(strategy="static"), {"process_sets": "dynamic"}
        )


class StartedHorovod(AcceptingHorovod):
    """Horovod whose ``init`` counts its calls."""

    def __init__(self, local_size: int) -> None:
        super().__init__(homogeneous=True, local_size=local_size)
        self.inits = 0

    def init(self, **kwargs):
        self.inits += 1


@pytest.mark.parametrize(
    ("local_size", "nodes", "uneven"),
    [(4, None, True), (2, "2", True), (2, None, False), (3, "2", False)],
    ids=["h1-of-4+2", "h2-of-4+2-counted", "h2-of-4+2-uncounted", "even-3+3"],
)
def test_hosts_the_launcher_shows_uneven_stop_before_horovod_starts(
    monkeypatch, local_size, nodes, uneven
):
    """``mpirun -H h1:4,h2:2`` alone: a rank that sees from its launcher's variables that the
    hosts differ (its host's 4 do not divide 6; or Open MPI's node count, 2, times its host's
    2 is not 6) stops before Horovod's ``init``. Its exit ends the job under mpirun. Before,
    h1's ranks passed ``init`` and h2's failed it, and at exit they waited on each other in
    different MPI collectives for ever (seen on emulated hosts)."""
    from horovod_prague.common import runtime as runtime_module
    from horovod_prague.common.config import PragueConfig

    _launched_by_mpirun(monkeypatch, 6, 4, local_size, 0)
    if nodes:
        monkeypatch.setenv("OMPI_MCA_orte_num_nodes", nodes)
    hvd = StartedHorovod(local_size)
    if uneven:
        with pytest.raises(RuntimeError, match=f"runs {local_size} of the job's 6 ranks"):
            runtime_module.initialize(hvd, PragueConfig(strategy="static"), {})
        assert hvd.inits == 0
    else:
        runtime_module.initialize(hvd, PragueConfig(strategy="static"), {})
        assert hvd.inits == 1


def test_dynamic_process_sets_keep_the_layout_the_launcher_gave(monkeypatch):
    """``hvd.init(process_sets="dynamic")`` on hosts of 4 and 2 ranks under ``horovodrun
    --prague`` (MPI: ``HOROVOD_PRAGUE_NODES``): the sets added after ``init`` follow the
    announced layout, on every rank alike. Before, a rank of the host of 4 derived the layout
    from its own host's size and stopped with "the launcher did not say how many each"."""
    from horovod_prague.common import runtime as runtime_module
    from horovod_prague.common.config import PragueConfig
    from horovod_prague.common.topology import NODES_VAR

    _launched_by_mpirun(monkeypatch, 6, 1, 4, 1)
    monkeypatch.setenv(NODES_VAR, "4,2")

    hvd = AcceptingHorovod(local_size=4)
    runtime = runtime_module.initialize(
        hvd, PragueConfig(strategy="static"), {"process_sets": "dynamic"}
    )
    assert runtime.topology == Topology.of_nodes([4, 2])
    assert hvd.added and all(len(ranks) >= 2 for ranks in hvd.added)


class BatchAddingHorovod(AcceptingHorovod):
    """Horovod with ``add_process_sets`` (``patches/0022``)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.batches: list[list[list[int]]] = []

    def add_process_sets(self, sets):
        self.batches.append(sets)
        return [types.SimpleNamespace(ranks=ranks) for ranks in sets]


def test_dynamic_process_sets_are_added_at_once_where_horovod_can():
    """One ``add_process_sets`` call with every group's set, in the groups' order, where
    Horovod offers it; else one ``add_process_set`` per group, in the same order."""
    from horovod_prague.common.process_sets import ProcessSetPool

    groups = ((0, 1), (0, 2), (1, 2))
    batching = BatchAddingHorovod(local_size=3)
    pool = ProcessSetPool(batching, groups, size=3, rank=1)
    assert batching.batches == [[[0, 1], [0, 2], [1, 2]]] and batching.added == []
    assert pool.get((1, 2)).ranks == [1, 2]
    one_by_one = AcceptingHorovod(local_size=3)
    ProcessSetPool(one_by_one, groups, size=3, rank=1)
    assert one_by_one.added == [[0, 1], [0, 2], [1, 2]]


@pytest.mark.filterwarnings("ignore:the launcher did not announce")  # 6 ranks, a host of 4
@pytest.mark.parametrize("local_size", [4, 2])
def test_hosts_of_different_sizes_that_no_launcher_named_stop_with_a_clear_error(
    monkeypatch, local_size
):
    """``mpirun -H h1:4,h2:2`` without horovodrun: a rank of h1 sees 4 of 6 ranks (and stops
    before ``init``), one of h2 2 of 6, which would split evenly. Horovod's
    ``is_homogeneous()``, from every rank's size, is False on both hosts, so every rank stops,
    whether Horovod's ``init`` took its sets or not. Before, h2's ranks took 3 hosts of 2."""
    from horovod_prague.common import runtime as runtime_module
    from horovod_prague.common.config import PragueConfig

    for sets in ({}, {"process_sets": "dynamic"}):
        _launched_by_mpirun(monkeypatch, 6, 1, local_size, 1)
        with pytest.raises(
            RuntimeError, match=f"runs {local_size} of the job's 6 ranks.*launch with horovodrun"
        ):
            runtime_module.initialize(
                AcceptingHorovod(local_size=local_size), PragueConfig(strategy="static"), sets
            )
    _launched_by_mpirun(monkeypatch, 6, 1, 3, 1)
    even = runtime_module.initialize(
        AcceptingHorovod(homogeneous=True, local_size=3), PragueConfig(strategy="static"), {}
    )
    assert even.topology == Topology(6, 3)


def test_the_homogeneity_check_reads_horovod_torch_where_it_keeps_it(monkeypatch):
    """``horovod.torch`` does not re-export ``is_homogeneous`` (``horovod.tensorflow``
    does); it lives on the module's ``mpi_ops._basics``. Before, every rank of an ``mpirun``
    job on one host stopped in ``init`` on "module 'horovod.torch' has no attribute
    'is_homogeneous'"."""
    import horovod.torch

    from horovod_prague.common import runtime as runtime_module
    from horovod_prague.common.config import PragueConfig

    assert not hasattr(horovod.torch, "is_homogeneous")
    assert callable(horovod.torch.mpi_ops._basics.is_homogeneous)

    class TorchLikeHorovod(AcceptingHorovod):
        is_homogeneous = None  # as horovod.torch: no such attribute of its own

        def __init__(self, homogeneous: bool, local_size: int) -> None:
            super().__init__(homogeneous, local_size)
            basics = types.SimpleNamespace(is_homogeneous=lambda: homogeneous)
            self.mpi_ops = types.SimpleNamespace(_basics=basics)

    _launched_by_mpirun(monkeypatch, 6, 1, 3, 1)
    even = runtime_module.initialize(TorchLikeHorovod(True, 3), PragueConfig(strategy="static"), {})
    assert even.topology == Topology(6, 3)
    with pytest.raises(RuntimeError, match="runs 3 of the job's 6 ranks"):
        runtime_module.initialize(TorchLikeHorovod(False, 3), PragueConfig(strategy="static"), {})


class GatheringHorovod:
    """Rank ``rank`` of a job whose other ranks send ``others`` to ``allgather_object``;
    ``gathers`` holds each collective's name and ``sent`` what this rank gave it."""

    def __init__(self, rank: int, local_rank: int, local_size: int, size: int, others):
        self._rank = rank
        self._local_rank = local_rank
        self._local_size = local_size
        self._size = size
        self.others = others
        self.gathers: list[str] = []
        self.sent: list[Any] = []

    def rank(self) -> int:
        return self._rank

    def local_rank(self) -> int:
        return self._local_rank

    def local_size(self) -> int:
        return self._local_size

    def size(self) -> int:
        return self._size

    def allgather_object(self, obj, name=None):
        self.gathers.append(name)
        self.sent.append(obj)
        return [obj if r == self._rank else self.others(r) for r in range(self._size)]


def test_the_start_checks_the_options_and_learns_the_layout_in_one_collective(monkeypatch):
    from horovod_prague.common.config import PragueConfig
    from horovod_prague.common.runtime import _agree_and_lay_out

    monkeypatch.setenv("HOROVOD_HOSTNAME", "h1")
    config = PragueConfig(strategy="static")
    hosts = ["h1", "h1", "h2", "h2"]
    offer = {"host": "198.18.0.1", "port": 4242, "token": "ab"}

    def rank_says(r: int, options: dict | None = None):
        return options or config.agreed(), (r - r % 2, 2, hosts[r]), offer if r == 0 else {}

    hvd = GatheringHorovod(rank=1, local_rank=1, local_size=2, size=4, others=rank_says)
    topology, names, rank_0_offer = _agree_and_lay_out(hvd, config, {})
    assert (topology, names, rank_0_offer) == (Topology(4, 2), hosts, offer)
    assert len(hvd.gathers) == 1

    other = PragueConfig(strategy="static", seed=config.seed + 1).agreed()
    hvd.others = lambda r: rank_says(r, other if r == 3 else config.agreed())
    with pytest.raises(ValueError, match=r"between rank 1 and rank 3: seed=0 vs 1"):
        _agree_and_lay_out(hvd, config, {})


def _rank_0_runtime(monkeypatch, others) -> tuple[Any, GatheringHorovod]:
    from horovod_prague.common.config import PragueConfig
    from horovod_prague.common.runtime import PragueRuntime
    from horovod_prague.common.strategies import make_strategy

    monkeypatch.setenv("HOROVOD_HOSTNAME", "h1")
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    config = PragueConfig(strategy="static")
    strategy = make_strategy(config, Topology(4, 4))
    registered = [types.SimpleNamespace(ranks=list(g)) for g in strategy.groups()]
    hvd = GatheringHorovod(rank=0, local_rank=0, local_size=4, size=4, others=others)
    return PragueRuntime(hvd, config, strategy, registered), hvd


def test_rank_0_closes_its_group_generator_when_the_options_differ(monkeypatch):
    from horovod_prague.common.config import PragueConfig

    other = PragueConfig(strategy="static", seed=1).agreed()
    seen: list[Any] = []

    def rank_says(r: int):
        seen.append(runtime.server)  # the server rank 0 had started, as the collective ran
        return other, (0, 4, "h1"), {}

    runtime, _ = _rank_0_runtime(monkeypatch, rank_says)
    with pytest.raises(ValueError, match="options differ between rank 0 and rank 1"):
        runtime.start()
    assert runtime.server is None and not runtime.started
    server = seen[0]
    assert server is not None
    with pytest.raises(OSError):
        socket.create_connection(server.address, timeout=2).close()


def test_any_failure_to_start_the_group_generator_reaches_every_rank(monkeypatch):
    """Rank 0 still joins the options' collective, so the others hear the error instead of
    waiting for it there."""
    from horovod_prague.common import runtime as runtime_module

    def broken(*_args, **_kwargs):
        raise ValueError("no groups for this world")

    monkeypatch.setattr(runtime_module, "GroupGenerator", broken)

    def rank_says(r: int):
        return runtime.config.agreed(), (0, 4, "h1"), {}

    runtime, hvd = _rank_0_runtime(monkeypatch, rank_says)
    with pytest.raises(RuntimeError, match="could not start the Prague Group Generator.*no groups"):
        runtime.start()
    assert hvd.gathers == ["prague.start"]
    _options, _where, offer = hvd.sent[0]
    assert "no groups for this world" in offer["error"]
    assert runtime.server is None
