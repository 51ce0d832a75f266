"""Prague's options adapted to a Horovod elastic world they do not fit (``common.adapt``), and
``initialize`` running with them under elastic."""

from __future__ import annotations

import dataclasses
import types
import warnings
from typing import Any

import pytest

from horovod_prague.common import runtime as runtime_module
from horovod_prague.common.adapt import Adapted, OptionsAdapted, adapt_to_world
from horovod_prague.common.config import STRATEGIES, PragueConfig
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology


def _builds(config: PragueConfig, size: int) -> bool:
    try:
        make_strategy(config, Topology(size, size))
    except ValueError:
        return False
    return True


GIVEN = [
    PragueConfig(strategy=strategy, group_size=group_size, pool_size=pool_size)
    for strategy in STRATEGIES
    for group_size in (0, 2, 3, 4, 8)
    for pool_size in (1, 3)
    if not (strategy == "adpsgd" and group_size not in (0, 2))
]


@pytest.mark.parametrize("given", GIVEN, ids=lambda c: f"{c.strategy}-{c.group_size}-{c.pool_size}")
def test_every_world_runs_options_that_fit_it_and_those_given_where_they_fit(given):
    """For every world from 1 to 12 ranks: the adapted options build a strategy; where the
    options given build one they are kept as given, with no reason; elsewhere every change
    has a reason, and only the strategy, the group size and nothing else change."""
    for size in range(1, 13):
        adapted = adapt_to_world(given, size)
        assert _builds(adapted.config, size), (given, size, adapted)
        if _builds(given, size):
            assert adapted == Adapted(given, given, size), (given, size)
            continue
        assert adapted.changed and adapted.reasons, (given, size)
        kept = {"strategy", "group_size"}
        for field in dataclasses.fields(PragueConfig):
            if field.name not in kept:
                assert getattr(adapted.config, field.name) == getattr(given, field.name)


def test_the_same_options_and_world_give_the_same_adaptation():
    """Every rank of a world computes it alone: it must come out the same on each."""
    for given in GIVEN:
        for size in (1, 3, 5, 7):
            assert adapt_to_world(given, size) == adapt_to_world(given, size)


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "allreduce"])
def test_a_world_of_one_rank_averages_with_nobody(strategy):
    """With ``allreduce``, whose one group is the world: that rank alone (``allreduce``
    given fits a world of 1 as given)."""
    assert adapt_to_world(PragueConfig(strategy="allreduce"), 1).changed is False
    adapted = adapt_to_world(PragueConfig(strategy=strategy), 1)
    assert adapted.config.strategy == "allreduce" and adapted.config.group_size == 0
    assert "a world of 1 rank has nobody to average with" in adapted.reasons[0]
    built = make_strategy(adapted.config, Topology(1, 1))
    assert built.groups() == ()
    assert built.generate(0, [1], frozenset({0})) == [(0,)]


def test_a_group_larger_than_the_world_takes_the_whole_world():
    given = PragueConfig(group_size=4)
    adapted = adapt_to_world(given, 2)
    assert adapted.config == dataclasses.replace(given, group_size=2)
    assert adapted.reasons == ("group_size=4 is larger than the world, so groups of 2",)
    assert adapted.changes() == "group_size=2 instead of 4"


def test_static_keeps_its_schedule_where_the_clamped_group_divides_the_world():
    """``-np 4 --min-np 2 --prague static --prague-group-size 4``: 2 and 3 survivors run
    static in groups of the world; 3 with groups of 2 cannot, and runs random."""
    assert adapt_to_world(PragueConfig(strategy="static", group_size=4), 2).config == (
        PragueConfig(strategy="static", group_size=2)
    )
    assert adapt_to_world(PragueConfig(strategy="static", group_size=4), 3).config == (
        PragueConfig(strategy="static", group_size=3)
    )
    adapted = adapt_to_world(PragueConfig(strategy="static"), 3)
    assert adapted.config == PragueConfig(strategy="random")
    assert adapted.reasons == (
        "the static schedule needs the world size (3) to be a multiple of the group size (2)",
    )


def test_options_that_still_do_not_fit_fall_back_to_the_whole_world():
    """``static`` ignores ``pool_size``; ``random`` with one division never mixes its groups."""
    adapted = adapt_to_world(PragueConfig(strategy="static", pool_size=1), 5)
    assert adapted.config == PragueConfig(strategy="allreduce", pool_size=1)
    assert "never mixes its groups" in adapted.reasons[-1]
    assert adapted.reasons[-1].endswith("so the whole world averages at every step")


def test_the_options_given_apply_again_when_the_world_grows_back():
    given = PragueConfig(strategy="static", group_size=4, seed=3)
    sizes = [4, 3, 1, 2, 4, 8]
    configs = [adapt_to_world(given, size).config for size in sizes]
    assert [c.strategy for c in configs] == ["static", "static", "allreduce", "static"] + [
        "static"
    ] * 2
    assert [c.group_size for c in configs] == [4, 3, 0, 2, 4, 4]
    assert configs[0] is given and configs[-1] is given


def test_the_description_names_the_world_each_change_and_why():
    text = adapt_to_world(PragueConfig(group_size=3), 1).describe()
    assert text.startswith("Prague's options do not fit a world of 1 rank, which runs with ")
    assert "strategy='allreduce' instead of 'smart', group_size=0 instead of 3" in text
    assert text.endswith("The options as given apply again in a world they fit.")


class ElasticHorovod:
    """Rank ``rank`` of a Horovod elastic world of ``size`` ranks, on one host, whose other
    ranks give ``others(rank, name)`` to ``allgather_object``; it adds process sets as
    Horovod's dynamic process sets do."""

    global_process_set = types.SimpleNamespace(process_set_id=0)

    def __init__(self, rank: int, size: int, others=None) -> None:
        self._rank, self._size = rank, size
        self.others = others
        self.initialized = False
        self.init_kwargs: dict[str, Any] = {}
        self.sent: list[Any] = []

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **kwargs: Any) -> None:
        self.initialized, self.init_kwargs = True, kwargs

    def rank(self) -> int:
        return self._rank

    def local_rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def local_size(self) -> int:
        return self._size

    def is_homogeneous(self) -> bool:
        return True

    def add_process_sets(self, sets: list[list[int]]) -> list[Any]:
        return [types.SimpleNamespace(ranks=ranks) for ranks in sets]

    def allgather_object(self, obj: Any, name: str | None = None) -> list[Any]:
        self.sent.append(obj)
        return [obj if r == self._rank else self.others(r, name) for r in range(self._size)]


@pytest.fixture
def elastic(monkeypatch):
    monkeypatch.setenv("HOROVOD_ELASTIC", "1")
    monkeypatch.setenv("HOROVOD_HOSTNAME", "h1")
    for key in ("HOROVOD_PRAGUE_COORDINATOR_ADDR", "HOROVOD_PRAGUE_COORDINATOR_PORT"):
        monkeypatch.delenv(key, raising=False)


def test_a_world_of_one_rank_starts_and_averages_with_nobody(elastic):
    """The lone survivor of ``-np 2 --min-np 1`` with the default options: ``init`` used to
    fail with "group_size: 2 is larger than the world size 1" at every reset."""
    given = PragueConfig()
    hvd = ElasticHorovod(rank=0, size=1)
    with pytest.warns(OptionsAdapted, match="do not fit a world of 1 rank") as caught:
        runtime = runtime_module.initialize(hvd, given, {})
    assert len(caught) == 1
    assert hvd.init_kwargs == {"process_sets": "dynamic"}
    assert runtime.given is given and runtime.config.strategy == "allreduce"
    try:
        runtime.start()
        # The options given travel in the options' collective: every rank compares those.
        assert hvd.sent[0][0] == given.agreed()
        assert [runtime.next_group() for _ in range(3)] == [(0,)] * 3
    finally:
        runtime.close()


def test_only_rank_0_warns_and_every_init_warns_again(elastic):
    given = PragueConfig(group_size=4)
    for rank, expected in ((0, 1), (1, 0), (0, 1)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()  # Python's default action: a message once per place
            for _ in range(2):  # an init and a reset into the same world
                runtime = runtime_module.initialize(ElasticHorovod(rank, 2), given, {})
                assert runtime.config.group_size == 2 and runtime.given is given
        adapted = [w for w in caught if issubclass(w.category, OptionsAdapted)]
        assert len(adapted) == 2 * expected, (rank, [str(w.message) for w in caught])


def test_options_fit_as_given_are_run_without_a_warning(elastic):
    given = PragueConfig(group_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OptionsAdapted)
        runtime = runtime_module.initialize(ElasticHorovod(0, 4), given, {})
    assert runtime.config is given


def test_ranks_given_different_options_are_stopped_even_where_both_adapt_alike(elastic):
    """Group sizes 4 and 8 both become 2 in a world of 2; the ranks were still given
    different options, which the start names."""
    with pytest.warns(OptionsAdapted):
        runtime = runtime_module.initialize(ElasticHorovod(0, 2), PragueConfig(group_size=4), {})
    other = PragueConfig(group_size=8)
    assert adapt_to_world(other, 2).config == runtime.config

    def rank_1_says(rank: int, name: str | None) -> Any:
        assert name == "prague.start"
        return other.agreed(), (0, 2, "h1"), {}

    runtime.hvd.others = rank_1_says
    with pytest.raises(ValueError, match="differ between rank 0 and rank 1: group_size=4 vs 8"):
        runtime.start()
    assert runtime.server is None and not runtime.started


def test_outside_elastic_options_that_do_not_fit_still_stop_the_job(monkeypatch):
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    for key in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "HOROVOD_PRAGUE_NODES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(runtime_module, "check_before_init", lambda *_: None)
    hvd = ElasticHorovod(0, 2)
    with pytest.raises(ValueError, match="group_size: 4 is larger than the world size 2"):
        runtime_module.initialize(hvd, PragueConfig(group_size=4), {"process_sets": "dynamic"})
