#!/usr/bin/env bash
# Set everything up (idempotent), then measure the straggler speed-up: prague-bench --quick
# trains MNIST-1D on 4 and 8 local ranks with stock Horovod All-Reduce and with Prague, under
# random slowdowns, and prints the table and where its plots are.
# Extra arguments go to prague-bench, e.g. scripts/demo.sh --ranks 8
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=$(command -v python3.11 || command -v python3)
"$PYTHON" scripts/bootstrap.py
export PATH="$PWD/.venv/bin:$PATH" OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=3
echo "demo: prague-bench --quick $* (stock Horovod All-Reduce against Prague, side by side)"
exec prague-bench --quick --out bench-results/quick "$@"
