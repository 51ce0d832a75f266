"""One rank of a ``prague-bench --fault`` job: a plain Horovod elastic PyTorch script.

Written as Horovod's elastic examples are: ``hvd.elastic.run`` over a ``TorchState`` that
holds the model, the optimizer and the samples trained so far, and a commit every
``--commit-every`` steps. Every rank takes the same steps (no rank runs
ahead at its own pace: an unchanged elastic script has no such notion), each slowed as
``workload.schedule`` says for the rank it was in the first world. The job trains until the
samples reach what ``--steps`` steps of the first world give, so a job that lost ranks takes
more steps on the survivors and ends after the same samples as an undisturbed one.

The fault: rank ``R`` of the first world, at its step ``K`` (``--kill R@K``), writes the time
to ``<out>.killed`` and exits. Horovod's elastic driver then drops its whole host; the
survivors reset and go on from the last commit. Workers that the driver starts later (on a
host it takes back) skip the first world's start (the broadcast and the barrier, which no
other rank runs then), join from the last commit, the sample count to reach included, and
never die: the fault happens once per job. Every rank notes when it ended its first step
after each reset; rank 0 of the last world writes the job's result to ``--out``.

    horovodrun --gloo -np 8 --min-np 4 -H localhost:4,127.0.0.1:4 [--prague] \\
        python -m horovod_prague.bench.elastic_worker --kill 5@100 --out result.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import horovod.torch as hvd

from horovod_prague.bench.datasets import load
from horovod_prague.bench.faults import parse_kill
from horovod_prague.bench.torch_trainer import FrameworkTrainer
from horovod_prague.bench.worker import Batches, workload_arguments
from horovod_prague.bench.workload import schedule


class World:
    """This process's view of the worlds it trained in: their sizes and when it resumed in each."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.started = time.time()
        self.resumed: list[float | None] = []
        """For each world after the first, when this rank ended its first step there (None if
        it took none before the next reset)."""
        self.steps = 0
        """Steps this process took, redone ones included."""

    def enter(self) -> None:
        if self.sizes:
            self.resumed.append(None)
        self.sizes.append(hvd.size())

    @property
    def first(self) -> bool:
        return len(self.sizes) == 1

    def stepped(self) -> None:
        self.steps += 1
        if self.resumed and self.resumed[-1] is None:
            self.resumed[-1] = time.time()


def main() -> None:
    ap = workload_arguments()
    ap.add_argument("--commit-every", type=int, default=25)
    ap.add_argument("--kill", type=parse_kill, help="RANK@STEP of the first world")
    a = ap.parse_args()

    data = load(a.workload, None if a.data is None else Path(a.data))
    killed = Path(a.out + ".killed")
    joining = killed.exists()  # started after the fault: the others are in training already
    trainer = FrameworkTrainer(
        data, a.params, a.lr, a.seed, a.batch, broadcast=not joining, workload=a.workload
    )
    trainer.poll_wait = a.poll_wait
    first_size, first_rank = trainer.size, trainer.rank
    factors = schedule(a.scenario, first_size, a.steps, a.seed).factors[first_rank]
    total = a.steps * first_size * a.batch

    kill = None if joining else a.kill
    state = hvd.elastic.TorchState(
        model=trainer.model, optimizer=trainer.opt, samples=0, total=total
    )

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        world.enter()
        try:
            steps(state)
        except Exception as e:  # what made this rank reset, for the job's log
            print(f"rank {hvd.rank()} of {hvd.size()}: {type(e).__name__}: {e}", flush=True)
            raise

    def steps(state: hvd.elastic.TorchState) -> None:
        batches = Batches(a.sampling, len(data["x"]), hvd.rank(), hvd.size(), a.seed)
        while state.samples < state.total:
            for _ in range(a.commit_every):
                if kill and world.first and (first_rank, world.steps) == kill:
                    killed.write_text(json.dumps(time.time()))
                    os._exit(17)
                time.sleep(a.compute_ms / 1000 * factors[world.steps % len(factors)])
                trainer.step(batches.next(a.batch))
                world.stepped()
            state.samples += a.commit_every * hvd.size() * a.batch
            state.commit()

    if not joining:
        trainer.barrier()
    world = World()
    train(state)
    trainer.end()
    end = time.time()
    digests = trainer.allgather_object(trainer.digest(), name="bench.digests")
    reports = trainer.allgather_object(
        {"sizes": world.sizes, "resumed": world.resumed, "steps": world.steps},
        name="bench.worlds",
    )
    prague = sys.modules.get(trainer.prague_module)  # loaded by the drop-in under --prague
    stats = prague.exchange_stats() if prague is not None else None
    stats_per_rank = trainer.allgather_object(stats, name="bench.stats")
    if hvd.rank() == 0:
        result = {
            "framework": "torch",
            "ranks": first_size,
            "steps": a.steps,
            "samples": int(state.samples),
            "wall": end - world.started,
            "final_accuracy": trainer.test()[0],
            "same_model_on_every_rank": len(set(digests)) == 1,
            "worlds": reports,
            "exchange_stats": stats_per_rank,
        }
        Path(a.out).write_text(json.dumps(result))
    trainer.shutdown()


if __name__ == "__main__":
    main()
