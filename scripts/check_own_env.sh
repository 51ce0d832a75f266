#!/usr/bin/env bash
# Installs horovod-prague into fresh virtual environments as a user would, with their own
# framework already in them (`python scripts/bootstrap.py --here`), then runs a 2-rank job
# under `horovodrun --prague` in each and checks that both ranks end with the same model.
#   torch:      torch 2.13.0 (CPU), numpy; no TensorFlow
#   torch-cuda: torch 2.14.1 (a CUDA build, run on the CPU), numpy; needs the CUDA toolkit
#               (CUDA_HOME, default /usr/local/cuda). Fails for now, as it should: torch
#               2.14 needs C++20, Horovod 0.28.1's PyTorch extension builds as C++17
#   tf:         tensorflow-cpu 2.21.0 and tf-keras; no torch
# Not in CI: each environment downloads its framework and builds Horovod (minutes).
# Usage: scripts/check_own_env.sh [torch] [torch-cuda] [tf]    (default: torch and tf)
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
root=${CHECK_OWN_ENV_ROOT:-/tmp/horovod-prague-own-env}
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(torch tf)
for kind in "${kinds[@]}"; do
  env="$root/$kind"
  rm -rf "$env"
  python3.11 -m venv "$env"
  "$env/bin/python" -m pip install -q --disable-pip-version-check wheel
  case "$kind" in
    torch) "$env/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0 numpy ;;
    torch-cuda) "$env/bin/python" -m pip install -q --disable-pip-version-check torch==2.14.1 numpy
      export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
      export CUDAToolkit_ROOT=$CUDA_HOME PATH=$CUDA_HOME/bin:$PATH ;;
    tf) "$env/bin/python" -m pip install -q --disable-pip-version-check \
          tensorflow-cpu==2.21.0 tf-keras==2.21.0 ;;
    *) echo "unknown environment: $kind" >&2; exit 2 ;;
  esac
  "$env/bin/python" scripts/bootstrap.py --here
  (cd "$root" && PATH="$env/bin:$PATH" horovodrun -np 2 -H localhost:2 --gloo --prague \
     python "$checkout/scripts/own_env_job.py" "$kind")
  echo "check_own_env: $kind: installed and ran"
  rm -rf "$env"
done
