#!/usr/bin/env bash
# test.sh: build, install and test the Python package `cairn` on a Debian machine.
#
#   crates/cairn-py/test.sh [pytest arguments...]
#
# 1. Checks the system tools (tools/system.sh: Python with venv and headers, Open MPI, libclang,
#    Rust) and, as root, installs missing Debian packages.
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

# shellcheck source=../../tools/system.sh
. "$ROOT/tools/system.sh"

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
# Both runs go ahead whatever the first one gives; the script fails if either failed.
rc=0
say "Python tests, one process"
"$VENV/bin/python" -m pytest -q -m "not mpi" "$@" || rc=1
say "Python tests, MPI jobs (4 ranks, 2 simulated nodes)"
"$VENV/bin/python" -m pytest -q -m mpi "$@" || rc=1
exit $rc
