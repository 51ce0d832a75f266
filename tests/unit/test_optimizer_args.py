"""DistributedOptimizer's argument checks, which run before Horovod or Prague is initialized.

They follow Horovod's own optimizer tests: the same mistakes raise the same error types.
"""

import itertools

import pytest
import torch

import horovod_prague.torch as hvd


def _net():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 1), torch.nn.Conv2d(4, 1, 1))


def test_duplicate_names():
    net1, net2 = torch.nn.Conv2d(1, 1, 1), torch.nn.Conv2d(1, 1, 1)
    opt = torch.optim.SGD(itertools.chain(net1.parameters(), net2.parameters()), lr=0.1)
    named = itertools.chain(net1.named_parameters(), net2.named_parameters())
    with pytest.raises(ValueError, match="Found duplicates: bias, weight"):
        hvd.DistributedOptimizer(opt, named_parameters=named)


def test_missing_named_parameters():
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(opt, named_parameters=list(model.named_parameters())[:1])


def test_named_parameters_must_be_tuples():
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="sequence of tuples"):
        hvd.DistributedOptimizer(opt, named_parameters=[["w", p] for p in model.parameters()])


@pytest.mark.parametrize("passes", [0, -1])
def test_backward_passes_per_step_must_be_positive(passes):
    opt = torch.optim.SGD(_net().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="backward_passes_per_step must be > 0"):
        hvd.DistributedOptimizer(opt, backward_passes_per_step=passes)


def test_gradient_predivide_factor_needs_average():
    opt = torch.optim.SGD(_net().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="op != Average"):
        hvd.DistributedOptimizer(opt, op=hvd.Sum, gradient_predivide_factor=2.0)


@pytest.mark.parametrize(
    ("groups", "message"),
    [(-1, "non-negative integer"), ([[torch.zeros(1)], ["x"]], "torch.Tensor")],
)
def test_bad_groups(groups, message):
    opt = torch.optim.SGD(_net().parameters(), lr=0.1)
    with pytest.raises(ValueError, match=message):
        hvd.DistributedOptimizer(opt, groups=groups)


def test_a_parameter_appears_once_in_groups():
    model = _net()
    p = next(model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="only appear once"):
        hvd.DistributedOptimizer(opt, groups=[[p], [p]])


def test_a_non_global_process_set_is_refused():
    opt = torch.optim.SGD(_net().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="process_set: Prague forms its groups over all ranks"):
        hvd.DistributedOptimizer(opt, process_set=hvd.ProcessSet([0, 1]))


def test_negative_sync_every_is_refused():
    opt = torch.optim.SGD(_net().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="sync_every"):
        hvd.DistributedOptimizer(opt, sync_every=-1)


def test_before_init_the_error_says_to_call_init():
    opt = torch.optim.SGD(_net().parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="call hvd.init"):
        hvd.DistributedOptimizer(opt)


def test_not_an_optimizer():
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        hvd.DistributedOptimizer(object())
