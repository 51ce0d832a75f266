"""``adam_correction``: a local Adam step as long as All-Reduce's (``horovod_prague.torch.adam``).
No job: ranks are simulated in one process."""

from __future__ import annotations

import math

import pytest
import torch

from horovod_prague.common.config import PragueConfig
from horovod_prague.torch import adam
from horovod_prague.torch import binding as torch_binding
from horovod_prague.torch import optimizer as optimizer_module

from .test_momentum_correction import job_fixture

job = job_fixture(torch_binding, optimizer_module)


def _stepped(gradients: list[torch.Tensor], **options) -> torch.optim.Optimizer:
    param = torch.zeros_like(gradients[0])
    opt = torch.optim.AdamW([param], **options)
    for g in gradients:
        param.grad = g.clone()
        opt.step()
    return opt


def test_noiseless_gradients_are_left_as_they_are():
    opt = _stepped([torch.linspace(-1, 1, 50)] * 30, lr=0.01, betas=(0.9, 0.95))
    assert adam.scale(opt, opt.param_groups[0], 8) == pytest.approx(1.0, abs=1e-3)


def test_pure_noise_is_lengthened_by_more_the_more_ranks_up_to_their_root():
    torch.manual_seed(0)
    opt = _stepped([torch.randn(4000) for _ in range(200)], lr=0.01, betas=(0.9, 0.999))
    factors = [adam.scale(opt, opt.param_groups[0], ranks) for ranks in (4, 16)]
    assert 1.5 < factors[0] < factors[1]
    assert [f <= math.sqrt(ranks) for f, ranks in zip(factors, (4, 16), strict=True)] == [
        True,
        True,
    ]


@pytest.mark.parametrize(
    "case", ["one rank", "amsgrad", "no state", "first steps"], ids=lambda c: c.replace(" ", "-")
)
def test_nothing_to_correct_gives_1(case):
    torch.manual_seed(0)
    noise = [torch.randn(100) for _ in range(2 if case == "first steps" else 30)]
    opt = _stepped(noise, lr=0.01, amsgrad=case == "amsgrad") if case != "no state" else None
    if opt is None:
        opt = torch.optim.Adam([torch.zeros(3)])
    assert adam.scale(opt, opt.param_groups[0], 1 if case == "one rank" else 8) == 1.0


def test_the_step_is_taken_at_the_scaled_rate_with_adamws_decay_kept():
    """Inside ``scaled``, AdamW steps as AdamW at ``lr * f`` and ``weight_decay / f`` would;
    afterwards the user's values are back, also when the step raises."""
    torch.manual_seed(0)
    grads = [torch.randn(10) for _ in range(3)]
    ours, reference = torch.ones(10), torch.ones(10)
    opt = torch.optim.AdamW([ours], lr=0.1, weight_decay=0.2)
    ref = torch.optim.AdamW([reference], lr=0.1 * 2.5, weight_decay=0.2 / 2.5)
    for g in grads:
        ours.grad, reference.grad = g.clone(), g.clone()
        with adam.scaled(opt, [2.5]):
            opt.step()
        ref.step()
    torch.testing.assert_close(ours, reference)
    assert (opt.param_groups[0]["lr"], opt.param_groups[0]["weight_decay"]) == (0.1, 0.2)
    with pytest.raises(RuntimeError, match="boom"), adam.scaled(opt, [3.0]):
        raise RuntimeError("boom")
    assert (opt.param_groups[0]["lr"], opt.param_groups[0]["weight_decay"]) == (0.1, 0.2)


def test_an_optimizer_it_does_not_correct_is_left_as_it_is():
    """No factors (another optimizer, or the option off): nothing is read or written, so an
    optimizer whose groups have no ``weight_decay`` (or no ``lr``) steps as it would."""
    param = torch.zeros(2)
    opt = torch.optim.Adadelta([param])
    del opt.param_groups[0]["weight_decay"], opt.param_groups[0]["lr"]
    before = dict(opt.param_groups[0])
    with adam.scaled(opt, []):
        pass
    assert opt.param_groups[0] == before


def _train(ranks: int, correct: bool | None, steps: int = 300) -> float:
    """Noisy least squares on ``ranks`` simulated ranks; the loss of the mean model.
    ``correct=None``: All-Reduce (one Adam on the mean gradient); else every rank steps its
    own Adam on its own gradient, corrected or not, and the models are averaged each step
    (the most mixing group averaging can give)."""
    gen = torch.Generator().manual_seed(1)
    target = torch.randn(64, generator=gen)
    models = [torch.zeros(64) for _ in range(1 if correct is None else ranks)]
    opts = [torch.optim.Adam([m], lr=0.002, betas=(0.9, 0.95)) for m in models]
    scales: list[float] = []
    for step in range(steps):
        noise = torch.randn(ranks, 64, generator=gen) * 3.0
        grads = (
            [models[0] - target + noise.mean(0)]
            if correct is None
            else [m - target + n for m, n in zip(models, noise, strict=True)]
        )
        for m, opt, g in zip(models, opts, grads, strict=True):
            m.grad = g
            if correct and step % adam.EVERY == 0:
                scales = [adam.scale(opt, opt.param_groups[0], ranks)]
            with adam.scaled(opt, scales if correct else []):
                opt.step()
        mean = torch.stack(models).mean(0)
        for m in models:
            m.copy_(mean)
    return float(((models[0] - target) ** 2).mean())


def test_corrected_local_steps_train_as_far_as_all_reduces():
    """Where noise dominates, uncorrected local Adam with averaging falls well behind
    All-Reduce's Adam; corrected, it ends close to it."""
    all_reduce, uncorrected, corrected = (_train(8, c) for c in (None, False, True))
    assert uncorrected - all_reduce > 0.2 * all_reduce
    assert abs(corrected - all_reduce) < 0.25 * (uncorrected - all_reduce)


def test_the_optimizer_measures_every_few_steps_and_only_when_on(job, monkeypatch):
    monkeypatch.setattr(job().hvd, "size", lambda: 2, raising=False)
    param = torch.zeros(5)
    wrapped = type("AdamW", (optimizer_module._PragueOptimizer, torch.optim.AdamW), {})
    opt = wrapped([param], lr=0.1)
    opt._prague_setup(1, None, None)
    assert opt._adam_step_scales() == [1.0]  # no state yet
    opt._adam_scales = [2.0]
    opt._prague_steps = adam.EVERY + 1
    assert opt._adam_step_scales() == [2.0]  # kept between measurements
    optimizer_module.binding.options = PragueConfig(adam_correction="off")
    assert opt._adam_step_scales() == []


def test_only_on_or_off():
    with pytest.raises(ValueError, match="adam_correction: expected on or off, got 'yes'"):
        PragueConfig(adam_correction="yes")
