#!/usr/bin/env bash
# Set up everything on a fresh machine and run the test suite.
#
# Installs the Debian packages the plugins' tests need when missing (verilator, via apt-get when
# run as root or with password-less sudo), creates .venv (if absent), installs Tessera with its
# test extras in editable mode together with every plugin under plugins/*/ (with their test
# extras and the GPU plugins' NVIDIA libraries, the "libs" extra, so that NVRTC code generation
# and cuDNN descriptors are tested without a GPU; see scripts/setup-env.sh) and the zoo extra
# (PyTorch's CPU build, transformers, onnxscript: the Hugging Face model-zoo tests), then runs every
# tier of the suite (tests/ and plugins/*/tests) in parallel:
#     python -m pytest -n auto --dist loadgroup --all-tiers -q
# (`python -m pytest` alone runs the fast tier; conftest.py). Extra arguments are passed on,
# e.g. tests/cli -x; a -q or -v of theirs replaces the -q, a -n of theirs the -n auto (-n 0:
# one process), a -m of theirs selects by marker instead of every tier. pytest's exit code 5
# ("no tests collected") counts as success.
# Environment: PYTHON (default python3), VENV (default .venv), WITH_SYSTEM_DEPS (default 1;
# 0: no apt-get).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/setup-env.sh
WITH_SYSTEM_DEPS="${WITH_SYSTEM_DEPS:-1}" setup_env "test,libs,zoo"

status=0
# every tier, in parallel, -q unless the arguments set the verbosity (setup-env.sh)
"$VENV/bin/python" -m pytest $(pytest_suite_flags "$@") "$@" || status=$?
if [[ $status -eq 5 ]]; then
    echo "run-tests.sh: no tests collected" >&2
    status=0
fi
exit "$status"
