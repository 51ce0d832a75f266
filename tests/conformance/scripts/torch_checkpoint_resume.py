"""Horovod PyTorch: checkpoint on rank 0, then resume from it as a restarted job does.

Rank 0 saves the model and optimizer ``state_dict`` with ``torch.save`` after each epoch's
evaluation. Half-way through, the job "restarts" in place: a fresh model and optimizer are
built, the epoch to resume from is broadcast from rank 0, rank 0 loads the checkpoint, and
``hvd.broadcast_parameters`` / ``hvd.broadcast_optimizer_state`` hand it to every worker, as
Horovod's ImageNet example does; training then goes on to the end.

    horovodrun -np 4 -H localhost:4 --gloo python torch_checkpoint_resume.py
"""

# conformance: framework=torch
# conformance: metric=accuracy, tolerance=0.04

import argparse
import os
import shutil
import tempfile

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch checkpoint and resume")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=4, help="number of epochs in all")
parser.add_argument("--restart-after", type=int, default=2, help="epochs before the restart")
parser.add_argument("--lr", type=float, default=0.02, help="learning rate for one worker")
parser.add_argument("--seed", type=int, default=17, help="random seed")
parser.add_argument("--checkpoint-dir", default=None, help="default: a new temporary folder")


def generate(seed, n=2560, features=12, classes=3):
    g = torch.Generator().manual_seed(seed)
    centers = 1.5 * torch.randn(classes, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, features, generator=g)
    return TensorDataset(x[:2048], y[:2048]), TensorDataset(x[2048:], y[2048:])


def build(args):
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 48), torch.nn.ReLU(), torch.nn.Linear(48, 48), torch.nn.ReLU(),
        torch.nn.Linear(48, 3),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9,
                                nesterov=True)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    return model, optimizer


def evaluate(model, loader, sampler):
    model.eval()
    correct = torch.tensor(0.0)
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum()
    return hvd.allreduce(correct / len(sampler)).item()


def train(model, optimizer, loader, sampler, epochs, test_loader, test_sampler, checkpoint):
    accuracy = None
    for epoch in epochs:
        model.train()
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            harness.slow_step()
        accuracy = evaluate(model, test_loader, test_sampler)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test accuracy {accuracy:.4f}")
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, checkpoint.format(epoch=epoch + 1))
    return accuracy


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

    # Only rank 0 reads and writes checkpoints.
    folder = args.checkpoint_dir or (tempfile.mkdtemp(prefix="ckpt-") if hvd.rank() == 0 else "")
    checkpoint = os.path.join(folder, "checkpoint-{epoch}.pt")

    model, optimizer = build(args)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    train(model, optimizer, train_loader, train_sampler, range(args.restart_after),
          test_loader, test_sampler, checkpoint)

    # The restart: new objects, the latest checkpoint's epoch found on rank 0.
    model, optimizer = build(args)
    resume_from_epoch = 0
    if hvd.rank() == 0:
        for try_epoch in range(args.epochs, 0, -1):
            if os.path.exists(checkpoint.format(epoch=try_epoch)):
                resume_from_epoch = try_epoch
                break
    resume_from_epoch = hvd.broadcast(torch.tensor(resume_from_epoch), root_rank=0).item()
    if resume_from_epoch != args.restart_after:
        raise RuntimeError(f"rank {hvd.rank()}: resuming from epoch {resume_from_epoch}, "
                           f"expected {args.restart_after}")
    if hvd.rank() == 0:
        state = torch.load(checkpoint.format(epoch=resume_from_epoch))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    restored = evaluate(model, test_loader, test_sampler)
    if hvd.rank() == 0:
        print(f"resumed from epoch {resume_from_epoch}: test accuracy {restored:.4f}")
    accuracy = train(model, optimizer, train_loader, train_sampler,
                     range(resume_from_epoch, args.epochs), test_loader, test_sampler, checkpoint)
    if hvd.rank() == 0 and args.checkpoint_dir is None:
        shutil.rmtree(folder)
    harness.report(model, accuracy)


if __name__ == "__main__":
    main()
