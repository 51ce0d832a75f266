#!/usr/bin/env bash
# The long soak: 8 ranks, 2,000 steps each with random per-rank delays, every strategy
# (blocking) and the overlapped design with one and two averages in flight, even and uneven
# ends. Each job checks that every pair of ranks ran their shared groups in the same order
# and that every rank ends with the same model. CI runs the same test with 4 ranks and 500
# steps. Then models with integer buffers (a counter, BatchNorm's num_batches_tracked, a
# Keras integer variable) on 8 ranks, 500 steps, under the default two averages in flight:
# every counter ends at the number of steps on every rank (CI: 2 ranks, 10 steps). Last, mixed
# training on 8 ranks, 500 to 549 steps per epoch: two optimizers, BatchNorm, uneven and
# skipped steps, sync_every, a metric all-reduce, hvd.join() per epoch; every rank ends with
# the model a reference computes from the steps all ranks took (CI: 4 ranks, 30 steps).
# First, the tests that compare wall-clock rates (marker ``timing``), which CI leaves out: a
# loaded machine moves the rates they compare; and the variants CI leaves out for time
# (marker ``long``).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q -p no:cacheprovider -m "timing or long" tests/integration tests/conformance "$@"
PRAGUE_SOAK_RANKS=8 PRAGUE_SOAK_STEPS=2000 .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/integration/test_prague.py -k many_steps "$@"
PRAGUE_INT_RANKS=8 PRAGUE_INT_STEPS=500 .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/integration/test_integer_buffers.py "$@"
PRAGUE_MIX_RANKS=8 PRAGUE_MIX_STEPS=500 exec .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/integration/test_prague.py -k mixed_training "$@"
