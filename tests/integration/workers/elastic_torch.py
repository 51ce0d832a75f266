"""A plain Horovod elastic PyTorch script: ``hvd.elastic.run`` with ``TorchState``, a reset
callback, a commit every few steps, and an ``ElasticSampler``-free fixed data set.

A fault, when asked for: the first rank on host ``PRAGUE_KILL_HOST`` (as the launcher names
it), or rank ``PRAGUE_KILL_RANK``, dies at step ``PRAGUE_KILL_STEP`` of the first world.
Horovod's elastic driver then drops that host and the survivors reset and go on. Every rank
that ends reports its model.

    horovodrun --gloo -np 4 --min-np 2 -H localhost:2,127.0.0.1:2 [--prague] \\
        python elastic_torch.py

Hosts added or removed, when asked for: rank 0 writes ``PRAGUE_NEW_HOSTS`` into the file
``PRAGUE_HOSTS_FILE``, which the job's host discovery script prints, at step
``PRAGUE_CHANGE_STEP`` of the first world; every rank then trains until it has taken the
steps and ``CHANGED_STEPS`` more in a world of ``PRAGUE_NEW_SIZE`` ranks (at most
``MAX_STEPS``, so a job whose hosts never change ends, and says so in its report).

    horovodrun --gloo -np 2 --min-np 2 --max-np 4 --host-discovery-script discover.sh \\
        [--prague] python elastic_torch.py
"""

from __future__ import annotations

import os
import time

import horovod.torch as hvd
import torch
from _report import digest, prague_stats, report

STEPS = int(os.environ.get("PRAGUE_ELASTIC_STEPS", "40"))
MAX_STEPS = 4000
CHANGED_STEPS = 10
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
    kill_rank = int(os.environ.get("PRAGUE_KILL_RANK", "-1"))
    hosts_file = os.environ.get("PRAGUE_HOSTS_FILE")
    change_step = int(os.environ.get("PRAGUE_CHANGE_STEP", "-1"))
    new_size = int(os.environ.get("PRAGUE_NEW_SIZE", "0"))
    sizes: list[int] = []  # the world's size at each start of ``train``
    ranks: list[int] = []  # and this rank's number in it
    done: list[float] = []  # when each step ended (time.monotonic)
    starts: list[int] = []  # how many steps had ended at each start of ``train``
    first_steps: list[int] = []  # the state's step at each start of ``train``
    changed_at: list[int] = []  # the state's step when this rank first trained in the new world
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
        ranks.append(hvd.rank())
        starts.append(len(done))
        first_steps.append(state.step)
        if hvd.size() == new_size and not changed_at:
            changed_at.append(state.step)
        try:
            steps(state)
        except Exception as e:  # what made this rank reset, for the job's log
            print(f"rank {hvd.rank()} of {hvd.size()}: {type(e).__name__}: {e}", flush=True)
            raise

    def more_steps(state: hvd.elastic.TorchState) -> bool:
        if hosts_file is None:
            return state.step < STEPS
        if not changed_at:
            return state.step < MAX_STEPS
        return state.step < max(STEPS, changed_at[0] + CHANGED_STEPS)

    def steps(state: hvd.elastic.TorchState) -> None:
        while more_steps(state):
            doomed = host == kill_host and hvd.local_rank() == 0 or hvd.rank() == kill_rank
            if doomed and state.step == kill_step and len(sizes) == 1:
                os._exit(17)
            if hosts_file and hvd.rank() == 0 and state.step == change_step and len(sizes) == 1:
                with open(hosts_file, "w") as f:
                    f.write(os.environ["PRAGUE_NEW_HOSTS"].replace(",", "\n") + "\n")
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
    stats = prague_stats(hvd)  # this world's, under the flag
    report(
        {
            "host": host,
            "size": hvd.size(),
            "sizes": sizes,
            "ranks": ranks,
            "step": state.step,
            "resets": resets,
            "first_steps": first_steps,
            "taken": len(done),
            "changed_at": changed_at,
            # From the last step before each reset to the first after it, on this rank.
            "recovery_s": [done[i] - done[i - 1] for i in starts[1:] if 0 < i < len(done)],
            "wall_s": done[-1] - done[0] if done else 0.0,
            # time.monotonic() of the first and last steps: one clock for every process here.
            "first_step_at": done[0] if done else None,
            "last_step_at": done[-1] if done else None,
            "parameters": digest(model.parameters()),
            "model": digest(model.state_dict().values()),
            "loss": float(loss.detach()),
            "stats": stats,
        },
        rank=hvd.rank(),
    )


if __name__ == "__main__":
    main()
