"""A plain Horovod PyTorch script with uneven shards and ``hvd.join()`` (Horovod's answer to
uneven data), two epochs, each ended by ``join``, then a metric all-reduce. Run it with and
without ``--prague``: each rank reports its steps, what ``join`` returned, a hash of its model
after each ``join``, and, under the flag, its Prague step counts.

    horovodrun -np 4 [--prague] python join_uneven.py
"""

from __future__ import annotations

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from _report import digest, prague_stats, report

BATCH = 8
EPOCHS = 2


def main() -> None:
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    x = torch.randn(512, 16)
    y = (x[:, :4].sum(dim=1) > 0).long()
    # Uneven shards: rank r holds 48 + 32 r samples (6, 10, 14, 18 batches on 4 ranks).
    start = sum(48 + 32 * r for r in range(hvd.rank()))
    shard = slice(start, start + 48 + 32 * hvd.rank())
    xs, ys = x[shard], y[shard]

    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.5)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    steps, joined, after_join = 0, [], []
    for epoch in range(EPOCHS):
        model.train()
        for i in range(0, len(xs), BATCH):
            optimizer.zero_grad()
            F.cross_entropy(model(xs[i : i + BATCH]), ys[i : i + BATCH]).backward()
            optimizer.step()
            steps += 1
        joined.append(hvd.join())
        after_join.append(digest(model.state_dict().values()))
        model.eval()
        with torch.no_grad():
            loss = F.cross_entropy(model(x), y)
        loss = hvd.allreduce(loss, name=f"val_loss.{epoch}").item()
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss:.4f}", flush=True)

    stats = prague_stats(hvd)
    report({"steps": steps, "joined": joined, "after_join": after_join, "stats": stats})


if __name__ == "__main__":
    main()
