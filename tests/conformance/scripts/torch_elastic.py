"""Horovod PyTorch elastic training: state committed as it goes, ``@hvd.elastic.run``.

Shaped like Horovod's ``examples/elastic/pytorch/pytorch_mnist_elastic.py``: the model,
optimizer, epoch and batch live in an ``hvd.elastic.TorchState``, the training function is
decorated with ``@hvd.elastic.run`` and commits every few batches, and a reset callback
rescales the learning rate. Launched in elastic mode (a host discovery script and
``--min-np``/``--max-np``); no worker is lost here, so it trains to the end in one go.

    horovodrun -np 4 --min-np 4 --max-np 4 --host-discovery-script ./discover.sh \
        --gloo python torch_elastic.py
"""

# conformance: framework=torch
# conformance: metric=accuracy, tolerance=0.04
# conformance: args=--min-np 4 --max-np 4 --network-interface lo
# conformance: args=--host-discovery-script scripts/discover.sh

import argparse

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch elastic training")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
parser.add_argument("--epochs", type=int, default=3, help="number of epochs")
parser.add_argument("--lr", type=float, default=0.02, help="learning rate for one worker")
parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
parser.add_argument("--commit-every", type=int, default=5, help="batches between commits")
parser.add_argument("--seed", type=int, default=41, help="random seed")

args = parser.parse_args()

hvd.init()
torch.manual_seed(args.seed)
torch.set_num_threads(1)

g = torch.Generator().manual_seed(args.seed)
centers = 1.2 * torch.randn(5, 20, generator=g)
labels = torch.randint(0, 5, (2560,), generator=g)
inputs = centers[labels] + torch.randn(2560, 20, generator=g)
train_dataset = TensorDataset(inputs[:2048], labels[:2048])
test_dataset = TensorDataset(inputs[2048:], labels[2048:])

train_sampler = DistributedSampler(train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
train_loader = DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
test_sampler = DistributedSampler(test_dataset, num_replicas=hvd.size(), rank=hvd.rank(),
                                  shuffle=False)
test_loader = DataLoader(test_dataset, batch_size=128, sampler=test_sampler)

model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())


def metric_average(val):
    return hvd.allreduce(torch.tensor(val)).item()


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, args.epochs):  # noqa: B020 (Horovod's idiom)
        state.model.train()
        train_sampler.set_epoch(state.epoch)
        steps_remaining = len(train_loader) - state.batch

        for state.batch, (data, target) in enumerate(train_loader):
            if state.batch >= steps_remaining:
                break
            state.optimizer.zero_grad()
            loss = F.cross_entropy(state.model(data), target)
            loss.backward()
            state.optimizer.step()
            harness.slow_step()
            if state.batch % args.commit_every == 0:
                state.commit()
        if hvd.rank() == 0:
            print(f"epoch {state.epoch}: loss {loss.item():.4f}")
        state.batch = 0
        state.commit()


def test():
    model.eval()
    correct = 0.0
    with torch.no_grad():
        for data, target in test_loader:
            correct += (model(data).argmax(dim=1) == target).sum().item()
    return metric_average(correct / len(test_sampler))


def on_state_reset():
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
state.register_reset_callbacks([on_state_reset])
train(state)
accuracy = test()
if hvd.rank() == 0:
    print(f"test accuracy {accuracy:.4f}")
harness.report(model, accuracy)
