"""Horovod PyTorch: a classifier that uses every kind of Horovod collective while it trains.

Every few steps, and once more at the end, the script runs each collective without a name,
as scripts usually do: ``allgather`` of the workers' losses, ``allreduce`` of a metric,
``broadcast`` from rank 0, ``grouped_allreduce``, ``alltoall``, ``reducescatter``, their
``_async`` forms with ``hvd.synchronize``, and ``broadcast_object`` / ``allgather_object``.
Each result is checked against what the collective means, so a wrong result stops the script.

    horovodrun -np 4 -H localhost:4 --gloo python torch_collectives.py
"""

# conformance: framework=torch
# conformance: metric=accuracy, tolerance=0.04

import argparse

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch collectives during training")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=3, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.02, help="learning rate for one worker")
parser.add_argument("--check-every", type=int, default=5, help="steps between collective checks")
parser.add_argument("--seed", type=int, default=42, help="random seed")


def generate(seed, n=3072, features=16, classes=4):
    """Gaussian inputs labelled by a fixed random two-layer teacher network."""
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(features, 32, generator=g)
    w2 = torch.randn(32, classes, generator=g)
    x = torch.randn(n, features, generator=g)
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    split = n * 3 // 4
    return TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])


def expect(condition, what):
    if not condition:
        raise RuntimeError(f"rank {hvd.rank()}: {what}")


def check_collectives(step, loss):
    """Run each collective once, unnamed, and check its result against its meaning."""
    rank, size = hvd.rank(), hvd.size()
    ranks = torch.arange(size, dtype=torch.float32)

    # Gather every worker's (rank, step, loss): one row per worker, in rank order.
    sent = torch.tensor([[float(rank), float(step), loss]])
    rows = hvd.allgather(sent)
    expect(rows.shape == (size, 3), f"allgather gave shape {tuple(rows.shape)}")
    expect(torch.equal(rows[:, 0], ranks), f"allgather rows out of rank order: {rows[:, 0]}")
    expect(torch.all(rows[:, 1] == step), f"allgather mixed steps: {rows[:, 1]}")
    expect(torch.equal(rows[rank], sent[0]), "allgather changed this worker's row")

    # Allgather with a different number of rows per worker.
    uneven = hvd.allgather(torch.full((rank + 1, 2), float(rank)))
    expect(uneven.shape[0] == size * (size + 1) // 2, f"uneven allgather: {tuple(uneven.shape)}")
    expect(torch.equal(uneven[:, 0], torch.repeat_interleave(ranks, torch.arange(1, size + 1))),
           "uneven allgather rows")

    # A metric averaged, and summed.
    mean = hvd.allreduce(torch.tensor(float(rank + step)))
    expect(abs(mean.item() - (step + (size - 1) / 2)) < 1e-5, f"allreduce average {mean}")
    total = hvd.allreduce(torch.tensor([float(rank), 1.0]), op=hvd.Sum)
    expect(torch.equal(total, torch.tensor([size * (size - 1) / 2, float(size)])),
           f"allreduce sum {total}")
    inplace = torch.tensor([2.0 * rank])
    hvd.allreduce_(inplace, op=hvd.Sum)
    expect(inplace.item() == size * (size - 1), f"allreduce_ {inplace}")

    # Broadcast from rank 0, out of place and in place.
    got = hvd.broadcast(torch.full((3,), float(rank * 10 + step)), root_rank=0)
    expect(torch.all(got == step), f"broadcast gave {got}")
    mine = torch.full((2,), float(rank + 1))
    hvd.broadcast_(mine, root_rank=size - 1)
    expect(torch.all(mine == size), f"broadcast_ gave {mine}")

    # Two tensors reduced as one group.
    a, b = hvd.grouped_allreduce([torch.full((2,), float(rank)), torch.arange(3.0) * rank],
                                 op=hvd.Sum)
    ranks_sum = size * (size - 1) / 2
    expect(torch.all(a == ranks_sum), f"grouped_allreduce first tensor {a}")
    expect(torch.equal(b, torch.arange(3.0) * ranks_sum), f"grouped_allreduce second {b}")

    # All-to-all: row j goes to worker j, so worker r receives rank*100 + r from each rank.
    to_send = torch.tensor([[100.0 * rank + j] for j in range(size)])
    received = hvd.alltoall(to_send)
    expect(torch.equal(received[:, 0], 100 * ranks + rank), f"alltoall gave {received[:, 0]}")
    # ... and with explicit splits: worker j gets j + 1 rows.
    splits = torch.arange(1, size + 1, dtype=torch.int32)
    payload = torch.full((int(splits.sum()),), float(rank))
    got, received_splits = hvd.alltoall(payload, splits=splits)
    expect(torch.equal(got, ranks.repeat_interleave(rank + 1)), f"alltoall with splits {got}")
    expect(torch.equal(received_splits, torch.full((size,), rank + 1, dtype=torch.int32)),
           f"alltoall received splits {received_splits}")

    # Reduce-scatter: the sum over workers, two rows to each.
    full = torch.arange(2.0 * size) + rank
    part = hvd.reducescatter(full, op=hvd.Sum)
    want = (torch.arange(2.0 * size) * size + ranks_sum)[2 * rank : 2 * rank + 2]
    expect(torch.equal(part, want), f"reducescatter gave {part}, expected {want}")

    # The same collectives started together, then waited for.
    handles = [
        hvd.allreduce_async(torch.tensor([float(rank)]), op=hvd.Sum),
        hvd.allgather_async(torch.tensor([[float(rank)]])),
        hvd.broadcast_async(torch.tensor([float(rank + 7)]), root_rank=0),
        hvd.alltoall_async(to_send),
        hvd.reducescatter_async(full, op=hvd.Sum),
        hvd.grouped_allreduce_async([torch.ones(1), torch.full((2,), float(rank))], op=hvd.Sum),
    ]
    summed, gathered, cast, swapped, scattered, grouped = [hvd.synchronize(h) for h in handles]
    expect(summed.item() == ranks_sum, f"allreduce_async {summed}")
    expect(torch.equal(gathered[:, 0], ranks), f"allgather_async {gathered}")
    expect(cast.item() == 7.0, f"broadcast_async {cast}")
    swapped = swapped[0] if isinstance(swapped, tuple) else swapped
    expect(torch.equal(swapped[:, 0], 100 * ranks + rank), f"alltoall_async {swapped}")
    expect(torch.equal(scattered, want), f"reducescatter_async {scattered}")
    expect(grouped[0].item() == size and torch.all(grouped[1] == ranks_sum),
           f"grouped_allreduce_async {grouped}")

    # Python objects.
    config = hvd.broadcast_object({"step": step, "from": rank, "tag": "lr-schedule"}, root_rank=0)
    expect(config == {"step": step, "from": 0, "tag": "lr-schedule"}, f"broadcast_object {config}")
    everyone = hvd.allgather_object((rank, step, f"worker-{rank}"))
    expect(everyone == [(r, step, f"worker-{r}") for r in range(size)],
           f"allgather_object {everyone}")
    return rows[:, 2]


def evaluate(model, loader, sampler):
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

    train_set, test_set = generate(args.seed)
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                      shuffle=False)
    test_loader = DataLoader(test_set, batch_size=256, sampler=test_sampler)

    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    step = 0
    for epoch in range(args.epochs):
        model.train()
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            harness.slow_step()
            step += 1
            if step % args.check_every == 0:
                losses = check_collectives(step, loss.item())
                if hvd.rank() == 0 and step % (4 * args.check_every) == 0:
                    rounded = [round(v, 3) for v in losses.tolist()]
                    print(f"epoch {epoch} step {step}: losses {rounded}")
        accuracy = evaluate(model, test_loader, test_sampler)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test accuracy {accuracy:.4f}")

    check_collectives(step + 1, 0.0)
    accuracy = evaluate(model, test_loader, test_sampler)
    if hvd.rank() == 0:
        print(f"final test accuracy {accuracy:.4f}")
    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
