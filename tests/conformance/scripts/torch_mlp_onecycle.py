"""Horovod PyTorch: an MLP with BatchNorm, OneCycleLR and gradient accumulation.

scikit-learn's ``make_classification`` data, SGD with momentum and a one-cycle learning rate
stepped every optimizer step, two backward passes per step (``backward_passes_per_step=2``),
BatchNorm's running statistics averaged over workers before each evaluation, and the test
accuracy averaged with ``hvd.allreduce``.

    horovodrun -np 4 -H localhost:4 --gloo python torch_mlp_onecycle.py
"""

# conformance: framework=torch
# conformance: metric=accuracy, tolerance=0.04

import argparse

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from sklearn.datasets import make_classification
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch MLP with OneCycleLR")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=4, help="number of epochs")
parser.add_argument("--max-lr", type=float, default=0.1, help="one-cycle peak LR per worker")
parser.add_argument("--accumulate", type=int, default=2, help="backward passes per step")
parser.add_argument("--seed", type=int, default=3, help="random seed")


class Net(torch.nn.Module):
    def __init__(self, features=20, hidden=64, classes=3):
        super().__init__()
        self.fc1 = torch.nn.Linear(features, hidden)
        self.bn1 = torch.nn.BatchNorm1d(hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.bn2 = torch.nn.BatchNorm1d(hidden)
        self.out = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.fc2(x)))
        return self.out(x)


def datasets(seed):
    x, y = make_classification(n_samples=4000, n_features=20, n_informative=12, n_redundant=4,
                               n_classes=3, class_sep=0.8, random_state=seed)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    return TensorDataset(x[:3072], y[:3072]), TensorDataset(x[3072:], y[3072:])


def average_batchnorm_stats(model):
    """Each worker's BatchNorm saw only its own batches: average the running statistics."""
    stats = [b for name, b in model.named_buffers() if name.endswith(("_mean", "_var"))]
    for buffer, mean in zip(stats, hvd.grouped_allreduce(stats), strict=True):
        buffer.copy_(mean)


def evaluate(model, loader, sampler):
    average_batchnorm_stats(model)
    model.eval()
    correct = torch.tensor(0.0)
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum()
    return hvd.allreduce(correct / len(sampler)).item()


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_set, test_set = datasets(args.seed)
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler,
                              drop_last=True)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                      shuffle=False)
    test_loader = DataLoader(test_set, batch_size=232, sampler=test_sampler)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.max_lr, momentum=0.9,
                                weight_decay=1e-4)
    # Horovod: accumulate gradients locally over several backward passes before averaging.
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         backward_passes_per_step=args.accumulate)
    steps_per_epoch = len(train_loader) // args.accumulate
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.max_lr * hvd.size(), epochs=args.epochs,
        steps_per_epoch=steps_per_epoch,
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(args.epochs):
        model.train()
        train_sampler.set_epoch(epoch)
        optimizer.zero_grad()
        for i, (x, y) in enumerate(train_loader):
            loss = F.cross_entropy(model(x), y) / args.accumulate
            loss.backward()
            if (i + 1) % args.accumulate == 0:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                harness.slow_step()
        accuracy = evaluate(model, test_loader, test_sampler)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: lr {scheduler.get_last_lr()[0]:.4f} "
                  f"test accuracy {accuracy:.4f}")

    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
