"""Horovod PyTorch: gradients combined with Adasum instead of averaged.

A small regression MLP whose ``DistributedOptimizer`` uses ``op=hvd.Adasum``, as Horovod's
examples do with ``--use-adasum`` (the learning rate is not scaled by the number of workers).

    horovodrun -np 4 -H localhost:4 --gloo python torch_adasum.py
"""

# conformance: framework=torch
# conformance: stock-fails=Adasum needs an MPI build, not Gloo: "No Adasum operation enabled"
# conformance: prague-warns=the model is averaged, not gradients: "is ignored under Prague"

import argparse

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch Adasum regression")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=4, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.02, help="learning rate")
parser.add_argument("--seed", type=int, default=13, help="random seed")


def generate(seed, n=2560, features=8):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, 1, generator=g)
    x = torch.randn(n, features, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x[:2048], y[:2048]), TensorDataset(x[2048:], y[2048:])


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_set, test_set = generate(args.seed)
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                      shuffle=False)
    test_loader = DataLoader(test_set, batch_size=128, sampler=test_sampler)

    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    # By default, Adasum doesn't need scaling up the learning rate.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         op=hvd.Adasum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(args.epochs):
        model.train()
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            harness.slow_step()
        model.eval()
        total = torch.tensor(0.0)
        with torch.no_grad():
            for x, y in test_loader:
                total += F.mse_loss(model(x), y, reduction="sum")
        test_loss = hvd.allreduce(total / len(test_sampler)).item()
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test mse {test_loss:.4f}")

    harness.report(model, test_loss)


if __name__ == "__main__":
    main()
