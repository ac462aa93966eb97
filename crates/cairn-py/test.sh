#!/usr/bin/env bash
# test.sh: build, install and test the Python package `cairn` on a Debian machine.
#
#   crates/cairn-py/test.sh [pytest arguments...]
#
# 1. Checks the system tools (Python with venv and headers, Open MPI, libclang, Rust) and, as
#    root, installs missing Debian packages.
# 2. Creates (or reuses) the virtual environment target/pyenv and installs into it maturin,
#    numpy, pytest, mypy and mpi4py. mpi4py is built from source against the system's Open MPI
#    (--no-binary), so that it and cairn use the same MPI library.
# 3. Builds libcairn.so (the C programs of the interoperability tests link it) and the cairn
#    CLI (a test lists Python checkpoints with it), and installs the package with
#    `pip install ./crates/cairn-py`, as a user would.
# 4. Runs the single-process tests, then the tests that start 4-rank jobs under mpirun with 2
#    simulated nodes. With PYCAIRN_REQUIRE_MPI=1 (set here) a missing mpirun or mpi4py fails
#    the MPI tests instead of skipping them.
#
# PYTHON selects the interpreter the environment is made from (default python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=$ROOT/target/pyenv
PYTHON=${PYTHON:-python3}

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

ensure_system() {
    local missing=()
    command -v "$PYTHON" >/dev/null 2>&1 || missing+=(python3)
    if command -v "$PYTHON" >/dev/null 2>&1; then
        "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
        # mpi4py compiles against Python.h.
        "$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
            || missing+=(python3-dev)
    fi
    command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev)
    command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || missing+=(libclang-dev)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            say "installing ${missing[*]}"
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq "${missing[@]}" >/dev/null
        else
            echo "test.sh: missing system packages: ${missing[*]} (sudo apt-get install ${missing[*]})" >&2
            exit 1
        fi
    fi
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || { echo "test.sh: Rust (cargo) is not installed; install it with rustup" >&2; exit 1; }
    if [ "$(id -u)" -eq 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
}

ensure_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating $VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    local py=$VENV/bin/python
    if ! "$py" -c 'import maturin, numpy, pytest, mypy' >/dev/null 2>&1; then
        say "installing maturin, numpy, pytest and mypy"
        "$py" -m pip install -q --disable-pip-version-check "maturin>=1.7,<2" numpy pytest mypy
    fi
    if ! "$py" -c 'import mpi4py' >/dev/null 2>&1; then
        say "building mpi4py against the system MPI (pip install --no-binary mpi4py mpi4py)"
        "$py" -m pip install -q --disable-pip-version-check --no-binary mpi4py mpi4py
    fi
}

ensure_system
ensure_venv
# maturin's build backend runs the `maturin` program, so the environment's bin/ goes first.
export PATH="$VENV/bin:$PATH"
say "building libcairn and the CLI (cargo build --release -p cairn-capi -p cairn-cli)"
cargo build --release -p cairn-capi -p cairn-cli --quiet
say "installing the package (pip install ./crates/cairn-py)"
# Without build isolation the build uses the maturin installed above rather than fetching one.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation ./crates/cairn-py

export PYCAIRN_REQUIRE_MPI=1
export PYCAIRN_LIBDIR=$ROOT/target/release
cd crates/cairn-py
say "Python tests, one process"
"$VENV/bin/python" -m pytest -q -m "not mpi" "$@"
say "Python tests, MPI jobs (4 ranks, 2 simulated nodes)"
"$VENV/bin/python" -m pytest -q -m mpi "$@"
