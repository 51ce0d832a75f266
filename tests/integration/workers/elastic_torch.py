"""A plain Horovod elastic PyTorch script: ``hvd.elastic.run`` with ``TorchState``, a reset
callback, a commit every few steps, and an ``ElasticSampler``-free fixed data set.

A fault, when asked for: the first rank on host ``PRAGUE_KILL_HOST`` (as the launcher names
it) dies at step ``PRAGUE_KILL_STEP`` of the first world. Horovod's elastic driver then drops
that host and the survivors reset and go on. Every rank that ends reports its model.

    horovodrun --gloo -np 4 --min-np 2 -H localhost:2,127.0.0.1:2 [--prague] \\
        python elastic_torch.py
"""

from __future__ import annotations

import os
import time

import horovod.torch as hvd
import torch
from _report import digest, report

STEPS = int(os.environ.get("PRAGUE_ELASTIC_STEPS", "40"))
COMMIT_EVERY = 5


def main() -> None:
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x[:, :2].sum(dim=1) > 0).long()

    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.5)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    host = os.environ.get("HOROVOD_HOSTNAME", "")
    kill_host = os.environ.get("PRAGUE_KILL_HOST")
    kill_step = int(os.environ.get("PRAGUE_KILL_STEP", "-1"))
    sizes: list[int] = []  # the world's size at each start of ``train``
    done: list[float] = []  # when each step ended (time.monotonic)
    starts: list[int] = []  # how many steps had ended at each start of ``train``
    resets: list[int] = []  # and at each reset (elastic state restores its own attributes)

    def on_reset() -> None:
        resets.append(hvd.size())
        for group in optimizer.param_groups:
            group["lr"] = 0.05 * hvd.size()

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        sizes.append(hvd.size())
        starts.append(len(done))
        try:
            steps(state)
        except Exception as e:  # what made this rank reset, for the job's log
            print(f"rank {hvd.rank()} of {hvd.size()}: {type(e).__name__}: {e}", flush=True)
            raise

    def steps(state: hvd.elastic.TorchState) -> None:
        while state.step < STEPS:
            if host == kill_host and hvd.local_rank() == 0 and state.step == kill_step:
                if len(sizes) == 1:
                    os._exit(17)
            i = (state.step * hvd.size() + hvd.rank()) % 32 * 8
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[i : i + 8]), y[i : i + 8]).backward()
            optimizer.step()
            done.append(time.monotonic())
            state.step += 1
            if state.step % COMMIT_EVERY == 0:
                state.commit()

    train(state)
    loss = hvd.allreduce(torch.nn.functional.cross_entropy(model(x), y), name="final_loss")
    report(
        {
            "host": host,
            "size": hvd.size(),
            "sizes": sizes,
            "step": state.step,
            "resets": resets,
            # From the last step before each reset to the first after it, on this rank.
            "recovery_s": [done[i] - done[i - 1] for i in starts[1:] if 0 < i < len(done)],
            "wall_s": done[-1] - done[0] if done else 0.0,
            "parameters": digest(model.parameters()),
            "model": digest(model.state_dict().values()),
            "loss": float(loss.detach()),
        },
        rank=hvd.rank(),
    )


if __name__ == "__main__":
    main()
