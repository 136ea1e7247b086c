#!/usr/bin/env bash
# Set up everything on a fresh machine and run the digits demo.
#
# Creates .venv (if absent), installs Tessera in editable mode together with every plugin under
# plugins/*/ that has a pyproject.toml (see scripts/setup-env.sh), then runs
# examples/digits/demo.py (extra arguments are passed on, e.g. --target ref).
# Environment: PYTHON (default python3), VENV (default .venv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/setup-env.sh
setup_env ""
exec "$VENV/bin/python" examples/digits/demo.py "$@"
