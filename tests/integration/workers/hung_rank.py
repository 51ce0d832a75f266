"""One rank hangs mid-training; the others must stop with an error naming it, not hang.

argv[1]: the rank that hangs (at step ``HANG_AT``: it takes one slow step, then one more,
which asks the Group Generator for a group later than the ranks already waiting for it did,
then stops stepping, as a rank stuck in a kernel or a debugger would, until every other rank
has reported (at most 8 x ``TIMEOUT`` s), and leaves); argv[2]: ``torch`` (default) or
``tensorflow``. Each other rank reports the error it got, and how long after its
own step ``HANG_AT`` began it got it; the job's Prague timeout is ``TIMEOUT`` seconds. The
stopped rank is not the one silent longest towards the Group Generator: only the waits ranks
report tell it apart from the ranks it holds up.
"""

import os
import sys
import time

from _report import report, wait_for_reports

TIMEOUT, HANG_AT, STEPS, SLOW_STEP = 6.0, 10, 200, 1.0
victim = int(sys.argv[1])
framework = sys.argv[2] if len(sys.argv) > 2 else "torch"

if framework == "torch":
    import torch

    import horovod_prague.torch as hvd

    hvd.init(strategy="random", timeout=TIMEOUT, seed=2)
    model = torch.nn.Linear(8, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01))

    def train_step() -> None:
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()

else:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    import horovod_prague.tensorflow as hvd

    hvd.init(strategy="random", timeout=TIMEOUT, seed=2)
    weights = tf.Variable(tf.random.normal([8, 2]))
    hvd.broadcast_variables([weights], root_rank=0)
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01))

    def train_step() -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.random.normal([4, 8]) @ weights)
        opt.apply_gradients([(tape.gradient(loss, weights), weights)])


def wait_for_survivors(limit_s: float) -> None:
    wait_for_reports([r for r in range(hvd.size()) if r != victim], limit_s)


started = None
try:
    for step in range(STEPS):
        if step == HANG_AT:
            started = time.monotonic()
            if hvd.rank() == victim:
                # One slow step, then one that asks the Group Generator for a group after the
                # ranks waiting for this one last asked, then no more.
                time.sleep(SLOW_STEP)
                train_step()
                # Hung: no step, no collective, until the others have their errors.
                wait_for_survivors(8 * TIMEOUT)
                os._exit(0)
        train_step()
    outcome = {"error": None}
except Exception as e:  # noqa: BLE001  (the test inspects whatever was raised)
    elapsed = None if started is None else time.monotonic() - started
    outcome = {"error": type(e).__name__, "message": str(e), "after": elapsed}
report(outcome)
# A survivor that exits closes its Gloo connections, and Horovod ends the ranks still waiting
# before they report; rank 0's process also serves the Group Generator, which the others ask
# who holds them up. So each survivor stays until all have reported (or 30 s have passed).
wait_for_survivors(30)
os._exit(0)  # Horovod's shutdown would wait for the hung rank
