#!/usr/bin/env bash
# The first contact with a GPU machine in one command (scripts/gpu_check.py does the work):
#
#   bash scripts/gpu-check.sh --install          # on the lent GPU machine, as it is
#   bash scripts/gpu-check.sh --only smoke,nan --out /tmp/check
#
# --install first installs Tessera and its plugins into the current Python, editable and
# without dependencies or a package index (that machine has none; its Python already has
# PyTorch, cuda-bindings, NVRTC, cuDNN, cuBLAS, onnx, llvmlite, numpy, pluggy and pytest).
# Every other argument goes to gpu_check.py (--help lists them). PYTHON picks the interpreter
# (default python3). The table and every step's log go to --out (default $OUT, else
# gpu-check-out/); without a GPU it says so, runs what needs none, and exits 0.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"

args=()
install=0
for arg in "$@"; do
    if [[ "$arg" == "--install" ]]; then install=1; else args+=("$arg"); fi
done

if [[ "$install" == 1 ]]; then
    plugins=(-e plugins/cuda -e plugins/cudnn -e plugins/llvm)
    [[ -f plugins/vta_sim/pyproject.toml ]] && plugins+=(-e plugins/vta_sim)
    echo "installing Tessera and its plugins into $("$PY" -c 'import sys; print(sys.executable)')"
    "$PY" -m pip install --quiet --no-deps --no-build-isolation --no-index -e . "${plugins[@]}"
fi

exec "$PY" scripts/gpu_check.py ${args[@]+"${args[@]}"}
