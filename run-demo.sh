#!/usr/bin/env bash
# Set up everything on a fresh machine and run the digits demo.
#
# Creates .venv (if absent) with python3 -m venv, installs Tessera in editable mode together
# with every plugin under plugins/*/ that has a pyproject.toml, then runs
# examples/digits/demo.py (extra arguments are passed on, e.g. --target ref).
# Safe to run again: the install is skipped while the pyproject.toml files are unchanged.
# Environment: PYTHON (default python3), VENV (default .venv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
EXTRAS=""

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "run-demo.sh: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi

# The core and the plugins in one pip call, so plugins that depend on "tessera" resolve it here.
packages=(-e ".${EXTRAS}")
manifests=(pyproject.toml)
for plugin in plugins/*/; do
    if [[ -f "${plugin}pyproject.toml" ]]; then
        packages+=(-e "${plugin%/}")
        manifests+=("${plugin}pyproject.toml")
    fi
done
stamp="$VENV/.tessera-install-demo"
wanted="$(cat "${manifests[@]}" | sha256sum | cut -d' ' -f1) ${packages[*]}"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$wanted" ]]; then
    echo "run-demo.sh: installing ${packages[*]}" >&2
    "$VENV/bin/python" -m pip install --quiet "${packages[@]}"
    echo "$wanted" > "$stamp"
fi

exec "$VENV/bin/python" examples/digits/demo.py "$@"
