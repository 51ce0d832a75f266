"""The benchmark's PyTorch rank: stock ``horovod.torch`` and its ``DistributedOptimizer``."""

from __future__ import annotations

import hashlib
import time

import horovod.torch as hvd
import numpy as np
import torch
import torch.nn.functional as F

from horovod_prague.bench.torch_models import build, lr_schedule
from horovod_prague.bench.trainer import Trainer
from horovod_prague.common.overlap import wait_until


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
        workload: str = "mnist1d",
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
        self.workload = workload
        self.model, opt = build(workload, params, lr)
        self.schedule: torch.optim.lr_scheduler.LRScheduler | None = None
        self.opt = hvd.DistributedOptimizer(opt, named_parameters=self.model.named_parameters())
        if broadcast:
            hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        self.communicated = dict(self.model.named_parameters())["communicated"]

    def begin(self, steps: int) -> None:
        self.schedule = lr_schedule(self.workload, self.opt, steps)

    def step(self, batch: np.ndarray, weight: float = 1.0) -> float:
        began = time.perf_counter()
        index = torch.from_numpy(batch)
        self.opt.zero_grad()
        loss = weight * self._loss(self.model(self.x[index]), self.y[index])
        (loss + 0.0 * self.communicated.sum()).backward()
        computed = time.perf_counter() - began
        if self.poll_wait:
            self._wait_without_spinning()
        self.opt.step()
        if self.schedule is not None:
            self.schedule.step()
        return computed

    @staticmethod
    def _loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    def _wait_without_spinning(self) -> None:
        """Wait for the all-reduces the backward pass started, sleeping between polls; the
        ``step`` that follows then finds them done. Horovod's ``synchronize`` spins, which on
        ranks that share cores takes CPU from the ranks doing the work."""
        for handle, _ in getattr(self.opt, "_handles", {}).values():
            if handle is not None:
                wait_until(lambda h=handle: hvd.poll(h), 600, lambda: "all-reduce timed out")

    def test(self) -> tuple[float, float]:
        self.model.eval()
        with torch.no_grad():
            logits = self.model(self.x_test)
        self.model.train()
        correct = (logits.argmax(-1) == self.y_test).float().mean().item()
        return correct, self._loss(logits, self.y_test).item()

    def digest(self) -> str:
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(p.detach().numpy().tobytes())
        return h.hexdigest()

    def barrier(self) -> None:
        hvd.barrier()

    def end(self) -> None:
        hvd.allreduce(torch.tensor(0.0), name="bench.end")
