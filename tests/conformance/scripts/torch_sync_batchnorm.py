"""Horovod PyTorch: ``hvd.SyncBatchNorm``, batch statistics computed over all workers.

A small CNN whose BatchNorm layers are ``hvd.SyncBatchNorm``, trained on scikit-learn's digits
with the model on the CPU. Horovod's SyncBatchNorm supports GPU tensors only in training mode,
so stock Horovod stops at the first training step with
``ValueError: SyncBatchNorm expected input tensor to be on GPU``; the script is written as a
user would write it all the same.

    horovodrun -np 4 -H localhost:4 --gloo python torch_sync_batchnorm.py
"""

# conformance: framework=torch
# conformance: stock-fails=GPU only: "SyncBatchNorm expected input tensor to be on GPU"

import argparse

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch SyncBatchNorm on digits")
parser.add_argument("--batch-size", type=int, default=16, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=4, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.02, help="learning rate for one worker")
parser.add_argument("--seed", type=int, default=31, help="random seed")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.bn = hvd.SyncBatchNorm(16)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target)
    train_set, test_set = TensorDataset(x[:1408], y[:1408]), TensorDataset(x[1408:], y[1408:])
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                      shuffle=False)
    test_loader = DataLoader(test_set, batch_size=128, sampler=test_sampler)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(args.epochs):
        model.train()
        train_sampler.set_epoch(epoch)
        for data, target in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(data), target).backward()
            optimizer.step()
            harness.slow_step()
        model.eval()
        correct = torch.tensor(0.0)
        with torch.no_grad():
            for data, target in test_loader:
                correct += (model(data).argmax(dim=1) == target).sum()
        accuracy = hvd.allreduce(correct / len(test_sampler)).item()
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test accuracy {accuracy:.4f}")

    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
