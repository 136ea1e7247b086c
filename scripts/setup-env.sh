# Shared set-up for run-demo.sh and run-tests.sh (sourced, not run).
#
# setup_env EXTRAS: creates $VENV (default .venv) with $PYTHON -m venv if absent, then installs
# Tessera in editable mode together with every plugin under plugins/*/ that has a
# pyproject.toml, each with those of EXTRAS (comma-separated: "test,libs"; "" for none) that it
# defines (scripts/install_set.py lists them). "libs" is the GPU plugins' NVIDIA libraries
# (NVRTC, cuDNN, cuBLAS: about 1.6 GB), which run-tests.sh installs and run-demo.sh does not.
# pip's progress is shown as one line per package (stderr). Callers set -o pipefail.
# Every package is installed at the exact version constraints.txt names (pip -c), so runs are
# reproducible; the install is skipped while the pyproject.toml files, constraints.txt and the
# package list are unchanged. With LATEST=1 (scripts/test-latest.sh) constraints.txt is not used
# and every dependency is upgraded to its newest release instead.
# With WITH_SYSTEM_DEPS=1 it also installs the Debian packages plugins need for their tests
# (verilator for tessera-vta's tsim) when they are missing and apt-get can be used.

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

install_system_deps() {
    if command -v verilator >/dev/null 2>&1; then
        return 0
    fi
    if command -v apt-get >/dev/null 2>&1; then
        local sudo=""
        if [[ $(id -u) -ne 0 ]]; then
            if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
                sudo="sudo -n"
            else
                echo "setup: verilator is missing and apt-get needs root; tsim tests will be" \
                     "skipped (apt-get install verilator)" >&2
                return 0
            fi
        fi
        echo "setup: installing verilator with apt-get" >&2
        if ! { $sudo apt-get update -qq >/dev/null &&
               DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq verilator >/dev/null; }
        then
            echo "setup: apt-get could not install verilator; tsim tests will be skipped" >&2
        fi
    else
        echo "setup: verilator is missing and there is no apt-get; tsim tests will be skipped" >&2
    fi
}

# pytest_suite_flags ARGS...: what run-tests.sh and test-latest.sh put before the user's ARGS:
# every tier (--all-tiers: the tests marked slow or gpu too; a -m of the user's replaces it, see
# conftest.py), in parallel on every CPU the process may use (pytest-xdist; --dist loadgroup keeps
# the tests of one xdist_group, e.g. the Ray cluster's, on one worker; a -n of the user's wins),
# and -q unless ARGS set the verbosity (pytest_quiet).
pytest_suite_flags() {
    printf '%s ' -n auto --dist loadgroup --all-tiers $(pytest_quiet "$@")
}

# pytest_quiet ARGS...: prints -q unless ARGS set pytest's verbosity themselves (-q, -v, -vv,
# -xq, --verbose, --verbosity=N): a second -q would hide pytest's summary line, and -q -v would
# cancel out, so the user's flag wins.
pytest_quiet() {
    local arg
    for arg in "$@"; do
        if [[ "$arg" =~ ^-[xslqv]*[qv][xslqv]*$ ||
              "$arg" =~ ^--(quiet|verbose|verbosity)(=.*)?$ ]]; then
            return 0
        fi
    done
    echo -q
}

# pip's stdout -> one short line per package it collects (with the size of what it downloads)
# and per step, on stderr, prefixed with the script's name ($1); pip's own errors and warnings
# (its stderr) pass as they are.
pip_progress() {
    local name="$1" line wheel words verb size
    while IFS= read -r line; do
        line="${line#"${line%%[![:space:]]*}"}"  # no leading blanks
        case "$line" in
            "Obtaining file://"*)
                line="${line#Obtaining file://}"
                [[ "$line" == "$PWD" ]] && line=.
                echo "$name:   preparing ${line#"$PWD"/}" >&2 ;;
            "Collecting "*)
                echo "$name:   collecting ${line#Collecting }" | sed 's/ (from .*//' >&2 ;;
            "Processing "*)  # a wheel from a local index or folder: name-version-...whl
                wheel="${line#Processing }"
                wheel="${wheel%% *}"
                wheel="${wheel##*/}"
                IFS=- read -ra words <<<"$wheel"
                echo "$name:   collecting ${words[0]}==${words[1]:-?}" >&2 ;;
            "Downloading "* | "Using cached "*)  # a file name or URL, maybe its size
                verb=downloading
                [[ "$line" == "Using cached "* ]] && verb="using cached"
                line="${line#Downloading }"
                line="${line#Using cached }"
                wheel="${line%% *}"
                size="${line#"$wheel"}"
                wheel="${wheel##*/}"
                IFS=- read -ra words <<<"$wheel"
                echo "$name:     $verb ${words[0]}==${words[1]:-?}$size" >&2 ;;
            "Building editable for "*": started" | "Building wheel for "*": started")
                echo "$name:   building ${line#Building }" | sed 's/ (pyproject.toml): started//' >&2 ;;
            "Installing collected packages: "*)
                read -ra words <<<"${line#Installing collected packages: }"
                echo "$name:   installing ${#words[@]} packages into $VENV" >&2 ;;
            "Successfully installed "*)
                echo "$name:   done" >&2 ;;
        esac
    done
}

setup_env() {
    local extras="$1"
    local name
    name="$(basename "$0" .sh)"
    if [[ "${WITH_SYSTEM_DEPS:-0}" == 1 ]]; then
        install_system_deps
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        echo "$name: creating $VENV" >&2
        "$PYTHON" -m venv "$VENV"
    fi
    # The core and the plugins in one pip call, so plugins that depend on "tessera" resolve it;
    # each with those of EXTRAS it defines (scripts/install_set.py).
    local specs spec
    specs="$("$VENV/bin/python" scripts/install_set.py "$extras")"
    local packages=()
    while IFS= read -r spec; do
        packages+=(-e "$spec")
    done <<<"$specs"
    local manifests=(pyproject.toml constraints.txt scripts/install_set.py plugins/*/pyproject.toml)
    local stamp="$VENV/.tessera-install-${name}"
    local wanted
    wanted="$(cat "${manifests[@]}" | sha256sum | cut -d' ' -f1) latest=${LATEST:-0} ${packages[*]}"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$wanted" ]]; then
        echo "$name: installing ${packages[*]} (pip, one line per package)" >&2
        if [[ "${LATEST:-0}" == 1 ]]; then
            # setuptools too, so that the version compared with constraints.txt is the newest
            # (pip's build environments take the newest anyway)
            PYTHONUNBUFFERED=1 "$VENV/bin/python" -m pip install --no-compile --upgrade \
                --upgrade-strategy eager setuptools "${packages[@]}" | pip_progress "$name"
            [[ ${PIPESTATUS[0]} -eq 0 ]] || return 1
        else
            # PIP_CONSTRAINT reaches the isolated build environments too (setuptools);
            # --no-compile: Python writes the bytecode of what it imports when it imports it,
            # instead of pip compiling every module of every package (PyTorch alone has
            # thousands) at install time
            PYTHONUNBUFFERED=1 PIP_CONSTRAINT="$PWD/constraints.txt" "$VENV/bin/python" -m pip \
                install --no-compile -c constraints.txt "${packages[@]}" | pip_progress "$name"
            [[ ${PIPESTATUS[0]} -eq 0 ]] || return 1
        fi
        echo "$wanted" > "$stamp"
    fi
}
