"""Groups owed at ``average_model``: decided for a rank by a partner's step, run by the rank
at its sync. They must average what the partner's step averages (every tracked model), not
what ``average_model`` was given, or the two members meet in differently named collectives
and both time out.

In-process ranks (``in_process``) in a fixed order: rank 1 steps, which decides the group
(0, 1) for both; rank 0, which took no step, then calls ``average_model``, so the group is
owed to it. Each case once ran on 4 real ranks only when timing made a group owed.
"""

from __future__ import annotations

import threading

import numpy as np
from in_process import InProcessBinding, run_ranks


def _partner_steps_first(script_of_rank_0, script_of_rank_1):
    """Run rank 1's script, and rank 0's once rank 1 has its next group (0, 1)."""
    decided = threading.Event()

    def script(rank: int, b: InProcessBinding) -> None:
        if rank == 1:
            ask = b.job.runtime.next_group

            def next_group():
                group = ask()
                decided.set()
                return group

            b.job.runtime.next_group = next_group  # type: ignore[method-assign]
            script_of_rank_1(b)
        else:
            assert decided.wait(5), "rank 1 never asked for a group"
            script_of_rank_0(b)

    return run_ranks(2, 0, script)


def test_average_model_of_one_tracked_model_runs_owed_groups_with_every_tracked_model():
    a = [np.array([0.0]), np.array([10.0])]
    b = [np.array([100.0]), np.array([1000.0])]
    owed: list[int] = []

    def rank_0(binding: InProcessBinding) -> None:
        binding.models.track(lambda: [a[0]])
        binding.models.track(lambda: [b[0]])
        assert binding.average_model([a[0]])
        owed.append(binding.exchange_stats()["owed"])

    def rank_1(binding: InProcessBinding) -> None:
        binding.models.track(lambda: [a[1]])
        binding.models.track(lambda: [b[1]])
        b[1] += 2.0
        binding.exchange(binding.models.step_tensors([b[1]]))
        assert binding.average_model([a[1]])

    _partner_steps_first(rank_0, rank_1)
    assert owed == [1]
    assert a[0] == a[1] == 5.0
    assert b[0] == b[1] == 551.0


def test_average_model_of_untracked_values_runs_owed_groups_with_the_tracked_model():
    model = [np.array([0.0]), np.array([4.0])]
    extra = [np.array([1.0]), np.array([3.0])]
    owed: list[int] = []

    def rank_0(binding: InProcessBinding) -> None:
        binding.models.track(lambda: [model[0]])
        assert binding.average_model([model[0], extra[0]])
        owed.append(binding.exchange_stats()["owed"])

    def rank_1(binding: InProcessBinding) -> None:
        binding.models.track(lambda: [model[1]])
        binding.exchange(binding.models.step_tensors([model[1]]))
        assert binding.average_model([model[1], extra[1]])

    _partner_steps_first(rank_0, rank_1)
    assert owed == [1]
    assert model[0] == model[1] == 2.0
    assert extra[0] == extra[1] == 2.0
