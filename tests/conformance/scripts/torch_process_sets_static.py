"""Horovod PyTorch: the script's own process sets, given to ``hvd.init``.

``hvd.init(process_sets=[hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])])``. Training
averages gradients over all workers as usual; after every step each pair of workers compares
notes over its own set with unnamed collectives (the pair's mean loss, the pair's losses
gathered, a value broadcast from the pair's first worker), each checked against what it means.

    horovodrun -np 4 -H localhost:4 --gloo python torch_process_sets_static.py
"""

# conformance: framework=torch
# conformance: prague-args=--prague-staleness 0
# conformance: long=test_script_process_sets runs static sets given to init with --prague
# conformance: metric=accuracy, tolerance=0.04
# With blocking averages (staleness 0), a pair's collective right after a step meets a partner
# that may still wait in a group average with it: the path where members must settle first.

import argparse

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch with static process sets")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=3, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.05, help="learning rate for one worker")
parser.add_argument("--check-every", type=int, default=1, help="steps between pair checks")
parser.add_argument("--seed", type=int, default=29, help="random seed")


def generate(seed, n=2560, features=16, classes=4):
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(features, 24, generator=g)
    w2 = torch.randn(24, classes, generator=g)
    x = torch.randn(n, features, generator=g)
    y = (torch.relu(x @ w1) @ w2).argmax(dim=1)
    return TensorDataset(x[:2048], y[:2048]), TensorDataset(x[2048:], y[2048:])


def expect(condition, what):
    if not condition:
        raise RuntimeError(f"rank {hvd.rank()}: {what}")


def pair_check(pair, members, step, loss):
    me = hvd.rank()
    mean = hvd.allreduce(torch.tensor([float(me), loss]), process_set=pair)
    expect(abs(mean[0].item() - sum(members) / 2) < 1e-6, f"pair allreduce {mean}")
    rows = hvd.allgather(torch.tensor([[float(me), float(step), loss]]), process_set=pair)
    expect(rows[:, 0].tolist() == [float(r) for r in members], f"pair allgather {rows}")
    expect(torch.all(rows[:, 1] == step), f"pair allgather steps {rows[:, 1]}")
    expect(abs(rows[:, 2].mean().item() - mean[1].item()) < 1e-5, "pair mean loss mismatch")
    first = hvd.broadcast(torch.tensor([float(me * 100 + step)]), root_rank=members[0],
                          process_set=pair)
    expect(first.item() == members[0] * 100 + step, f"pair broadcast {first}")
    handle = hvd.allreduce_async(torch.tensor([1.0]), op=hvd.Sum, process_set=pair)
    expect(hvd.synchronize(handle).item() == 2.0, "pair allreduce_async")
    return mean[1].item()


def evaluate(model, loader, sampler):
    model.eval()
    correct = torch.tensor(0.0)
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum()
    return hvd.allreduce(correct / len(sampler)).item()


def main():
    args = parser.parse_args()
    pairs = [hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])]
    hvd.init(process_sets=pairs)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    if hvd.size() != 4:
        raise SystemExit("this script pairs up exactly 4 workers")
    pair, members = (pairs[0], [0, 1]) if hvd.rank() < 2 else (pairs[1], [2, 3])
    expect(pair.included() and pair.size() == 2 and pair.rank() == hvd.rank() % 2,
           f"process set {pair}")

    train_set, test_set = generate(args.seed)
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                      shuffle=False)
    test_loader = DataLoader(test_set, batch_size=128, sampler=test_sampler)

    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
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
                pair_loss = pair_check(pair, members, step, loss.item())
        accuracy = evaluate(model, test_loader, test_sampler)
        if pair.rank() == 0:
            print(f"epoch {epoch}: pair {members} loss {pair_loss:.4f}, "
                  f"test accuracy {accuracy:.4f}")

    pair_check(pair, members, step + 1, 0.0)
    accuracy = evaluate(model, test_loader, test_sampler)
    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
