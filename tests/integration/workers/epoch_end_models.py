"""A plain Horovod PyTorch script in Horovod's examples' shape: epochs over a
``DistributedSampler``, then a test on every rank's part of the test set and an all-reduce of
the accuracy; rank 0 also runs, alone, an evaluation pass over its training part.

    epoch_end_models.py

Each rank notes a digest of its model (parameters and BatchNorm statistics) right after each
epoch's loop, before any collective, and reports the digests with what the all-reduced test
said. Steps sleep 10 ms, 5x that with probability 1/4, so that under ``--prague`` the ranks'
group histories diverge.
"""

from __future__ import annotations

import random
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from _report import digest, report
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

hvd.init()
torch.manual_seed(0)
x = torch.randn(768, 8)
y = (x[:, 0] > 0).long()
train_set, test_set = TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
loader = DataLoader(train_set, batch_size=16, sampler=sampler)
test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank())
test_loader = DataLoader(test_set, batch_size=64, sampler=test_sampler)

model = torch.nn.Sequential(
    torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

slow = random.Random(hvd.rank())
digests, accuracies = [], []
for epoch in range(3):
    sampler.set_epoch(epoch)
    model.train()
    for xb, yb in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        optimizer.step()
        time.sleep(0.01 * (5 if slow.random() < 0.25 else 1))
    digests.append(digest(model.state_dict().values()))
    model.eval()
    with torch.no_grad():
        if hvd.rank() == 0:  # rank 0 alone: its training part, for a log line
            sum(F.cross_entropy(model(xb), yb).item() for xb, yb in loader)
        correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in test_loader)
    accuracies.append(hvd.allreduce(torch.tensor(correct / len(test_sampler))).item())

report({"digests": digests, "accuracies": accuracies, "final": digest(model.state_dict().values())})
