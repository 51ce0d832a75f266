"""Horovod PyTorch: workers with different amounts of data, finished with ``hvd.join()``.

Each worker trains on its own shard, and the shards differ in size (rank r holds more
batches than rank r - 1), so workers run out of data at different steps. Each worker's loop
ends at the end of its own data and calls ``hvd.join()``; the others keep training meanwhile.
After each epoch the model and optimizer state of the worker that joined last are broadcast
to all, and at the end the test accuracy is averaged with ``hvd.allreduce``.

    horovodrun -np 4 -H localhost:4 --gloo python torch_join_uneven.py
"""

# conformance: framework=torch
# conformance: metric=accuracy, tolerance=0.05

import argparse

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser(description="PyTorch uneven data with hvd.join")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--base-batches", type=int, default=8, help="batches of rank 0 per epoch")
parser.add_argument("--extra-batches", type=int, default=3, help="batches more per rank")
parser.add_argument("--epochs", type=int, default=2, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.05, help="learning rate for one worker")
parser.add_argument("--seed", type=int, default=19, help="random seed")


def generate(seed, n, features=10, classes=3):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, classes, generator=g)
    x = torch.randn(n, features, generator=g)
    y = (x @ w + 0.3 * torch.randn(n, classes, generator=g)).argmax(dim=1)
    return x, y


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    # Rank r's shard: base + r * extra batches, cut from one generated set.
    sizes = [(args.base_batches + r * args.extra_batches) * args.batch_size
             for r in range(hvd.size())]
    x, y = generate(args.seed, sum(sizes) + 1024)
    start = sum(sizes[: hvd.rank()])
    end = start + sizes[hvd.rank()]
    shard = TensorDataset(x[start:end], y[start:end])
    loader = DataLoader(shard, batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed + hvd.rank()))
    test_x, test_y = x[-1024:], y[-1024:]
    test_x, test_y = test_x[hvd.rank() :: hvd.size()], test_y[hvd.rank() :: hvd.size()]

    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    steps = 0
    for epoch in range(args.epochs):
        model.train()
        for data, target in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(data), target).backward()
            optimizer.step()
            harness.slow_step()
            steps += 1
        # This worker is out of data for the epoch: wait for the others to finish theirs.
        last = hvd.join()
        # The workers that joined early missed the last updates: take the last one's state.
        hvd.broadcast_parameters(model.state_dict(), root_rank=last)
        hvd.broadcast_optimizer_state(optimizer, root_rank=last)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: rank 0 took {steps} steps; rank {last} joined last")

    model.eval()
    with torch.no_grad():
        correct = (model(test_x).argmax(dim=1) == test_y).float().mean()
    # Named, as in Horovod's examples: the workers took different numbers of steps, so the
    # names Horovod makes up for unnamed collectives (from each process's count of
    # collectives) differ between them, and an unnamed allreduce here never completes.
    accuracy = hvd.allreduce(correct, name="avg_accuracy").item()
    if hvd.rank() == 0:
        print(f"test accuracy {accuracy:.4f}")
    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
