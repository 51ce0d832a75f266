"""``adam_correction``: a local Adam step as long as All-Reduce's.

Under All-Reduce, Adam divides each step by the root of the second moment of the mean of the
n ranks' gradients. Under Prague each rank's Adam divides by the second moment of its own
gradient, whose noise is n times larger in variance. Where the noise dominates, each rank's
step is then up to sqrt(n) times shorter than All-Reduce's, and averaging the ranks' models
averages the noise but does not lengthen the step (docs/design.md, *Adam's step under group
averaging*).

The optimizer's own moments measure that noise. With ``m`` and ``v`` Adam's bias-corrected
first and second moments, and ``k`` the share of the gradient noise's variance that the
average ``m`` keeps, per coordinate::

    noise  = (v - m**2) / (1 - k)
    v_all  = m**2 - k * noise + noise / n      # the second moment of the n ranks' mean

held between ``v / n`` and ``v``. The corrected step ``m / sqrt(v_all)`` is longer per
coordinate by ``sqrt(v / v_all)``, from 1 to sqrt(n). ``scale`` fits one factor per parameter
group to it (least squares over the group's step), and ``scaled`` takes the step at the
group's learning rate times that factor, with AdamW's decay kept at the user's
``lr * weight_decay``. Every factor is 1 where the gradients are not noisy, so a script whose
batches are large enough to need no correction is left as it is::

    scales = [scale(opt, group, hvd.size()) for group in opt.param_groups]
    with scaled(opt, scales):
        opt.step()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

CORRECTED = (torch.optim.Adam,)
"""The optimizers ``adam_correction`` corrects (not with ``amsgrad``): Adam, and AdamW, its
subclass."""
EVERY = 10
"""Steps between two measurements of a group's factor: the moments it reads change slowly
(Adam's second moment averages over 20 steps or more), and the measure reads every state
tensor several times."""


def corrects(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer``'s steps are corrected: Adam or AdamW, by class."""
    return isinstance(optimizer, CORRECTED)


@torch.no_grad()
def scale(optimizer: torch.optim.Optimizer, group: dict[str, Any], ranks: int) -> float:
    """The factor, from 1 to sqrt(``ranks``), by which ``group``'s next steps are lengthened
    (1 before Adam has state, with ``amsgrad``, and while its first moment is still close
    to a single gradient)."""
    if ranks < 2 or group.get("amsgrad"):
        return 1.0
    beta1, beta2 = group["betas"]
    eps = group["eps"]
    fitted, total = [], []
    for p in group["params"]:
        state = optimizer.state.get(p, {})
        if "exp_avg_sq" not in state:
            continue
        step = float(state["step"])
        kept = _kept_noise(beta1, step)
        if kept >= 0.5:
            return 1.0
        m = state["exp_avg"] / (1 - beta1**step)
        v = state["exp_avg_sq"] / (1 - beta2**step)
        m2 = m * m
        noise = (v - m2).clamp_(min=0) / (1 - kept)
        v_all = torch.minimum(torch.maximum(m2 + noise * (1 / ranks - kept), v / ranks), v)
        root = v.sqrt().add_(eps)
        step_squared = m2 / (root * root)
        fitted.append((step_squared * root / v_all.sqrt().add_(eps)).sum())
        total.append(step_squared.sum())
    if not total:
        return 1.0
    denominator = float(torch.stack(total).sum())
    return float(torch.stack(fitted).sum()) / denominator if denominator > 0 else 1.0


def _kept_noise(beta1: float, step: float) -> float:
    """The share of a gradient's noise variance that Adam's bias-corrected first moment keeps
    after ``step`` steps: 1 at the first, ``(1 - beta1) / (1 + beta1)`` in the long run.

    >>> [round(_kept_noise(0.9, s), 3) for s in (1, 10, 1000)]
    [1.0, 0.109, 0.053]
    """
    decayed = beta1**step
    return (1 - beta1) * (1 + decayed) / ((1 + beta1) * (1 - decayed))


@contextlib.contextmanager
def scaled(optimizer: torch.optim.Optimizer, scales: list[float]) -> Iterator[None]:
    """Run the step inside at each group's learning rate times its factor; AdamW's decay
    per step stays ``lr * weight_decay``. The user's values are back on exit, so a scheduler
    and ``state_dict`` see only them."""
    changed = [
        (group, factor)
        for group, factor in zip(optimizer.param_groups, scales, strict=False)  # added since: 1
        if factor != 1.0
    ]
    saved = [(group, group["lr"], group.get("weight_decay")) for group, _ in changed]
    decoupled = isinstance(optimizer, torch.optim.AdamW)
    try:
        for group, factor in changed:
            group["lr"] = group["lr"] * factor
            if group.get("weight_decay") and (decoupled or group.get("decoupled_weight_decay")):
                group["weight_decay"] = group["weight_decay"] / factor
        yield
    finally:
        for group, lr, decay in saved:
            group["lr"] = lr
            if decay is not None:
                group["weight_decay"] = decay
