"""What ``init`` sets up on every rank, independent of the framework.

The framework packages pass in their Horovod module (``horovod.torch`` or
``horovod.tensorflow``); everything here uses only the API those share.

Order of ``initialize``: options are parsed; the strategy is built for the topology the
launcher announced, and its groups are given to ``hvd.init`` as process sets. Nothing there
runs a framework op. Then ``PragueRuntime.start``, through Horovod's collectives: rank 0
starts the Group Generator; in one collective every rank checks that all ranks run with the
same options and learns the Group Generator's address and a fresh token; every rank connects.
A framework whose first op fixes its runtime's settings (TensorFlow: threads, visible
devices, memory growth) starts it at the first Prague or global collective instead of in
``init``, so that a script configures TensorFlow after ``hvd.init()`` as with stock Horovod.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from .adapt import adapt_to_world, warn_adapted
from .agreement import check_before_init
from .config import PragueConfig
from .generator_client import GroupGeneratorClient
from .generator_service import GroupGeneratorServer
from .group_generator import GroupGenerator, Owed
from .process_sets import DYNAMIC_SETS_VAR, PRAGUE_PREFIX, ProcessSetPool, collective_name
from .protocol import new_token
from .script_collectives import ScriptCollectives
from .strategies import Group, GroupStrategy, make_strategy
from .topology import NODES_VAR, Topology, uneven_hosts_in_env


class PragueRuntime:
    """Config, Group Generator connection and process sets of one rank."""

    def __init__(
        self,
        hvd: ModuleType,
        config: PragueConfig,
        strategy: GroupStrategy,
        registered: list[Any] | None,
        given: PragueConfig | None = None,
        script_sets: list[Any] | None = None,
    ) -> None:
        self.hvd = hvd
        self.config = config
        """The options this world runs with: those ``given``, or, under elastic, those adapted
        to a world they do not fit (``adapt.adapt_to_world``)."""
        self.given = config if given is None else given
        """The options this rank was given, which every rank must share (``start``)."""
        self.strategy = strategy
        self.topology = strategy.topology
        self.world: Group = tuple(range(self.topology.size))
        self.rank = hvd.rank()
        self.server: GroupGeneratorServer | None = None
        self._client: GroupGeneratorClient | None = None
        self.pool = ProcessSetPool(
            hvd, strategy.groups(), self.topology.size, self.rank, registered, script_sets or []
        )
        self.hosts: list[str] = []
        """Each rank's host name (known once started)."""
        self.syncs = 0
        self.finished = False
        self.finals = 0
        self.script_collectives = ScriptCollectives()
        """The script's own collectives: names for unnamed ones, those in flight."""

    @property
    def started(self) -> bool:
        return self._client is not None

    def start(self) -> None:
        """Check the ranks agree, start the Group Generator on rank 0 and connect to it.

        Collective over all ranks, through Horovod's collectives (framework ops); once.
        Rank 0 starts the Group Generator first, so that its address travels in the same
        collective as the options and the layout.
        """
        if self._client is not None:
            return
        offer = self._serve() if self.rank == 0 else {}
        try:
            layout, self.hosts, offer = _agree_and_lay_out(self.hvd, self.given, offer)
            if layout != self.topology and not elastic():  # elastic: groups ignore hosts
                raise RuntimeError(
                    f"Prague was set up for {self.topology}, Horovod reports {layout}"
                )
            if "error" in offer:
                raise RuntimeError(offer["error"])
            self._client = self._connect(offer)
        except BaseException:
            if self.server is not None:
                self.server.close()
                self.server = None
            raise

    @property
    def client(self) -> GroupGeneratorClient:
        if self._client is None:
            raise RuntimeError("horovod_prague has not started: Binding.runtime() starts it")
        return self._client

    def _serve(self) -> dict[str, Any]:
        """Rank 0: start the Group Generator where every host of the job can reach it (the
        hosts as Horovod placed the ranks, under elastic too); the offer that tells the other
        ranks where, or the error that stops them all: any error, since the other ranks are
        already on their way to the collective that carries it."""
        config = self.config
        bind = None
        try:
            across_hosts = self.hvd.local_size() < self.hvd.size()
            bind, advertise = _addresses(config, across_hosts)
            self.server = GroupGeneratorServer(
                GroupGenerator(self.strategy, config.sync_every),
                new_token(),
                config.fingerprint(),
                host=bind,
                port=config.coordinator_port,
            )
        except Exception as e:  # any error: every rank must hear it in the collective
            at = f" at {bind}:{config.coordinator_port or '(any port)'}" if bind else ""
            return {"error": f"rank 0 could not start the Prague Group Generator{at}: {e}"}
        return {"host": advertise, "port": self.server.address[1], "token": self.server.token.hex()}

    def _connect(self, offer: dict[str, Any]) -> GroupGeneratorClient:
        """Connect to the Group Generator that rank 0 ``offer``-ed; ConnectionError on every
        rank, naming each rank's problem, where any rank could not."""
        hvd, config = self.hvd, self.config
        client, problem = None, None
        try:
            client = GroupGeneratorClient(
                offer["host"],
                offer["port"],
                bytes.fromhex(offer["token"]),
                self.rank,
                config.timeout,
            )
            client.hello(config.fingerprint())
        except (OSError, RuntimeError) as e:
            problem = str(e)
        problems = [p for p in hvd.allgather_object(problem, name=f"{PRAGUE_PREFIX}connect") if p]
        if problems:
            if client is not None:
                client.close()
            raise ConnectionError("; ".join(problems))
        assert client is not None
        return client

    def next_group(self) -> Group:
        if self.finished:
            raise RuntimeError("next_group() called after finish(); this rank has left")
        return self.client.next_group()

    def process_set(self, group: Group) -> Any:
        return self.pool.get(group)

    def name(self, group: Group) -> str:
        return collective_name(group, self.topology.size)

    def sync(self) -> Owed:
        """What to run for the next global sync: owed groups, then one world average, or none
        where a rank had finished (``GroupGenerator.sync``)."""
        self.syncs += 1
        return self.client.sync(self.syncs)

    def settle(self, members: Group) -> Owed:
        """What to run before the script's collective over ``members``, some ranks with this
        one among them: the owed groups (``GroupGenerator.settle``)."""
        return self.client.settle(members)

    def finish(self) -> Owed:
        """Leave: what is still owed to others, which the caller must run."""
        if self.finished:
            return Owed([], 0)
        self.finished = True
        return self.client.finish()

    def rejoin(self) -> None:
        """Take steps again after ``finish``, once every rank has finished (Horovod's
        ``join``); sync ids go on from the last one any rank reached."""
        if not self.finished:
            return
        self.syncs = self.client.rejoin()
        self.finished = False

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self.server is not None:
            self.server.close()
            self.server = None


def initialize(
    hvd: ModuleType, config: PragueConfig, horovod_kwargs: dict[str, Any]
) -> PragueRuntime:
    """Initialize Horovod with the strategy's process sets, then Prague; see the module doc."""
    if hvd.is_initialized():
        raise RuntimeError(
            "Horovod is already initialized; Prague must register its process sets in "
            "hvd.init, so call horovod_prague's init() instead of Horovod's"
        )
    user_sets = horovod_kwargs.pop("process_sets", None) or []
    if elastic():
        # Every reset starts a new world, of a size the launcher's variables do not tell, and
        # a worker that joins never resets: every rank adds the sets after init, in one order.
        if user_sets not in ([], "dynamic"):
            raise ValueError(
                "process_sets: under Horovod elastic, Prague registers its process sets "
                "after each reset; give hvd.init(process_sets='dynamic') and add yours with "
                "hvd.add_process_set"
            )
        user_sets = "dynamic"
        announced = store_layout = None
    else:
        store_layout = check_before_init(config.agreed(), config.timeout)
        announced = store_layout or Topology.from_env()
    # Only this host's size is known where neither horovodrun's host list nor its
    # rendezvous store gave every host's (a launcher such as mpirun alone): hosts are then
    # taken to be of this one's size, which Horovod's init confirms or refutes.
    guessed = not elastic() and not store_layout and not os.environ.get(NODES_VAR)
    uneven = uneven_hosts_in_env() if guessed else None
    if uneven is not None:
        # Before Horovod's init, which would take different sets on different hosts: under
        # MPI, ranks whose init failed and ranks whose init passed then wait on each other in
        # different collectives at exit, for ever. This rank's exit ends the job instead.
        raise RuntimeError(_uneven_hosts(*uneven))
    strategy = make_strategy(config, announced) if announced else None
    registered: list[Any] | None = None
    if user_sets == "dynamic":  # Horovod's dynamic process sets: Prague adds its sets after init
        horovod_kwargs["process_sets"] = "dynamic"
        user_sets, strategy = [], None
    elif strategy is not None:
        # A user's set with the ranks of a Prague group serves both: Horovod refuses two sets
        # with the same ranks.
        # The first of equal ones, which Horovod's init keeps (it invalidates the others).
        by_ranks = {tuple(sorted(s.ranks)): s for s in reversed(user_sets) if s.ranks is not None}
        registered = [by_ranks.get(g) or hvd.ProcessSet(list(g)) for g in strategy.groups()]
    if strategy is None and horovod_kwargs.get("process_sets") != "dynamic":
        warnings.warn(
            "the launcher did not announce the job's layout (HOROVOD_SIZE or "
            "OMPI_COMM_WORLD_SIZE); Prague falls back to Horovod's slower dynamic "
            "process sets",
            stacklevel=3,
        )
        os.environ[DYNAMIC_SETS_VAR] = "1"
    try:
        if horovod_kwargs.get("process_sets") != "dynamic":
            new_sets = [s for s in registered or [] if all(s is not u for u in user_sets)]
            horovod_kwargs["process_sets"] = [*user_sets, *new_sets]
        hvd.init(**horovod_kwargs)
    except ValueError as e:
        across_hosts = guessed and announced is not None and announced.cross_size > 1
        hosts = (
            f" Or {_uneven_hosts(announced.local_size, announced.size)}." if across_hosts else ""
        )
        raise RuntimeError(
            f"{e} With Prague this is most often options that differ between ranks, so the "
            f"ranks register different process sets. This rank: {_describe(config)}.{hosts}"
        ) from e
    if guessed:
        _require_even_hosts(hvd)
    given = config
    if strategy is None:
        topology = announced or _topology_after_init(hvd)
        if elastic():
            config = _adapted(hvd, given, topology.size)
        strategy = make_strategy(config, topology)
    return PragueRuntime(hvd, config, strategy, registered, given, user_sets)


def _adapted(hvd: ModuleType, given: PragueConfig, size: int) -> PragueConfig:
    """The options a Horovod elastic world of ``size`` ranks runs with (``adapt_to_world``):
    every rank derives them alike from the options given, which ``PragueRuntime.start``
    checks are the same on every rank. Rank 0 warns, at each ``init`` and reset, where they
    differ from those given."""
    adapted = adapt_to_world(given, size)
    if adapted.changed and hvd.rank() == 0:
        warn_adapted(adapted)
    return adapted.config


def _uneven_hosts(local_size: int, size: int) -> str:
    return (
        "the hosts run different numbers of ranks, and the launcher did not say how many "
        f"each (this host runs {local_size} of the job's {size} ranks): launch with horovodrun "
        "(-H or a host file), which tells every rank, or give every host the same number of "
        "ranks"
    )


def _require_even_hosts(hvd: ModuleType) -> None:
    """Stop every rank where the hosts hold different numbers of ranks and no launcher said
    how many each: a rank's own host size would give it a layout its partners do not share.
    Horovod's ``is_homogeneous()`` comes from every rank's local size, so all ranks agree."""
    if not _is_homogeneous(hvd) or hvd.size() % hvd.local_size():
        raise RuntimeError(_uneven_hosts(hvd.local_size(), hvd.size()))


def _is_homogeneous(hvd: ModuleType) -> bool:
    """Horovod's ``is_homogeneous()``, which its framework modules (``horovod.torch``,
    ``horovod.tensorflow``) do not re-export: it lives on their ``mpi_ops._basics``."""
    own = getattr(hvd, "is_homogeneous", None)
    return bool(own() if own is not None else hvd.mpi_ops._basics.is_homogeneous())


def _topology_after_init(hvd: ModuleType) -> Topology:
    """The layout for process sets added after ``init``, which every rank must derive alike.

    Under elastic a world's hosts may hold different numbers of ranks, which no rank can see
    without a collective (and TensorFlow's runtime must stay unstarted in ``init``): the
    groups are drawn as on one node, ignoring hosts. Otherwise nodes of equal size, which
    ``initialize`` checked."""
    if elastic():
        return Topology(hvd.size(), hvd.size())
    return Topology(hvd.size(), hvd.local_size())


def elastic() -> bool:
    """Whether this worker runs under Horovod elastic (``horovodrun --min-np`` and the like)."""
    return os.environ.get("HOROVOD_ELASTIC") == "1"


def _agree_and_lay_out(
    hvd: ModuleType, config: PragueConfig, offer: dict[str, Any]
) -> tuple[Topology, list[str], dict[str, Any]]:
    """Check that every rank has this rank's options (ValueError naming those that differ),
    and return the job's layout as Horovod reports it (every rank's node, by its first rank),
    each rank's host name (the launcher's, ``-H``, where it gave one) and rank 0's ``offer``
    (the Group Generator's address, ``PragueRuntime._serve``). One collective."""
    host = os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()
    mine = config.agreed()
    where = (hvd.rank() - hvd.local_rank(), hvd.local_size(), host)
    everyone = hvd.allgather_object((mine, where, offer), name=f"{PRAGUE_PREFIX}start")
    for other_rank, (theirs, _, _) in enumerate(everyone):
        differing = sorted(k for k in mine if theirs.get(k) != mine[k])
        if differing:
            details = ", ".join(f"{k}={mine[k]!r} vs {theirs.get(k)!r}" for k in differing)
            raise ValueError(
                f"Prague options differ between rank {hvd.rank()} and rank {other_rank}: "
                f"{details}. Every rank must use the same options."
            )
    nodes = {first: size for _, (first, size, _), _ in everyone}
    topology = Topology.of_node_starts(nodes, hvd.size())
    if topology is None:
        raise RuntimeError(f"Horovod reports nodes that do not tile the ranks: {sorted(nodes)}")
    return topology, [name for _, (_, _, name), _ in everyone], everyone[0][2]


def _describe(config: PragueConfig) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in config.agreed().items())


def _addresses(config: PragueConfig, across_hosts: bool) -> tuple[str, str]:
    """(bind address, address advertised to the other ranks) for the Group Generator.

    The same address: the server listens only where the other ranks are told to connect.
    ``--prague-coordinator-addr`` first; on one node, loopback; across nodes, rank 0's
    address on the interface Horovod's launcher chose for the job (``--network-interface``
    or its probe: ``HOROVOD_GLOO_IFACE`` under Gloo, ``NCCL_SOCKET_IFNAME`` under MPI), else
    the address rank 0's host name resolves to, if that is not a loopback one.
    """
    if config.coordinator_addr:
        return config.coordinator_addr, config.coordinator_addr
    if not across_hosts:
        return "127.0.0.1", "127.0.0.1"
    interface = job_interface()
    if interface:
        address = interface_address(interface)
        return address, address
    name = os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()
    address = socket.gethostbyname(name)
    if ipaddress.ip_address(address).is_loopback:
        raise OSError(
            f"rank 0's host name {name!r} resolves to {address}, a loopback address the other "
            "hosts cannot reach, and the launcher named no network interface: give "
            "horovodrun --network-interface, or --prague-coordinator-addr with an address "
            "of rank 0's host"
        )
    return address, address


def job_interface(env: Mapping[str, str] | None = None) -> str | None:
    """The network interface Horovod's launcher chose for the job's traffic, if it said.

    >>> job_interface({"NCCL_SOCKET_IFNAME": "eth1,eth2"})
    'eth1'
    >>> job_interface({"NCCL_SOCKET_IFNAME": "^docker"}) is None
    True
    """
    env = os.environ if env is None else env
    for key in ("HOROVOD_GLOO_IFACE", "NCCL_SOCKET_IFNAME"):
        first = (env.get(key) or "").split(",")[0].strip()
        if first and not first.startswith(("^", "=")):
            return first
    return None


def interface_address(interface: str) -> str:
    """This host's IPv4 address on ``interface``; OSError naming it where there is none."""
    import psutil  # Horovod's own dependency

    addresses = psutil.net_if_addrs()
    if interface not in addresses:
        raise OSError(
            f"network interface {interface!r}, which the launcher chose for the job, does "
            f"not exist on rank 0's host (it has {', '.join(sorted(addresses))})"
        )
    for entry in addresses[interface]:
        if entry.family == socket.AF_INET:
            return entry.address
    raise OSError(f"network interface {interface!r} on rank 0's host has no IPv4 address")
