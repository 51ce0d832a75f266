"""TensorFlow binding: P-Reduce tf.Variables with the groups the Group Generator gives."""

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
hvd.finish(variables)
report({"log": log, "final": [v.numpy().tolist() for v in variables]})
hvd.shutdown()
