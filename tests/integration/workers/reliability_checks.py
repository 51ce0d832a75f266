"""Defects that hung or averaged wrongly, on 4 ranks: ``horovodrun -np 4 ... run_pytest.py``.

With 4 ranks and pairs, a rank's groups change from step to step, so a step that averaged the
wrong tensors, or waited for a partner that waits elsewhere, shows up: as a shape error, as
models that differ, or as a wait that ends in the job's timeout (never a silent hang). Every
test runs on all ranks in the same order; checks use Horovod's own collectives
(``horovod.torch``), not the guarded ones under test.
"""

from __future__ import annotations

import itertools
import random
import time
import warnings

import horovod.torch as raw
import pytest
import torch
from _report import same_on_all_ranks

import horovod_prague.torch as hvd


@pytest.fixture(scope="session", autouse=True)
def prague():
    # AD-PSGD decides a requester's partner at once, so ranks often owe groups to others:
    # the case where a global collective must not overtake an owed group.
    hvd.init(strategy="adpsgd", group_size=2, staleness=0, timeout=20, seed=3)
    yield
    hvd.shutdown()


@pytest.fixture(autouse=True)
def settled():
    """After each test, a guarded global collective runs the groups still owed, so the next
    test's checks may use Horovod's own (unguarded) collectives."""
    yield
    hvd.barrier()


_names = itertools.count()


def _gathered(t):
    return raw.allgather_object(t.detach().clone(), name=f"check.{next(_names)}")


def _jitter(rng: random.Random) -> None:
    """A rank-dependent pause, so ranks reach the Group Generator in changing orders."""
    time.sleep(rng.random() * 0.01)


def test_explicit_loop_with_a_global_collective_each_step_does_not_hang():
    rng = random.Random(hvd.rank())
    weights = torch.full((16,), float(hvd.rank()))
    for step in range(30):
        _jitter(rng)
        weights.add_(1.0)
        hvd.partial_allreduce([weights], hvd.next_group())
        # A global collective while partners may still owe this rank a group.
        gathered = hvd.allgather(torch.tensor([step]), name=f"explicit.step.{step}")
        assert gathered.tolist() == [step] * hvd.size()
        # The guard brought the loop's tensors to consensus first.
        assert same_on_all_ranks(raw, weights)


def test_uneven_steps_then_a_global_collective_do_not_hang():
    """Ranks that leave their loop early reach the script's global collective while others
    still step and ask for groups: those groups leave the waiting ranks out."""
    rng = random.Random(20 + hvd.rank())
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    my_steps = 10 + 3 * hvd.rank()
    for _ in range(my_steps):
        _jitter(rng)
        opt.zero_grad()
        model(torch.randn(8, 4) * (1 + hvd.rank())).sum().backward()
        opt.step()
    total = hvd.allreduce(torch.tensor(float(my_steps)), op=hvd.Sum, name="uneven.steps")
    assert total.item() == sum(10 + 3 * r for r in range(hvd.size()))
    # The guard brought the model to consensus before the collective.
    for p in model.parameters():
        assert same_on_all_ranks(raw, p)


def test_two_optimizers_average_the_same_tensors_in_every_group():
    rng = random.Random(10 + hvd.rank())
    torch.manual_seed(0)
    gen, disc = torch.nn.Linear(3, 5), torch.nn.Linear(5, 1)  # different shapes
    opt_g = hvd.DistributedOptimizer(torch.optim.SGD(gen.parameters(), lr=0.1))
    opt_d = hvd.DistributedOptimizer(torch.optim.SGD(disc.parameters(), lr=0.1))
    for _ in range(20):
        x = torch.randn(4, 3) * (1 + hvd.rank())
        _jitter(rng)
        opt_d.zero_grad()
        disc(gen(x).detach()).sum().backward()
        opt_d.step()
        _jitter(rng)
        opt_g.zero_grad()
        disc(gen(x)).sum().backward()
        opt_g.step()
    assert hvd.average_model([*gen.parameters(), *disc.parameters()])
    for p in [*gen.parameters(), *disc.parameters()]:
        assert same_on_all_ranks(raw, p)


# Rounds of uneven steps then ``average_model``. Whether a round leaves a group owed at
# ``average_model`` depends on timing here; tests/unit/test_owed_groups.py makes it happen in
# a fixed order. These check the same path on real collectives: no hang, one model.
ROUNDS = 3


def test_average_model_of_one_tracked_model_meets_partners_stepping_all():
    """``average_model(a)`` runs its owed groups while partners still step with every tracked
    model (``a`` and ``b``): both sides must average the same tensors (before, the owed
    groups averaged ``a`` alone and the members timed out on differently named
    collectives)."""
    rng = random.Random(30 + hvd.rank())
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
    opt_a = hvd.DistributedOptimizer(torch.optim.SGD(a.parameters(), lr=0.1))
    opt_b = hvd.DistributedOptimizer(torch.optim.SGD(b.parameters(), lr=0.1))

    def one_round() -> None:
        for _ in range(4 + 2 * hvd.rank()):
            _jitter(rng)
            for opt, model in ((opt_a, a), (opt_b, torch.nn.Sequential(a, b))):
                opt.zero_grad()
                model(torch.randn(4, 3) * (1 + hvd.rank())).sum().backward()
                opt.step()
        assert hvd.average_model(a)
        for p in [*a.parameters(), *b.parameters()]:
            assert same_on_all_ranks(raw, p)

    for _ in range(ROUNDS):
        one_round()


def test_average_model_of_untracked_values_meets_partners_stepping():
    """``average_model`` of values no optimizer tracks (a model and an extra tensor) runs its
    owed groups with what the partners' steps average, and its world average with every value
    given (before, the owed groups averaged the extra tensor too, and timed out)."""
    rng = random.Random(40 + hvd.rank())
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))

    def one_round() -> None:
        for _ in range(4 + 2 * hvd.rank()):
            _jitter(rng)
            opt.zero_grad()
            model(torch.randn(4, 3) * (1 + hvd.rank())).sum().backward()
            opt.step()
        extra = torch.full((5,), float(hvd.rank()))
        assert hvd.average_model([*model.parameters(), extra])
        # Each rank's value counts by its weight (its steps, under weighting=progress).
        weights = raw.allgather_object(hvd._binding.average_weight() or 1.0)
        expected = sum(w * r for r, w in enumerate(weights)) / sum(weights)
        assert len(set(weights)) > 1  # uneven steps: a plain mean would differ
        assert torch.allclose(extra, torch.full((5,), expected))
        for p in model.parameters():
            assert same_on_all_ranks(raw, p)

    for _ in range(ROUNDS):
        one_round()


def test_an_lr_scheduler_made_before_wrapping_keeps_prague_on():
    model = torch.nn.Linear(4, 2)
    raw.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt = hvd.DistributedOptimizer(opt)
    before = hvd.exchange_stats()["steps"]
    model(torch.randn(2, 4) * (1 + hvd.rank())).sum().backward()
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "lr_scheduler.step() before optimizer.step()"
        scheduler.step()
    assert hvd.exchange_stats()["steps"] == before + 1
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)


def test_an_optimizer_whose_step_was_patched_is_refused():
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    opt.step = lambda closure=None: None
    with pytest.raises(ValueError, match="step\\(\\) was replaced on the instance"):
        hvd.DistributedOptimizer(opt)


class _WithBuffers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        rank = raw.rank()
        self.register_buffer("mask", torch.tensor([True, rank % 2 == 0, rank < 3]))
        self.register_buffer("counts", torch.tensor([200 + rank, 7 * rank], dtype=torch.uint8))
        self.register_buffer("small", torch.tensor([120, -120 + rank], dtype=torch.int8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def test_bool_and_small_integer_buffers_take_the_floor_mean():
    model = _WithBuffers()
    raw.broadcast_parameters(dict(model.named_parameters()), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
    for _ in range(3):  # group steps average the buffers too, without an error
        opt.zero_grad()
        model(torch.randn(2, 2)).sum().backward()
        opt.step()
    hvd.barrier()  # consensus: no group is owed now, so Horovod's own collectives are safe
    model.load_state_dict(_WithBuffers().state_dict() | dict(model.named_parameters()))
    expected = {}
    for name, buffer in model.named_buffers():
        wide = torch.stack(_gathered(buffer.to(torch.int64)))
        expected[name] = torch.div(wide.sum(0), hvd.size(), rounding_mode="floor")
    assert hvd.average_model(model)
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, expected[name].to(buffer.dtype)), name
    assert model.mask.dtype == torch.bool and model.counts.dtype == torch.uint8


def test_the_step_count_is_saved_loaded_and_broadcast():
    model = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(2, 3)).sum().backward()
        opt.step()
    state = opt.state_dict()
    assert state["prague"] == {"steps": 3}
    fresh = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    fresh.load_state_dict(state)
    assert fresh._prague_steps == 3
    # A resumed job loads its checkpoint on rank 0 only and broadcasts it.
    if hvd.rank() == 0:
        fresh.load_state_dict({**state, "prague": {"steps": 7}})
    else:
        fresh.load_state_dict({k: v for k, v in state.items() if k != "prague"})
        assert fresh._prague_steps == 0
    hvd.broadcast_optimizer_state(fresh, root_rank=0)
    assert fresh._prague_steps == 7
    fresh.zero_grad()
    model(torch.randn(2, 3)).sum().backward()
    fresh.step()
    assert fresh._prague_steps == 8
