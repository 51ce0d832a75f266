"""The public Prague functions, written once; a framework supplies how to average tensors.

``horovod_prague.torch`` and ``horovod_prague.tensorflow`` each make one ``Binding`` and export
its methods as module functions.

One class in one file: the step path (``exchange`` to ``finish``), the lifecycle (``init``,
``reset``, the exit hooks) and the guard of the script's collectives (``consensus``,
``settle``) share one job's state and call each other. What they use and can stand alone is
in modules of its own: the tracked models (``models``), the step counters (``step_stats``),
the collective names (``process_sets.AverageNames``), the waits of the script's collectives
(``script_waits``), the error that names a stopped rank (``stopped``).
"""

from __future__ import annotations

import abc
import atexit
import collections
import dataclasses
import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from .agreement import InitCall
from .config import PragueConfig
from .group_generator import Owed, WorldGroup
from .import_hook import PROCESS_SET_FUNCTIONS
from .models import TrackedModels
from .overlap import (
    Overlap,
    OverlappedAverager,
    PendingAverage,
    awaiting,
)
from .process_sets import PRAGUE_PREFIX, AverageNames
from .runtime import PragueRuntime, initialize
from .script_waits import ScriptWaits, is_global, ranks_of, report_waiting
from .step_stats import StepStats
from .stopped import naming_the_stopped_rank
from .strategies import Group

T = TypeVar("T")

FUNCTIONS = (
    "init",
    "runtime",
    "config",
    "next_group",
    "partial_allreduce",
    "exchange",
    "exchange_stats",
    "drain",
    "average_model",
    "finish",
    "shutdown",
    *PROCESS_SET_FUNCTIONS,
)
"""Prague's functions that every framework package exports: its binding's methods
(``Binding.functions``)."""


@dataclasses.dataclass
class Job:
    """What a ``Binding`` holds for one job's world. Made at start; an elastic ``reset``
    replaces it, so that nothing of a lost world reaches the next."""

    runtime: PragueRuntime | None = None
    """The Group Generator connection, the options and process sets (None before ``init``)."""
    averager: OverlappedAverager | None = None
    """The group averages in flight, where the job overlaps them."""
    names: AverageNames = dataclasses.field(default_factory=AverageNames)
    """The collective names of this rank's group averages."""
    last_exchanged: list[Any] = dataclasses.field(default_factory=list)
    """The tensors the last Prague step averaged (``Binding.tracked`` without a model)."""
    exchanges_since_consensus: int = 0
    """Prague steps since the last consensus (the guard's count)."""
    stats: StepStats = dataclasses.field(default_factory=StepStats)
    """How this rank's Prague steps went (``exchange_stats``)."""


class Binding(abc.ABC):
    """Prague's API over one framework's Horovod module."""

    pending_average: type[PendingAverage] | None = None
    """The framework's ``PendingAverage``, with which ``start_average`` runs a group average
    in the background; None where the framework averages blocking only."""

    starts_in_init = True
    """Whether ``init`` starts Prague (``PragueRuntime.start``: Horovod collectives, so
    framework ops) or leaves it to the first Prague call or guarded collective."""

    def __init__(self, hvd: ModuleType) -> None:
        self.hvd = hvd
        self.models = TrackedModels()
        """The optimizers' models and momentum followers, kept across elastic resets."""
        self.script_waits = ScriptWaits(
            lambda: self.job.runtime, self.runtime, lambda: self.job.stats
        )
        """The waits for the script's own collectives, with the job's deadline."""
        self._crashed = False
        self._init_call: InitCall | None = None
        self._new_job()

    def _new_job(self) -> None:
        """Forget the state of the job's world (``Job``): at start and at an elastic
        ``reset``."""
        self.job = Job()

    def functions(self) -> dict[str, Callable[..., Any]]:
        """``FUNCTIONS`` by name, as this binding's methods: what a framework package exports.

        globals().update(binding.functions())
        """
        return {name: getattr(self, name) for name in FUNCTIONS}

    @abc.abstractmethod
    def tensors(self, source: Any) -> list[Any]:
        """The tensors (or variables) to average, from a model or an iterable of tensors."""

    @abc.abstractmethod
    def scratch(self) -> Any:
        """A new one-element floating-point tensor (or variable) of zeros, for a world
        average that carries nothing but its meeting (``join`` without a tracked model)."""

    @abc.abstractmethod
    def average(
        self,
        tensors: Sequence[Any],
        name: str,
        process_set: Any,
        size: int,
        overlap: Overlap | None = None,
        share_of: int | None = None,
    ) -> None:
        """Average ``tensors`` in place over ``process_set`` in one fused Horovod collective,
        each member weighted by its ``average_weight()`` unless that is None. With
        ``overlap``, its flag travels in the collective as in ``start_average`` (a group may
        be averaged blocking by one member and overlapped by another: both must send the
        same tensors), and the tensors move ``overlap.scale`` of the way to the average.

        Integer tensors are summed. With ``share_of``, this rank's position in the group,
        each takes its ``integer_share`` of the sum, as an overlapped average's correction
        does, so the group's total is kept whether its members run it blocking or
        overlapped; without, the floor mean, the same on every member (a consensus)."""

    def start_average(
        self,
        tensors: Sequence[Any],
        name: str,
        process_set: Any,
        size: int,
        overlap: Overlap | None = None,
    ) -> PendingAverage:
        """Start averaging a snapshot of ``tensors`` over ``process_set``; do not wait.

        With ``overlap``, its ``flag`` travels in the same collective, and the correction is
        scaled by ``overlap.scale`` of the group's mean flag. Frameworks with a
        ``pending_average`` can; see ``horovod_prague.common.overlap``.
        """
        if self.pending_average is None:
            raise NotImplementedError(f"{type(self).__name__} cannot overlap group averages")
        pending = self.pending_average(
            tensors, name, process_set, size, self.average_weight(), overlap
        )
        if self.models.followed:
            pending.moved = self.models.moved
        return pending

    @property
    def can_overlap(self) -> bool:
        """Whether ``start_average`` runs a group average in the background (else: blocking)."""
        return self.pending_average is not None

    def init(self, comm: Any = None, process_sets: Any = None, **prague_options: Any) -> None:
        """Initialize Horovod and Prague.

        ``comm`` and ``process_sets`` go to Horovod's ``init``. The other keyword arguments are
        Prague options (``horovod_prague.common.config.PragueConfig``); ``HOROVOD_PRAGUE_*``
        environment variables give the same. Raises ValueError, on every rank, for options that
        cannot work or that differ between ranks (where the framework starts Prague later, see
        ``starts_in_init``, differing options are found in ``init`` under Gloo, and at the
        start under MPI).

        As Horovod's, ``init`` may be called again: with the same options and arguments it
        does nothing; with others it raises ValueError naming each that differs. After
        ``shutdown`` it initializes Horovod and Prague afresh, with any options.
        """
        call = InitCall(
            comm, process_sets, prague_options, PragueConfig.from_sources(prague_options)
        )
        if self.job.runtime is not None and self._init_call is not None:
            self._init_call.check_same(call)
            return
        first = self._init_call is None
        config = call.config
        horovod_kwargs: dict[str, Any] = {"process_sets": process_sets}
        if comm is not None:
            horovod_kwargs["comm"] = comm
        runtime = initialize(self.hvd, config, horovod_kwargs)
        staleness = config.staleness_for(runtime.topology.size)
        self.job.averager = None
        if staleness > 0 and self.can_overlap:
            self.job.averager = OverlappedAverager(
                staleness, config.timeout, self._report_waiting, config.in_flight
            )
        self.job.runtime = runtime
        self._init_call = call
        if first:
            self._watch_for_crash()
        # After Horovod's init, which registers its shutdown at exit each time: ours must run
        # before it (exit handlers run last registered first), after a reset too.
        atexit.unregister(self._at_exit)
        atexit.register(self._at_exit)
        if self.starts_in_init:
            self.job.runtime.start()

    def reset(self) -> None:
        """Horovod elastic's reset under Prague (``hvd.elastic.run`` calls it after a worker
        was lost or the hosts changed): Horovod shuts down and initializes again for the new
        world, and Prague with it, as ``init`` was called: a new Group Generator on the new
        rank 0, the options checked again, the process sets registered again (Horovod's
        dynamic process sets, in the same order on every rank, as on a worker that joins).
        Averages in flight are dropped, not applied: their group may have lost a member, and
        the elastic state restores or broadcasts the model next.
        """
        if self.job.runtime is not None:
            self.job.runtime.close()
        self._new_job()
        self.hvd.shutdown()
        if self._init_call is None:
            self.hvd.init()
            return
        call = self._init_call
        self.init(call.comm, call.process_sets, **call.prague_options)

    def runtime(self) -> PragueRuntime:
        """This rank's Prague state, started (collective on the first call where ``init`` did
        not start it); RuntimeError before ``init``."""
        if self.job.runtime is None:
            raise RuntimeError("horovod_prague is not initialized: call hvd.init() first")
        if not self.job.runtime.started:
            self.start(self.job.runtime)
        return self.job.runtime

    def start(self, runtime: PragueRuntime) -> None:
        """Start ``runtime`` (``PragueRuntime.start``); a framework says where its ops run."""
        runtime.start()

    def config(self) -> PragueConfig:
        """The options this job runs with."""
        return self.runtime().config

    @naming_the_stopped_rank
    def next_group(self) -> Group:
        """Ask the Group Generator for this rank's next group (sorted ranks); blocks until known.

        A group of one rank means this step averages with nobody. Counts as a Prague step for
        the guard, whether or not the caller then averages.
        """
        group = self.runtime().next_group()
        self.job.exchanges_since_consensus += 1
        return group

    @naming_the_stopped_rank
    def partial_allreduce(self, tensors: Any, group: Group) -> None:
        """Average ``tensors`` in place with the other ranks of ``group`` (P-Reduce); blocks.

        Every member calls this for the group, with tensors of the same shapes, in the same
        order. They travel in one fused Horovod collective per dtype on the group's process set.
        This rank's overlapped averages still in flight (from ``exchange``) are applied first.
        """
        values = self.tensors(tensors)
        self._note_exchange(values)
        self._average_group(values, group)

    def _average_group(self, values: list[Any], group: Group, consensus: bool = False) -> None:
        """A blocking average of ``group``. A consensus (a world average of a sync or of the
        periodic ``WorldGroup``, which every member runs blocking) leaves integers equal on
        every member; a group average keeps their total (``average``'s ``share_of``)."""
        if len(group) < 2 or not values:
            return
        rt = self.runtime()
        consensus = consensus or isinstance(group, WorldGroup)
        if self.job.averager is not None:
            # Averages in flight are applied first: one with any of these members would
            # correct their difference twice, and on the same process set Horovod's eager
            # TensorFlow ops refuse the second collective while the first runs.
            self.job.averager.drain()
        with awaiting(group, self._report_waiting):
            self.average(
                values,
                self._occurrence(group, values),
                rt.process_set(group),
                len(group),
                self._overlap(),
                None if consensus else sorted(group).index(rt.rank),
            )

    def _overlap(self) -> Overlap | None:
        """What an average started now sends for its members to agree on its damping."""
        return None if self.job.averager is None else self.job.averager.overlap()

    def _note_exchange(self, values: list[Any]) -> None:
        """Remember what a Prague step averaged: the guard brings it to consensus."""
        self.job.last_exchanged = values
        self.job.exchanges_since_consensus += 1

    @naming_the_stopped_rank
    def exchange(self, tensors: Any) -> Group | None:
        """This step's group average, as ``DistributedOptimizer.step`` takes it.

        Blocking (``staleness=0``): ``partial_allreduce`` with ``next_group()``. Overlapped:
        starts the next group's average on a snapshot and returns at once, or, while
        ``in_flight`` averages are still running, averages with nobody this step;
        ``horovod_prague.common.overlap`` says how and when each average is applied. The
        periodic global average (a ``WorldGroup``, every ``sync_every`` steps) runs blocking
        after a drain. Returns the group asked for, or None when this step asked for none.
        """
        with self.job.stats.step() as counts:
            return self._exchange(tensors, counts)

    def _exchange(self, tensors: Any, counts: collections.Counter[str]) -> Group | None:
        values = self.tensors(tensors)
        self._note_exchange(values)
        if self.job.averager is None:
            group = self.next_group()
            self._average_group(values, group)
            counts["averaged" if len(group) > 1 else "alone"] += 1
            return group
        averager = self.job.averager
        waits = averager.waits
        try:
            if not averager.may_start():
                counts["alone"] += 1
                counts["in_flight"] += 1
                return None
            group = self.next_group()
            if len(group) < 2 or not values:
                counts["alone"] += 1
                return group
            if isinstance(group, WorldGroup):
                self._average_group(values, group)  # drains first: every rank ends equal
                counts["averaged"] += 1
                return group
            rt = self.runtime()
            averager.make_room(group, rt.rank)
            pending = self.start_average(
                values,
                self._occurrence(group, values),
                rt.process_set(group),
                len(group),
                self._overlap(),
            )
            averager.start(pending, group)
            counts["averaged"] += 1
            return group
        finally:
            counts["waited"] += averager.waits - waits

    def average_weight(self) -> float | None:
        """This rank's weight in its averages: under ``weighting=progress`` (the default) the
        optimizer steps it has taken (at least 1), each counted at the size of its batch
        (``StepStats.progress``), so that a model that has seen fewer samples, a
        straggler's, pulls its partners back less; None under ``equal``."""
        if self.config().weighting == "equal":
            return None
        return max(1.0, self.job.stats.progress)

    @property
    def steps_taken(self) -> int:
        """This job's Prague steps on this rank (``exchange`` calls) so far."""
        return self.job.stats.steps

    def exchange_stats(self) -> dict[str, int]:
        """How this rank's ``exchange`` calls went: ``steps``; ``averaged`` (a group average
        started or run); ``alone`` (no partner), of which ``in_flight`` (``in_flight`` averages
        were still running); ``waited`` (waits for an average in flight: one that reached
        ``staleness``, or one sharing a member with the group about to start); ``owed``,
        groups decided for steps that ``average_model`` or ``finish`` ran instead; and the
        milliseconds spent in ``exchange`` (``exchange_ms``), of which waiting for
        averages in flight (``waited_ms``)."""
        waited_s = self.job.averager.waited_s if self.job.averager is not None else 0.0
        return self.job.stats.as_dict(waited_s)

    def _report_waiting(self, group: Group, collective: str | None = None) -> None:
        """Tell the Group Generator this rank has waited long on ``group`` (``awaiting``)."""
        report_waiting(self.runtime, group, collective)

    def _occurrence(self, group: Group, values: Sequence[Any]) -> str:
        """The collective name of ``group``'s next average on this rank (``AverageNames``)."""
        return self.job.names.next(self.runtime().name(group), group, values)

    def _run_owed(self, values: list[Any], owed: Owed) -> None:
        """Run what the Group Generator says this rank owes, in order, blocking.

        Each owed group averages what an optimizer step averages
        (``TrackedModels.step_tensors``): its other members may run it as a step. Each world
        average averages ``TrackedModels.world_tensors``: every rank runs it from
        ``average_model`` or ``finish``. After a drain nothing is in flight,
        so a blocking average is what the overlapped one would give, through the same
        collectives: a member that took the same group with ``next_group`` and runs it
        overlapped meets this one.
        """
        self.drain()
        self.job.stats.counts["owed"] += len(owed.groups)
        step_values = self.models.step_tensors(values)
        for group in owed.groups:
            self._average_group(step_values, group)
        world_values = self.models.world_tensors(values)
        for _ in range(owed.world_averages):
            self._average_group(world_values, self.runtime().world, consensus=True)

    @naming_the_stopped_rank
    def drain(self) -> None:
        """Wait for this rank's group averages in flight, if any, and apply them."""
        if self.job.averager is not None:
            self.job.averager.drain()

    @naming_the_stopped_rank
    def average_model(self, model_or_tensors: Any) -> bool:
        """Average over all ranks; afterwards every rank holds the same values (consensus).

        Collective: every rank calls it the same number of times. Before the global average the
        rank runs the groups already decided for it, in order, so no rank waits in a group for
        a rank that waits in the global average. Once some rank has finished (``finish``, or
        Horovod's ``join``) no global average can form: it still runs the owed groups, and the
        Group Generator keeps groups from waiting on this rank until every rank has reached
        this point or finished, then returns False with a warning; after ``finish`` it always
        averages.
        While optimizers are tracked, every tracked model is averaged too (``_run_owed``).
        """
        rt = self.runtime()
        values = self.tensors(model_or_tensors)
        self.drain()
        if rt.finished:
            self._final_average(values)
            return True
        owed = rt.sync()
        self._run_owed(values, owed)
        if not owed.world_averages:
            warnings.warn(
                "average_model: a rank has already finished (finish(), or Horovod's join()), "
                "so no global average was made; call finish() or join() on every rank for "
                "the final one",
                stacklevel=2,
            )
            return False
        self.job.exchanges_since_consensus = 0
        return True

    def _final_average(self, values: list[Any]) -> None:
        """A world average outside the Group Generator's syncs: every rank has finished."""
        rt = self.runtime()
        rt.finals += 1
        with awaiting(rt.world, self._report_waiting):
            self.average(
                self.models.world_tensors(values),
                f"{PRAGUE_PREFIX}final.{rt.finals}",
                self.hvd.global_process_set,
                rt.topology.size,
                self._overlap(),
            )
        self.job.exchanges_since_consensus = 0

    @naming_the_stopped_rank
    def finish(self, model_or_tensors: Any, average: bool = True) -> None:
        """Leave the Group Generator at the end of training, then (by default) average globally.

        Runs the groups already decided for this rank, so no other rank waits for it in vain;
        no group formed later contains it. With ``average`` it ends with the global average, so
        every rank holds the same model once all have finished, even after different numbers
        of steps.
        """
        values = self.tensors(model_or_tensors)
        self.drain()
        self._run_owed(values, self.runtime().finish())
        if average:
            self.average_model(values)

    @naming_the_stopped_rank
    def join(self, horovod_join: Callable[[], T]) -> T:
        """Horovod's ``join`` (``horovod_join``) under Prague, for ranks with uneven data.

        This rank leaves the groups as ``finish`` does (what is owed to others first), so the
        ranks still training average among themselves; then Horovod's ``join`` waits until
        every rank has joined, with no deadline of its own, as Horovod's: the ranks it waits
        for are still training, and each of their waits has one. Then every rank takes steps
        again (the next ones meet in groups as before) and ends with one world average of
        the tracked models, so ``join`` returns, with Horovod's result, the same model on
        every rank. The world average comes after every rank has rejoined the Group
        Generator, since it completes only once all have entered it; without a tracked model
        it averages a scratch tensor, so that no rank goes on (rank 0 to its exit, which
        closes the Group Generator) before every rank has rejoined.
        """
        if self.job.runtime is None:
            return horovod_join()
        rt = self.runtime()
        if not rt.finished:
            self.finish(self.tracked(), average=False)
        last = horovod_join()
        rt.rejoin()
        self._final_average(self.tracked() or [self.scratch()])
        return last

    def shutdown(self) -> None:
        """Leave (see ``leave``), close the Group Generator connection, shut Horovod down."""
        self.leave()
        self.drain()
        if self.job.runtime is not None:
            self.job.runtime.close()
            self.job.runtime = None
        self.hvd.shutdown()

    def tracked(self) -> list[Any]:
        """The tensors of every tracked model, each once, in registration order.

        Without a tracked model (a hand-written loop of ``partial_allreduce`` or
        ``exchange``): the tensors the last Prague step averaged.
        """
        if not self.models:
            return list(self.job.last_exchanged)
        return self.models.tensors()

    def consensus(self) -> None:
        """Average the tracked models globally if they changed since the last consensus.

        Collective over all ranks, like the Horovod call it precedes; ranks that took the same
        steps make the same decision. Does nothing before any Prague step or after ``finish``.
        """
        rt = self.job.runtime
        if rt is None or rt.finished or self.job.exchanges_since_consensus == 0:
            return
        self.average_model(self.tracked())

    @naming_the_stopped_rank
    def settle(self, process_set: Any) -> None:
        """Before the script's collective on ``process_set``, a set of some ranks: run what
        this rank owes (``GroupGenerator.settle``), held until every member has, so that no
        member waits in a group for one in the collective. Does nothing before a model is
        tracked, after ``finish``, on a set of one rank (no one to wait for),
        or where this rank is not a member or the set is not registered (Horovod's error then).
        """
        rt = self.job.runtime
        if rt is None or rt.finished or not (self.models or self.job.last_exchanged):
            return
        if process_set.process_set_id is None or process_set.ranks is None:
            return
        members = ranks_of(rt, process_set)
        if len(members) < 2 or rt.rank not in members:
            return
        values = self.tensors(self.tracked())
        self.drain()
        self._run_owed(values, rt.settle(members))

    def before_collective(self, process_set: Any) -> None:
        """What a script's collective on ``process_set`` (None: the global one) needs first:
        a consensus on the global set, a settle on a set of some ranks."""
        if self.job.runtime is None:
            return
        self.runtime()  # every rank starts Prague before its first collective
        if is_global(process_set):
            self.consensus()
        else:
            self.settle(process_set)

    def guard(self, collective: Callable[..., Any]) -> Callable[..., Any]:
        """``collective``, preceded by ``before_collective``: a consensus when it runs on the
        global process set, a settle of its members on a set of some ranks.

        A global collective waits for every rank; a rank that still owes a group would wait in
        it for a rank waiting in the collective. Consensus first runs the owed groups, and
        leaves every rank with the same model, so a checkpoint written after any global
        collective (metric averaging, a broadcast) holds the consensus model. A settle does
        the same for the members of a smaller set, without a world average.
        """
        signature = inspect.signature(collective)

        @functools.wraps(collective)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs).arguments
            with self.job.stats.away():
                self.before_collective(bound.get("process_set"))
                return collective(*args, **kwargs)

        return guarded

    def add_process_set(self, process_set: Any) -> Any:
        """Horovod's ``add_process_set`` beside Prague's sets: the script's set, ready for
        collectives, also where Prague has one with these ranks, which it then shares
        (``ProcessSetPool.add_for_script``). Every rank calls it, as Horovod requires, so the
        model is brought to consensus first, as for a global collective."""
        rt = self._before_process_set_call()
        if rt is None:
            return self.hvd.add_process_set(process_set)
        return rt.pool.add_for_script([process_set], batch=False)[0]

    def add_process_sets(self, process_sets: Sequence[Any]) -> list[Any]:
        """Horovod's ``add_process_sets`` (``patches/0022``) beside Prague's sets, as
        ``add_process_set`` for each, all or none."""
        rt = self._before_process_set_call()
        if rt is None:
            return list(self.hvd.add_process_sets(process_sets))
        return rt.pool.add_for_script(list(process_sets), batch=True)

    def remove_process_set(self, process_set: Any) -> bool:
        """Horovod's ``remove_process_set`` beside Prague's sets: a set Prague also uses stays
        registered for Prague, and the script's object is invalidated, as Horovod does
        (``ProcessSetPool.remove_for_script``); consensus first, as for adding."""
        rt = self._before_process_set_call()
        if rt is None:
            return bool(self.hvd.remove_process_set(process_set))
        return rt.pool.remove_for_script(process_set)

    def _before_process_set_call(self) -> PragueRuntime | None:
        """The runtime, started, after a consensus (``guard``'s for a global collective: a
        rank in Horovod's add or remove waits for every rank, also one that waits in a
        group for it); None before ``init``."""
        if self.job.runtime is None:
            return None
        rt = self.runtime()
        self.consensus()
        return rt

    def leave(self) -> None:
        """At the end of a run: ``finish`` the tracked models unless this rank already left.

        Run at exit (``_at_exit``, registered by ``init``), so an unmodified script ends with
        every rank holding the same model and no rank waiting for one that exited. Skipped when the
        process is ending with an uncaught exception: the job is failing, and a crashed rank
        should not wait for the others.
        """
        rt = self.job.runtime
        if rt is None or rt.finished or self._crashed:
            return
        if not self.models and not self.job.last_exchanged:
            return
        self.finish(self.tracked())

    def _at_exit(self) -> None:
        """``leave``, then close the Group Generator connection (on rank 0, the Group
        Generator): one exit handler for every runtime this process has had, so the current
        one is closed after it is left, however many resets made it."""
        try:
            self.leave()
        finally:
            if self.job.runtime is not None:
                self.job.runtime.close()

    def _watch_for_crash(self) -> None:
        previous = sys.excepthook

        def excepthook(*info: Any) -> None:
            self._crashed = True
            previous(*info)

        sys.excepthook = excepthook
