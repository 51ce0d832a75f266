"""TensorFlow binding: P-Reduce tf.Variables with the groups the Group Generator gives,
blocking (``partial_allreduce``) and overlapped (``exchange`` at the default staleness 1)."""

import numpy as np
import tensorflow as tf
from _report import report

import horovod_prague.tensorflow as hvd

hvd.init(strategy="static", group_size=2)
r = hvd.rank()
variables = [tf.Variable(np.full((3,), float(r))), tf.Variable(np.full((2, 2), 10.0 * r))]
log = []
for _ in range(4):
    group = hvd.next_group()
    hvd.partial_allreduce(variables, group)
    log.append({"group": list(group), "values": [v.numpy().tolist() for v in variables]})

# Overlapped: each rank's snapshot, and its values once the average is applied, after an
# in-place update made while the average was in flight.
rng = np.random.default_rng(r)
weights = tf.Variable(rng.normal(size=5000).astype(np.float32))
counter = tf.Variable(10 * r + 3, dtype=tf.int32)
overlapped = []
for _ in range(6):
    snapshot = weights.numpy().tolist()
    group = hvd.exchange([weights, counter])
    weights.assign_sub(tf.ones_like(weights))
    hvd.drain()
    overlapped.append(
        {
            "group": None if group is None else list(group),
            "snapshot": snapshot,
            "after": weights.numpy().tolist(),
            "counter": int(counter.numpy()),
        }
    )
    counter.assign(10 * r + 3)
hvd.finish(variables)
report({"log": log, "overlapped": overlapped, "final": [v.numpy().tolist() for v in variables]})
hvd.shutdown()
