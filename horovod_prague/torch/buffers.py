"""Find the models an optimizer trains, to average their buffers with their parameters.

An optimizer knows its parameters but not the modules that hold them, nor their buffers
(BatchNorm's running statistics). ``ModelFinder`` watches forward passes until the first
optimizer step: every outermost module run in that time that holds one of the optimizer's
parameters is a model it trains.

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    >>> finder = ModelFinder(net.parameters())
    >>> _ = net(torch.ones(3, 2))
    >>> [name for name, _ in finder.models()[0].named_buffers()]
    ['1.running_mean', '1.running_var', '1.num_batches_tracked']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_pre_hook


class ModelFinder:
    """Records the modules run in forward passes until ``models()`` is first called."""

    def __init__(self, params: Iterable[torch.Tensor]) -> None:
        self._param_ids = {id(p) for p in params}
        self._seen: dict[int, torch.nn.Module] = {}
        self._models: list[torch.nn.Module] | None = None
        self._handle = register_module_forward_pre_hook(self._record)

    def _record(self, module: torch.nn.Module, _inputs: Any) -> None:
        self._seen.setdefault(id(module), module)

    def models(self) -> list[torch.nn.Module]:
        """The outermost recorded modules that hold a watched parameter, in order of first run.

        The first call stops the recording and fixes the answer.
        """
        if self._models is None:
            self._handle.remove()
            seen = list(self._seen.values())
            inner = {id(sub) for m in seen for sub in m.modules() if sub is not m}
            self._models = [
                m
                for m in seen
                if id(m) not in inner and any(id(p) in self._param_ids for p in m.parameters())
            ]
            self._seen.clear()
        return self._models
