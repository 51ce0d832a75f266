"""DistributedOptimizer on 2 ranks: run with ``horovodrun -np 2 ... python run_pytest.py``.

Each test runs on both ranks in the same order, like Horovod's own parallel tests. With two
ranks and groups of two every Prague step averages over both ranks, so expected values are
exact: after a step, every parameter is the mean of the ranks' locally updated values.
Checks use Horovod's own collectives (``horovod.torch``), not the guarded ones under test.
"""

from __future__ import annotations

import inspect
import itertools
import warnings

import horovod.torch as raw
import pytest
import torch
import torch.nn.functional as F
from _report import same_on_all_ranks

import horovod_prague.torch as hvd
from horovod_prague.common.overlap import wait_until
from horovod_prague.torch.binding import binding


@pytest.fixture(scope="session", autouse=True)
def prague():
    hvd.init(strategy="smart", group_size=2, staleness=0, timeout=30)
    torch.manual_seed(1234)
    yield
    hvd.shutdown()


def _rank_data(*shape):
    g = torch.Generator().manual_seed(100 + hvd.rank())
    return torch.randn(*shape, generator=g)


_names = itertools.count()


def _mean(t):
    """The mean over ranks of ``t``, by Horovod's own allreduce."""
    return raw.allreduce(t.detach().clone(), op=raw.Average, name=f"check.{next(_names)}")


def _model():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    raw.broadcast_parameters(model.state_dict(), root_rank=0)
    return model


def test_step_averages_the_locally_updated_parameters():
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = _rank_data(8, 4), _rank_data(8, 2)
    F.mse_loss(model(x), y).backward()
    expected = [_mean(p - 0.1 * p.grad) for p in model.parameters()]
    opt.step()
    for p, e in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.detach(), e)
        assert same_on_all_ranks(raw, p)


def test_no_named_parameters():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 10, 1), torch.nn.Conv2d(10, 1, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    opt.zero_grad()
    model(torch.rand(1, 1, 20, 20)).sum().backward()
    opt.step()


def test_wrapped_optimizer_is_still_the_users_class_and_shares_its_state():
    model = _model()
    inner = torch.optim.Adam(model.parameters(), lr=0.01)
    opt = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters())
    assert isinstance(opt, torch.optim.Adam) and type(opt).__name__ == "Adam"
    assert opt.param_groups is inner.param_groups and opt.state is inner.state
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    model(_rank_data(2, 4)).sum().backward()
    opt.step()
    scheduler.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.005)


def test_synchronize_step_warning():
    model = _model()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    opt.zero_grad()
    F.mse_loss(model(torch.zeros(1, 4)), torch.ones(1, 2)).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        opt.step()
    messages = [str(w.message) for w in ws]
    assert len(messages) == 1
    assert "optimizer.step() called without optimizer.skip_synchronize()" in messages[0]


def test_gradient_clipping_between_synchronize_and_step():
    model = torch.nn.Linear(1, 1)
    model.weight = torch.nn.Parameter(torch.zeros(1, 1) + 0.5)
    model.bias = torch.nn.Parameter(torch.zeros(1))
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    target = torch.ones(1, 1) * (1 + hvd.rank())
    opt.zero_grad()
    F.mse_loss(model(torch.ones(1, 1)), target).backward()
    opt.synchronize()
    prior = model.weight.grad.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    clipped = model.weight.grad.item()
    assert abs(prior) > abs(clipped)
    expected = _mean(model.weight - 0.1 * model.weight.grad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()
    torch.testing.assert_close(model.weight.detach(), expected)


def test_backward_passes_per_step_accumulates_locally():
    model = _model()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters(),
        backward_passes_per_step=2,
    )
    opt.zero_grad()
    for _ in range(2):
        F.mse_loss(model(_rank_data(4, 4)), _rank_data(4, 2)).backward()
    expected = [_mean(p - 0.1 * p.grad) for p in model.parameters()]
    opt.step()
    for p, e in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.detach(), e)
    # A third pass before step() is one too many, as in Horovod.
    opt.zero_grad()
    for _ in range(2):
        model(_rank_data(1, 4)).sum().backward()
    with pytest.raises(AssertionError, match="more than backward_passes_per_step"):
        model(_rank_data(1, 4)).sum().backward()
    # Where own pace gave this rank a larger batch than the script's, the error says why a
    # script that cuts its batch into sub-batches of a fixed size took more passes.
    binding.job.stats.scale = 1.5
    try:
        with pytest.raises(AssertionError, match=r"own_pace=on .* \(torch.chunk\)"):
            model(_rank_data(1, 4)).sum().backward()
    finally:
        binding.job.stats.scale = 1.0
    opt.zero_grad()
    model(_rank_data(1, 4)).sum().backward()
    opt.step()
    # Loading a state (as an elastic restore does) forgets the passes counted, as in Horovod.
    for _ in range(2):
        model(_rank_data(1, 4)).sum().backward()
    opt.load_state_dict(opt.state_dict())
    model(_rank_data(1, 4)).sum().backward()
    opt.zero_grad()


def test_parameters_without_gradients_are_still_averaged():
    model = _model()
    frozen = model[2]
    for p in frozen.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        frozen.weight.add_(hvd.rank() + 1.0)
    expected = _mean(frozen.weight)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    model(_rank_data(2, 4)).sum().backward()
    assert frozen.weight.grad is None
    opt.step()
    torch.testing.assert_close(frozen.weight.detach(), expected)


def test_dynamic_requires_grad():
    gen = torch.nn.Conv2d(1, 10, 1)
    disc = torch.nn.Conv2d(10, 1, 1)
    raw.broadcast_parameters(gen.state_dict(), root_rank=0)
    raw.broadcast_parameters(disc.state_dict(), root_rank=0)
    inp = _rank_data(1, 1, 20, 20)
    gen_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(gen.parameters(), lr=0.1), named_parameters=gen.named_parameters()
    )
    disc_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(disc.parameters(), lr=0.1), named_parameters=disc.named_parameters()
    )

    def train_step(train_generator=False, train_discriminator=False):
        for p in gen.parameters():
            p.requires_grad_(train_generator)
        for p in disc.parameters():
            p.requires_grad_(train_discriminator)
        gen_opt.zero_grad()
        disc_opt.zero_grad()
        disc(gen(inp)).sum().backward()
        for p in gen.parameters():
            assert train_generator == (p.grad is not None and p.grad.max().is_nonzero())
        for p in disc.parameters():
            assert train_discriminator == (p.grad is not None and p.grad.max().is_nonzero())
        if train_generator:
            gen_opt.step()
        if train_discriminator:
            disc_opt.step()

    for _ in range(5):
        train_step(train_generator=True)
        train_step(train_discriminator=True)
    for p in [*gen.parameters(), *disc.parameters()]:
        assert same_on_all_ranks(raw, p)


def test_batchnorm_statistics_are_averaged_with_the_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    raw.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    model(_rank_data(8, 4) * (1 + hvd.rank())).sum().backward()
    bn = model[1]
    assert not same_on_all_ranks(raw, bn.running_mean)
    expected_mean, expected_var = _mean(bn.running_mean), _mean(bn.running_var)
    opt.step()
    torch.testing.assert_close(bn.running_mean, expected_mean)
    torch.testing.assert_close(bn.running_var, expected_var)
    assert bn.num_batches_tracked.item() == 1


def test_step_with_closure_returns_the_loss():
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = _rank_data(4, 4), _rank_data(4, 2)

    def closure():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert isinstance(loss, torch.Tensor) and loss.item() > 0
    for p in model.parameters():
        assert same_on_all_ranks(raw, p)


def test_state_dict_round_trip():
    model = _model()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        named_parameters=model.named_parameters(),
    )
    model(_rank_data(2, 4)).sum().backward()
    opt.step()
    state = opt.state_dict()
    assert len(state["state"]) == 4 and "momentum_buffer" in state["state"][0]
    fresh = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.1),
        named_parameters=model.named_parameters(),
    )
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["lr"] == 0.1
    torch.testing.assert_close(
        fresh.state_dict()["state"][0]["momentum_buffer"], state["state"][0]["momentum_buffer"]
    )


def _optimizer_classes():
    # As in Horovod's tests: L-BFGS and SparseAdam do not apply; Muon takes 2-D parameters only.
    unsupported = {torch.optim.LBFGS, torch.optim.SparseAdam, getattr(torch.optim, "Muon", None)}
    return sorted(
        (
            cls
            for cls in torch.optim.Optimizer.__subclasses__()
            if cls.__module__.startswith("torch.optim") and cls not in unsupported
        ),
        key=lambda cls: cls.__name__,
    )


def _new_optimizer(cls, params, options):
    accepted = inspect.signature(cls.__init__).parameters
    return cls(params, **{k: v for k, v in options.items() if k in accepted})


def _optimizer_values(opt):
    state = opt.state_dict()
    values = []
    for group in state["param_groups"]:
        for pid in group["params"]:
            for key, value in sorted(state["state"].get(pid, {}).items()):
                values.append((key, value.clone() if torch.is_tensor(value) else value))
    return values


@pytest.mark.parametrize(
    "options",
    [dict(lr=0.2, momentum=0.9, weight_decay=0.1, centered=True), dict(lr=0.2)],
    ids=["with-options", "lr-only"],
)
@pytest.mark.parametrize("broadcast", ["prague", "horovod"])
def test_broadcast_optimizer_state(options, broadcast):
    """For each torch optimizer: state created by a step, or by the broadcast itself, ends
    equal to rank 0's; the broadcast takes no Prague step (Horovod steps inside it)."""
    broadcast_state = (
        hvd.broadcast_optimizer_state if broadcast == "prague" else raw.broadcast_optimizer_state
    )
    for cls in _optimizer_classes():
        model = _model()
        opt = hvd.DistributedOptimizer(
            _new_optimizer(cls, model.parameters(), options),
            named_parameters=model.named_parameters(),
        )
        F.mse_loss(model(_rank_data(16, 4)), _rank_data(16, 2)).backward()
        opt.step()
        ours = _optimizer_values(opt)
        reference = [
            (k, raw.broadcast_object(v, root_rank=0, name=f"ref.{cls.__name__}.{i}"))
            for i, (k, v) in enumerate(ours)
        ]
        broadcast_state(opt, root_rank=0)
        after = _optimizer_values(opt)
        assert [k for k, _ in after] == [k for k, _ in reference], cls.__name__
        for (_, got), (_, want) in zip(after, reference, strict=True):
            if torch.is_tensor(want):
                assert torch.equal(got, want), cls.__name__
            else:
                assert got == want, cls.__name__
        # A fresh optimizer: the broadcast creates the state with its own (local) step.
        fresh = hvd.DistributedOptimizer(
            _new_optimizer(cls, model.parameters(), options),
            named_parameters=model.named_parameters(),
        )
        steps_before = fresh._prague_steps
        broadcast_state(fresh, root_rank=0)
        assert fresh._prague_steps == steps_before, cls.__name__


def test_broadcast_optimizer_state_options():
    options_0 = dict(lr=0.1, momentum=0.8, weight_decay=0.2, nesterov=True, betas=(0.9, 0.999))
    options_1 = dict(lr=0.2, momentum=0.9, weight_decay=0.1, nesterov=False, betas=(0.8, 0.9))
    for cls in _optimizer_classes():
        model = _model()
        mine = options_0 if hvd.rank() == 0 else options_1
        opt = hvd.DistributedOptimizer(
            _new_optimizer(cls, model.parameters(), mine),
            named_parameters=model.named_parameters(),
        )
        model(_rank_data(4, 4)).sum().backward()
        opt.step()
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        accepted = inspect.signature(cls.__init__).parameters
        for key, want in options_0.items():
            if key in accepted:
                assert opt.param_groups[0][key] == pytest.approx(want), (cls.__name__, key)
        model(_rank_data(4, 4)).sum().backward()
        opt.step()


def test_broadcast_optimizer_state_no_grad():
    class ModelNoGrad(torch.nn.Module):
        def __init__(self, a, b):
            super().__init__()
            self.a = torch.nn.Parameter(a.int(), requires_grad=False)
            self.b = torch.nn.Parameter(b)

        def forward(self, x):
            return torch.index_select(self.b, 0, self.a.long()) * x

    model = ModelNoGrad(torch.Tensor([1, 3]), torch.rand(4))
    opt = torch.optim.SGD(
        model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9, nesterov=True
    )
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grad = opt.param_groups[0]["params"][1].grad
    assert opt.param_groups[0]["params"][0].grad is None
    assert torch.equal(grad, raw.broadcast(grad, root_rank=0, name="no_grad.check"))
    model(torch.ones(2)).sum().backward()
    opt.step()
    assert same_on_all_ranks(raw, model.a) and same_on_all_ranks(raw, model.b)


def test_average_model_after_steps():
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(4):
        opt.zero_grad()
        model(_rank_data(2, 4)).sum().backward()
        opt.step()
    assert opt._prague_steps == 4
    with torch.no_grad():
        for p in model.parameters():
            p.add_(hvd.rank())
    assert hvd.average_model(model)
    for p in model.parameters():
        assert same_on_all_ranks(raw, p)


def test_a_global_collective_first_brings_the_model_to_consensus():
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    model(_rank_data(2, 4)).sum().backward()
    opt.step()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(hvd.rank())
    expected = [_mean(p) for p in model.parameters()]
    # Horovod's own collective leaves the model alone; the guarded one averages it first.
    total = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name="guarded.check")
    assert total.item() == hvd.size()
    for p, e in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.detach(), e)
    # Nothing stepped since: the next collective does not average again.
    with torch.no_grad():
        next(model.parameters()).add_(hvd.rank())
    hvd.allreduce(torch.tensor([1.0]), name="guarded.check2")
    assert not same_on_all_ranks(raw, next(model.parameters()))


def test_weighting_by_progress_weighs_each_rank_in_both_paths(monkeypatch):
    """Under ``weighting=progress`` each member's model counts by its ``average_weight()``
    (its steps), in the blocking average and in the overlapped one alike; integer buffers
    still take the floor mean."""
    binding = hvd._binding
    monkeypatch.setattr(binding, "average_weight", lambda: float(hvd.rank() + 1))
    world = raw.global_process_set
    expected = (1 * 1.0 + 2 * 11.0) / 3  # rank r holds 10 r + 1 and weighs r + 1
    blocking = torch.full((3,), 10.0 * hvd.rank() + 1)
    counter = torch.tensor([hvd.rank() + 2])
    binding.average([blocking, counter], f"check.weighted.{next(_names)}", world, 2)
    assert torch.allclose(blocking, torch.full((3,), expected))
    assert counter.item() == 2  # floor((2 + 3) / 2)
    overlapped = torch.full((2,), 10.0 * hvd.rank() + 1)
    pending = binding.start_average([overlapped], f"check.weighted.{next(_names)}", world, 2)
    overlapped += 5.0  # a local step while the average runs
    wait_until(pending.ready, 30, lambda: "the weighted average did not complete")
    pending.apply()
    assert torch.allclose(overlapped, torch.full((2,), expected + 5.0))


def test_weighting_by_progress_widens_half_precision(monkeypatch):
    """Step counts times float16 values overflow float16 (max 65504): the weighted average is
    computed in float32."""
    binding = hvd._binding
    monkeypatch.setattr(binding, "average_weight", lambda: 1e5 * (hvd.rank() + 1))
    half = torch.full((4,), 10.0 * hvd.rank() + 1, dtype=torch.float16)
    binding.average([half], f"check.weighted.{next(_names)}", raw.global_process_set, 2)
    assert half.dtype == torch.float16
    assert torch.allclose(half.float(), torch.full((4,), 23.0 / 3), rtol=1e-3)
