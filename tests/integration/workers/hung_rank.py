"""One rank hangs mid-training; the others must stop with an error naming it, not hang.

argv[1]: the rank that hangs (at step ``HANG_AT``; it sleeps, as a rank stuck in a kernel or
a debugger would, then leaves); argv[2]: ``torch`` (default) or ``tensorflow``. Each other
rank reports the error it got, and how long after its own step ``HANG_AT`` began it got it;
the job's Prague timeout is ``TIMEOUT`` seconds. Staleness 1: every step asks the Group
Generator, so the rank silent longest is the one that stopped (with more, a rank taking lone
steps asks less often, and one held up by the stopped rank may have been silent longer).
"""

import os
import sys
import time
from pathlib import Path

from _report import report

TIMEOUT, HANG_AT, STEPS = 6.0, 10, 200
victim = int(sys.argv[1])
framework = sys.argv[2] if len(sys.argv) > 2 else "torch"

if framework == "torch":
    import torch

    import horovod_prague.torch as hvd

    hvd.init(strategy="random", timeout=TIMEOUT, seed=2, staleness=1)
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

    hvd.init(strategy="random", timeout=TIMEOUT, seed=2, staleness=1)
    weights = tf.Variable(tf.random.normal([8, 2]))
    hvd.broadcast_variables([weights], root_rank=0)
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01))

    def train_step() -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.random.normal([4, 8]) @ weights)
        opt.apply_gradients([(tape.gradient(loss, weights), weights)])


started = None
try:
    for step in range(STEPS):
        if step == HANG_AT:
            started = time.monotonic()
            if hvd.rank() == victim:
                time.sleep(8 * TIMEOUT)
                os._exit(0)
        train_step()
    outcome = {"error": None}
except Exception as e:  # noqa: BLE001  (the test inspects whatever was raised)
    elapsed = None if started is None else time.monotonic() - started
    outcome = {"error": type(e).__name__, "message": str(e), "after": elapsed}
report(outcome)
if hvd.rank() == 0:
    # Rank 0's process serves the Group Generator, which the other survivors ask, after their
    # own timeout, who is silent: it stays until they have reported (or 30 s have passed).
    out = Path(os.environ["PRAGUE_TEST_OUT"])
    deadline = time.monotonic() + 30
    survivors = [r for r in range(hvd.size()) if r != victim]
    while time.monotonic() < deadline and not all(
        (out / f"rank{r}.json").exists() for r in survivors
    ):
        time.sleep(0.05)
os._exit(0)  # Horovod's shutdown would wait for the hung rank
