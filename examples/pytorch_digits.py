"""Horovod PyTorch example: an MLP with BatchNorm on scikit-learn's digits.

A plain Horovod script; it has no Prague code. Run it as stock Horovod, or with Prague:

    horovodrun -np 4 -H localhost:4 --gloo python examples/pytorch_digits.py
    horovodrun -np 4 -H localhost:4 --gloo --prague smart python examples/pytorch_digits.py

On 2 CPU cores it reaches a test accuracy of 0.93 or more in 20 epochs, in well under a minute
either way (docs/benchmarks.md has measured runs).
"""

import argparse

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch digits example")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
parser.add_argument("--epochs", type=int, default=20, help="number of epochs to train")
parser.add_argument("--lr", type=float, default=0.05, help="learning rate per rank")
parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum")
parser.add_argument("--seed", type=int, default=42, help="random seed")
parser.add_argument("--log-interval", type=int, default=5, help="epochs between log lines")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.bn1 = torch.nn.BatchNorm1d(128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.bn1(self.fc1(x)))), dim=1)


def datasets(seed):
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data / 16.0, digits.target, test_size=0.25, random_state=seed
    )

    def as_dataset(x, y):
        return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y))

    return as_dataset(x_train, y_train), as_dataset(x_test, y_test)


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def train(epoch, model, optimizer, loader, sampler):
    model.train()
    sampler.set_epoch(epoch)
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
    return loss.item()


def test(model, loader, sampler):
    model.eval()
    loss, correct = 0.0, 0.0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    # Every rank tests on its shard of the test set; the averages are over all ranks.
    loss = metric_average(loss / len(sampler), "avg_loss")
    accuracy = metric_average(correct / len(sampler), "avg_accuracy")
    return loss, accuracy


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_set, test_set = datasets(args.seed)
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = DataLoader(test_set, batch_size=256, sampler=test_sampler)

    model = Net()
    # Horovod's rule: scale the learning rate by the number of ranks.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(1, args.epochs + 1):
        train_loss = train(epoch, model, optimizer, train_loader, train_sampler)
        test_loss, accuracy = test(model, test_loader, test_sampler)
        if hvd.rank() == 0 and (epoch % args.log_interval == 0 or epoch == args.epochs):
            print(
                f"epoch {epoch}: train loss {train_loss:.4f}, "
                f"test loss {test_loss:.4f}, test accuracy {accuracy:.4f}",
                flush=True,
            )
    if hvd.rank() == 0:
        print(f"final test accuracy {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
