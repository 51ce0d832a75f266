#!/usr/bin/env bash
# Set everything up (idempotent), then train on 4 local ranks with Prague and report.
# Extra arguments go to examples/prague_digits.py, e.g. scripts/demo.sh --strategy static
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=$(command -v python3.11 || command -v python3)
"$PYTHON" scripts/bootstrap.py
export PATH="$PWD/.venv/bin:$PATH" OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=3
NP=${PRAGUE_DEMO_RANKS:-4}
mkdir -p logs
echo "demo: horovodrun -np $NP -H localhost:$NP --gloo python examples/prague_digits.py $*"
if ! horovodrun -np "$NP" -H "localhost:$NP" --gloo python examples/prague_digits.py "$@" \
    > logs/demo.log 2>&1; then
  tail -n 40 logs/demo.log >&2
  echo "demo failed; full output in logs/demo.log" >&2
  exit 1
fi
sed -n 's/^\[0\]<stdout>://p' logs/demo.log
echo "(full output of every rank: logs/demo.log)"
