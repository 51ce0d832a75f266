"""Horovod PyTorch synthetic benchmark: img/sec on fixed fake data, a small CNN.

Shaped like Horovod's ``examples/pytorch/pytorch_synthetic_benchmark.py``: fixed random
images and labels, warm-up batches, then ``timeit`` over a few iterations of a few batches;
here the gradients travel fp16-compressed (``--fp16-allreduce``, on by default) and the model
is a small CNN on 32x32 images. At the end the loss on the fake batch is averaged over the
workers (the benchmark's model has learned to fit it).

    horovodrun -np 4 -H localhost:4 --gloo python torch_synthetic_benchmark.py
"""

# conformance: framework=torch
# conformance: metric=loss, tolerance=0.1

import argparse
import timeit

import harness
import horovod.torch as hvd
import numpy as np
import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser(description="PyTorch Synthetic Benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action=argparse.BooleanOptionalAction, default=True,
                    help="use fp16 compression during allreduce")
parser.add_argument("--batch-size", type=int, default=16, help="input batch size")
parser.add_argument("--num-warmup-batches", type=int, default=5,
                    help="number of warm-up batches that don't count towards benchmark")
parser.add_argument("--num-batches-per-iter", type=int, default=8,
                    help="number of batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=4, help="number of benchmark iterations")
parser.add_argument("--seed", type=int, default=37, help="random seed")


class SmallCNN(torch.nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32 * 8 * 8, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


args = parser.parse_args()

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(args.seed)

model = SmallCNN()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())

# Horovod: (optional) compression algorithm.
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

# Horovod: wrap optimizer with DistributedOptimizer.
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression)

# Horovod: broadcast parameters & optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Set up fixed fake data, different on each worker.
torch.manual_seed(args.seed + hvd.rank())
data = torch.randn(args.batch_size, 3, 32, 32)
target = torch.LongTensor(args.batch_size).random_() % 10


def benchmark_step():
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()
    harness.slow_step()


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end="\n" if nl else "")


log(f"Model: SmallCNN, batch size: {args.batch_size}, fp16 allreduce: {args.fp16_allreduce}")
log(f"Number of CPUs: {hvd.size()}")

# Warm-up
log("Running warmup...")
timeit.timeit(benchmark_step, number=args.num_warmup_batches)

# Benchmark
log("Running benchmark...")
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log(f"Iter #{x}: {img_sec:.1f} img/sec per CPU")
    img_secs.append(img_sec)

# Results
img_sec_mean = np.mean(img_secs)
img_sec_conf = 1.96 * np.std(img_secs)
log(f"Img/sec per CPU: {img_sec_mean:.1f} +-{img_sec_conf:.1f}")
log(f"Total img/sec on {hvd.size()} CPU(s): {hvd.size() * img_sec_mean:.1f} "
    f"+-{hvd.size() * img_sec_conf:.1f}")

with torch.no_grad():
    loss = hvd.allreduce(F.cross_entropy(model(data), target)).item()
log(f"Loss on the fake batch: {loss:.4f}")
harness.report(model, loss)
