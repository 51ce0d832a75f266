"""A 2-rank job for ``scripts/check_own_env.sh``: a plain Horovod script, PyTorch or Keras,
that trains a little under ``--prague`` and exits non-zero unless every rank ends with the
same model."""

import os
import sys

import numpy as np


def torch_job() -> np.ndarray:
    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.manual_seed(hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for _ in range(20 + 5 * hvd.rank()):
        x = torch.randn(16, 8)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    hvd.allreduce(loss.detach(), name="loss")  # a consensus comes first: one model
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return hvd.allgather(flat[None]).numpy()


def tf_job() -> np.ndarray:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # Horovod's Keras needs tf-keras (docs/usage.md)
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    hvd.init()
    tf.random.set_seed(hvd.rank())
    model = tf.keras.Sequential(
        [tf.keras.Input((8,)), tf.keras.layers.Dense(16, "relu"), tf.keras.layers.Dense(1)]
    )
    model.compile(hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.05, 0.9)), "mse")
    x = np.random.default_rng(hvd.rank()).normal(size=(320, 8)).astype("float32")
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    model.fit(x, x.sum(1), batch_size=16, epochs=2, callbacks=callbacks, verbose=0)
    hvd.allreduce(tf.constant(0.0), name="done")  # a consensus comes first: one model
    flat = tf.concat([tf.reshape(w, [-1]) for w in model.weights], 0)
    return hvd.allgather(flat[None]).numpy()


models = torch_job() if sys.argv[1].startswith("torch") else tf_job()
if not np.array_equal(models[0], models[1]):
    sys.exit(f"the ranks' models differ: {np.abs(models[0] - models[1]).max()}")
print(f"{sys.argv[1]}: one model on both ranks", flush=True)
