# Shared set-up for run-demo.sh and run-tests.sh (sourced, not run).
#
# setup_env EXTRAS: creates $VENV (default .venv) with $PYTHON -m venv if absent, then installs
# Tessera in editable mode with EXTRAS (e.g. "[test]") together with every plugin under
# plugins/*/ that has a pyproject.toml (with the same extras where the plugin defines them).
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
    # The core and the plugins in one pip call, so plugins that depend on "tessera" resolve it.
    local packages=(-e ".${extras}")
    local manifests=(pyproject.toml constraints.txt)
    local plugin
    for plugin in plugins/*/; do
        if [[ -f "${plugin}pyproject.toml" ]]; then
            if [[ -n "$extras" ]] && grep -q "^${extras//[\[\]]/} *=" "${plugin}pyproject.toml"; then
                packages+=(-e "${plugin%/}${extras}")
            else
                packages+=(-e "${plugin%/}")
            fi
            manifests+=("${plugin}pyproject.toml")
        fi
    done
    local stamp="$VENV/.tessera-install-${name}"
    local wanted
    wanted="$(cat "${manifests[@]}" | sha256sum | cut -d' ' -f1) latest=${LATEST:-0} ${packages[*]}"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$wanted" ]]; then
        echo "$name: installing ${packages[*]}" >&2
        if [[ "${LATEST:-0}" == 1 ]]; then
            # setuptools too, so that the version compared with constraints.txt is the newest
            # (pip's build environments take the newest anyway)
            "$VENV/bin/python" -m pip install --quiet --upgrade --upgrade-strategy eager \
                setuptools "${packages[@]}"
        else
            # PIP_CONSTRAINT reaches the isolated build environments too (setuptools)
            PIP_CONSTRAINT="$PWD/constraints.txt" "$VENV/bin/python" -m pip install --quiet \
                -c constraints.txt "${packages[@]}"
        fi
        echo "$wanted" > "$stamp"
    fi
}
