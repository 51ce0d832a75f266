"""The benchmark's PyTorch rank: stock ``horovod.torch`` and its ``DistributedOptimizer``."""

from __future__ import annotations

import hashlib

import horovod.torch as hvd
import numpy as np
import torch
from torch import nn

from horovod_prague.bench.trainer import CONV_LAYERS, Trainer
from horovod_prague.common.overlap import wait_until


def cnn(params: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Unflatten(1, (1, 40))]
    channels, length = 1, 40
    for out, kernel in CONV_LAYERS:
        layers += [nn.Conv1d(channels, out, kernel, stride=2, padding=kernel // 2), nn.ReLU()]
        channels, length = out, (length + 1) // 2
    layers += [nn.Flatten(), nn.Linear(channels * length, 10)]
    model = nn.Sequential(*layers)
    model.register_parameter("communicated", nn.Parameter(torch.zeros(params)))
    return model


class FrameworkTrainer(Trainer):
    hvd = hvd
    prague_module = "horovod_prague.torch"

    def __init__(
        self,
        data: dict[str, np.ndarray],
        params: int,
        lr: float,
        seed: int,
        batch: int,
        broadcast: bool = True,
    ) -> None:
        """``broadcast=False`` for a worker that joins a running elastic job: no other rank
        broadcasts then, and the elastic state's sync gives it rank 0's model."""
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        torch.manual_seed(seed)
        torch.set_num_threads(1)
        tensors = {name: torch.from_numpy(array) for name, array in data.items()}
        self.x, self.y = tensors["x"], tensors["y"]
        self.x_test, self.y_test = tensors["x_test"], tensors["y_test"]
        self.model = cnn(params)
        opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.opt = hvd.DistributedOptimizer(opt, named_parameters=self.model.named_parameters())
        if broadcast:
            hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        self.loss_fn = nn.CrossEntropyLoss()
        self.communicated = dict(self.model.named_parameters())["communicated"]

    def step(self, batch: np.ndarray) -> None:
        index = torch.from_numpy(batch)
        self.opt.zero_grad()
        loss = self.loss_fn(self.model(self.x[index]), self.y[index])
        (loss + 0.0 * self.communicated.sum()).backward()
        if self.poll_wait:
            self._wait_without_spinning()
        self.opt.step()

    def _wait_without_spinning(self) -> None:
        """Wait for the all-reduces the backward pass started, sleeping between polls; the
        ``step`` that follows then finds them done. Horovod's ``synchronize`` spins, which on
        ranks that share cores takes CPU from the ranks doing the work."""
        for handle, _ in getattr(self.opt, "_handles", {}).values():
            if handle is not None:
                wait_until(lambda h=handle: hvd.poll(h), 600, lambda: "all-reduce timed out")

    def accuracy(self) -> float:
        with torch.no_grad():
            return (self.model(self.x_test).argmax(1) == self.y_test).float().mean().item()

    def digest(self) -> str:
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(p.detach().numpy().tobytes())
        return h.hexdigest()

    def barrier(self) -> None:
        hvd.barrier()

    def end(self) -> None:
        hvd.allreduce(torch.tensor(0.0), name="bench.end")
