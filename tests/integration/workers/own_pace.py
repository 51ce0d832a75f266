"""A plain Horovod PyTorch script, one rank of it on a slow machine: epochs over a
``DistributedSampler``, a ``OneCycleLR`` stepped per batch, the full preamble, a test whose
accuracy is all-reduced after each epoch.

    own_pace.py [--metric-each-batch] [--leave-early]

The last rank computes four times slower than the others (a sleep per sample stands in for
its compute, so a larger batch takes longer). With ``--metric-each-batch`` every batch's loss
is also averaged over the ranks by an unnamed ``hvd.allreduce``, as a running training
metric is in Horovod's ImageNet example: the fast ranks then wait there for the slow one.
With ``--leave-early`` the slow rank leaves the second epoch after 3 batches, and every rank
calls ``hvd.join()`` after each epoch, as a script with uneven data does.
Each rank reports, per epoch, the indices of the samples it trained on and its number of
batches, its final model's digest, and the seconds from the first epoch to the end of the
last.
"""

from __future__ import annotations

import sys
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from _report import digest, report
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

EPOCHS = 5


class Points(Dataset):
    """Points on a line, labelled by side; each item also gives its index."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x[:, 0] + 0.5 * self.x[:, 1] > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[i], self.y[i], i


hvd.init()
torch.manual_seed(0)
train_set, test_set = Points(1000, seed=1), Points(256, seed=2)
sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
loader = DataLoader(train_set, batch_size=16, sampler=sampler)
test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank())
test_loader = DataLoader(test_set, batch_size=64, sampler=test_sampler)

model = torch.nn.Sequential(
    torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, max_lr=0.1, epochs=EPOCHS, steps_per_epoch=len(loader)
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

per_sample_s = 0.0012 if hvd.rank() == hvd.size() - 1 else 0.0003
seen, batches, accuracies = [], [], []
began = time.perf_counter()
for epoch in range(EPOCHS):
    sampler.set_epoch(epoch)
    model.train()
    mine, count = [], 0
    for xb, yb, index in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        scheduler.step()
        time.sleep(per_sample_s * len(xb))
        if "--metric-each-batch" in sys.argv:
            hvd.allreduce(loss.detach())
        mine += index.tolist()
        count += 1
        if (
            "--leave-early" in sys.argv
            and epoch == 1
            and hvd.rank() == hvd.size() - 1
            and count == 3
        ):
            break
    if "--leave-early" in sys.argv:
        hvd.join()
    seen.append(mine)
    batches.append(count)
    model.eval()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y, _ in test_loader)
    accuracies.append(hvd.allreduce(torch.tensor(correct / len(test_sampler))).item())

report(
    {
        "train_s": time.perf_counter() - began,
        "seen": seen,
        "batches": batches,
        "len_loader": len(loader),
        "accuracies": accuracies,
        "final": digest(model.state_dict().values()),
    }
)
