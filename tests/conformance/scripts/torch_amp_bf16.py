"""Horovod PyTorch: mixed precision on the CPU, a small CNN on scikit-learn's digits.

The forward pass runs under ``torch.autocast("cpu", dtype=torch.bfloat16)`` and the loss goes
through a ``GradScaler`` the way Horovod's MNIST example does it with CUDA: scaled backward,
``optimizer.synchronize()``, ``scaler.unscale_``, gradient clipping, then ``scaler.step`` under
``optimizer.skip_synchronize()`` and ``scaler.update()``.

    horovodrun -np 4 -H localhost:4 --gloo python torch_amp_bf16.py
"""

# conformance: framework=torch
# conformance: metric=accuracy, tolerance=0.04

import argparse

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch bfloat16 autocast on digits")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=4, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.01, help="learning rate for one worker")
parser.add_argument("--seed", type=int, default=5, help="random seed")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def datasets(seed):
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    return TensorDataset(x[:1408], y[:1408]), TensorDataset(x[1408:], y[1408:])


def make_scaler():
    # A CPU GradScaler where this torch has one; bfloat16 rarely needs it, but scripts written
    # for CUDA float16 carry it along.
    try:
        return torch.amp.GradScaler("cpu", init_scale=2.0**10)
    except (AttributeError, TypeError):
        return None


def evaluate(model, loader, sampler):
    model.eval()
    correct = torch.tensor(0.0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
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
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                      shuffle=False)
    test_loader = DataLoader(test_set, batch_size=128, sampler=test_sampler)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    scaler = make_scaler()

    for epoch in range(args.epochs):
        model.train()
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                # Horovod: make sure all async allreduce ops are done before unscaling.
                optimizer.synchronize()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                with optimizer.skip_synchronize():
                    scaler.step(optimizer)
                scaler.update()
            harness.slow_step()
        accuracy = evaluate(model, test_loader, test_sampler)
        if hvd.rank() == 0:
            scale = scaler.get_scale() if scaler is not None else None
            print(f"epoch {epoch}: loss {loss.item():.4f} scale {scale} "
                  f"test accuracy {accuracy:.4f}")

    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
