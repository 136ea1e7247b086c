#!/usr/bin/env bash
# Maintainers: run the test suite on the newest releases of every dependency.
#
# Creates .venv-latest (VENV to change it) if absent, installs Tessera and its plugins with their
# test extras like run-tests.sh but WITHOUT constraints.txt (pip --upgrade, newest releases;
# always reinstalled so that new releases are picked up), runs every tier of the suite like
# run-tests.sh (python -m pytest -n auto --dist loadgroup --all-tiers -q) with the arguments
# given, then prints the packages whose installed version differs from
# constraints.txt (package, pinned, newest). When the suite passes and the versions are wanted,
# copy them into constraints.txt. Exits with pytest's status (5, no tests, counts as success).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${VENV:-.venv-latest}"
source scripts/setup-env.sh
rm -f "$VENV"/.tessera-install-*
LATEST=1 setup_env "test,libs,zoo"

status=0
"$VENV/bin/python" -m pytest $(pytest_suite_flags "$@") "$@" || status=$?
[[ $status -eq 5 ]] && status=0

echo
"$VENV/bin/python" - constraints.txt <<'PY'
import re
import sys
from importlib import metadata

def key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()

pinned = {}
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if "==" in line:
        name, version = line.split("==", 1)
        pinned[key(name)] = (name.strip(), version.strip())
rows = []
for k, (name, version) in sorted(pinned.items()):
    try:
        newest = metadata.version(name)
    except metadata.PackageNotFoundError:
        newest = "(not installed)"
    if newest != version:
        rows.append((name, version, newest))
installed = {key(d.metadata["Name"]): d for d in metadata.distributions()}
for k, d in sorted(installed.items()):
    if k not in pinned and not k.startswith(("tessera", "pip", "setuptools", "wheel")):
        rows.append((d.metadata["Name"], "(not pinned)", d.version))
if not rows:
    print("test-latest.sh: every package is at its constraints.txt version")
else:
    print("test-latest.sh: versions that differ from constraints.txt")
    print(f"{'package':<24} {'pinned':<16} newest")
    for row in rows:
        print(f"{row[0]:<24} {row[1]:<16} {row[2]}")
PY
exit "$status"
