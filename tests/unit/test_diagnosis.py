"""What a rank's error says about lost ranks and hosts (``common.diagnosis``)."""

import types

from in_process import Collectives, InProcessBinding, InProcessRuntime, random_generator

from horovod_prague.common import diagnosis
from horovod_prague.common.diagnosis import gone, silent_hosts, unreachable_generator
from horovod_prague.common.stopped import who_is_gone

HOSTS = ["h1", "h1", "h2", "h2"]


def test_a_host_whose_every_rank_dropped_its_connection_is_named_lost():
    said = gone([2, 3], HOSTS)
    assert said.startswith("Host h2 (ranks [2, 3]) is most likely lost")
    assert "h1" not in said


def test_some_ranks_of_a_host_gone_are_named_as_ranks_not_as_the_host():
    assert gone([1], HOSTS).startswith("Rank 1 (host h1) lost its connection")
    both = gone([1, 3], HOSTS)
    assert "Rank 1 (host h1)" in both and "Rank 3 (host h2)" in both and "Host" not in both


def test_on_one_host_ranks_are_named_never_the_host():
    assert gone([0, 1], ["a", "a"]).startswith("Ranks [0, 1] (host a) lost their connection")
    assert silent_hosts(["a", "a"], [9.0, 9.0], [None, None], 1.0) == ""
    assert unreachable_generator(["a", "a"]) == "rank 0 may be the one that stopped"


def test_hosts_unknown_still_name_the_ranks():
    assert gone([5], []).startswith("Ranks [5] lost their connection")
    assert gone([], HOSTS) == ""


def test_a_host_is_silent_only_if_every_rank_is_silent_long_and_waits_on_nothing():
    silence = [0.2, 0.3, 8.0, 9.0]
    assert "Host h2 (ranks [2, 3])" in silent_hosts(HOSTS, silence, [None] * 4, 1.5)
    # Rank 3 waits on a group: it is alive, held up, not lost.
    assert silent_hosts(HOSTS, silence, [None, None, None, (1, 3)], 1.5) == ""
    # Rank 2 spoke recently.
    assert silent_hosts(HOSTS, [0.2, 0.3, 1.0, 9.0], [None] * 4, 1.5) == ""
    # Finished ranks (silence None) do not make a host silent.
    assert silent_hosts(HOSTS, [0.2, 0.3, None, 9.0], [None] * 4, 1.5) == ""


def test_an_unreachable_generator_names_rank_0s_host_and_its_ranks():
    said = unreachable_generator(["h1", "h1", "h2", "h2"])
    assert "host h1 (ranks [0, 1])" in said


def test_a_rank_finding_part_of_a_host_lost_asks_again_and_names_the_whole_host():
    """The processes of a host killed together drop their connections within milliseconds,
    but the first stats a survivor gets may list only one of them (a clean-clone CI run named
    "Rank 2 (host h2)" for a host whose ranks 2 and 3 were both killed)."""
    replies = iter([{"lost": [2]}, {"lost": [2, 3]}])
    binding = InProcessBinding(InProcessRuntime(random_generator(4), 0, 0), Collectives())
    rt = binding.job.runtime
    rt.hosts = ["h1", "h1", "h2", "h2"]
    rt.config.timeout = 8.0
    rt.client = types.SimpleNamespace(stats=lambda: next(replies))
    assert "Host h2 (ranks [2, 3]) is most likely lost" in who_is_gone(binding.job.runtime)


def test_a_rank_of_a_host_lost_alone_is_named_alone():
    binding = InProcessBinding(InProcessRuntime(random_generator(4), 0, 0), Collectives())
    rt = binding.job.runtime
    rt.hosts = ["h1", "h1", "h2", "h2"]
    rt.config.timeout = 8.0
    rt.client = types.SimpleNamespace(stats=lambda: {"lost": [3]})
    assert "Rank 3 (host h2) lost its connection" in who_is_gone(binding.job.runtime)
    assert not diagnosis.partly_lost([], rt.hosts)
