#!/bin/sh
# Build and run Cairn's benchmarks.
#
#   bench/run.sh [-n RANKS] [cairn-bench-ckpt options]          e.g. bench/run.sh --mib 64 --json
#   bench/run.sh redundancy [-n RANKS] [options]                 e.g. bench/run.sh redundancy --full
#   bench/run.sh nbody [options]                                 e.g. bench/run.sh nbody --reps 5
#   bench/run.sh flush [-n RANKS] [options]                      e.g. bench/run.sh flush --global /scratch
#   bench/run.sh reduce [options]                                e.g. bench/run.sh reduce --only hash
#   bench/run.sh incremental [options]                           e.g. bench/run.sh incremental --mib 64
#   bench/run.sh fs [options]                                    e.g. bench/run.sh fs --quick
#   bench/run.sh transparent [options]                           e.g. bench/run.sh transparent --only write
#
# Ranks default to 4 for the checkpoint benchmark, 10 for the redundancy one (8 for the
# engine test on 4 simulated nodes, 10 for rs(8+2) on 10) and 2 for the flush one.
# `--oversubscribe` lets Open MPI start more ranks than cores; with another MPI, run the
# binaries under its own launcher instead (see bench/README.md). `nbody` is not started
# under mpirun: it builds examples/nbody.c and runs mpirun itself. `fs` is not either: it
# starts its own writer processes (and tries the LD_PRELOAD interposer built beside it).
# `transparent` is not either: it compiles the C programs of bench/transparent/ and runs them
# under libcairn-ckpt.so and cairn-restore, which building cairn-bench puts beside it.
# `reduce` is one process without MPI; the first time, it creates a Python venv in
# target/bench-venv with the pinned python-blosc2 of its baseline
# (bench/reduce/requirements.txt; as root on Debian it installs python3-venv if needed).
set -eu
cd "$(dirname "$0")/.."
bin=cairn-bench-ckpt
ranks=4
case "${1:-}" in
redundancy)
    bin=cairn-bench-redundancy
    ranks=10
    shift
    ;;
flush)
    bin=cairn-bench-flush
    ranks=2
    shift
    ;;
nbody)
    shift
    cargo build --release -p cairn-bench -p cairn-capi >&2
    if [ "$(id -u)" -eq 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    exec "${CARGO_TARGET_DIR:-target}/release/cairn-bench-redundancy" nbody "$@"
    ;;
incremental)
    shift
    cargo build --release -p cairn-bench >&2
    exec "${CARGO_TARGET_DIR:-target}/release/cairn-bench-incremental" "$@"
    ;;
fs)
    shift
    cargo build --release -p cairn-bench >&2
    exec "${CARGO_TARGET_DIR:-target}/release/cairn-bench-fs" "$@"
    ;;
transparent)
    shift
    cargo build --release -p cairn-bench >&2
    exec "${CARGO_TARGET_DIR:-target}/release/cairn-bench-transparent" "$@"
    ;;
reduce)
    shift
    cargo build --release -p cairn-bench >&2
    venv="${CARGO_TARGET_DIR:-target}/bench-venv"
    # python-blosc2, numpy and their dependencies at the versions the Blosc2 baseline was
    # measured with; the venv is (re)made only when this list differs from the one it has.
    req=bench/reduce/requirements.txt
    if ! cmp -s "$req" "$venv/cairn-requirements.txt"; then
        echo "run.sh: setting up $venv for the Blosc2 baseline (once)" >&2
        rm -rf "$venv"
        if ! python3 -m venv "$venv" >/dev/null 2>&1; then
            rm -rf "$venv"
            # Debian's python3 needs python3-venv for `-m venv` (ensurepip).
            if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
                apt-get install -y -q python3-venv >/dev/null 2>&1 ||
                    { apt-get update -q && apt-get install -y -q python3-venv; } >/dev/null 2>&1 ||
                    true
            fi
            python3 -m venv "$venv" >/dev/null 2>&1 || rm -rf "$venv"
        fi
        if [ -x "$venv/bin/pip" ] &&
            "$venv/bin/pip" install -q --disable-pip-version-check --retries 2 --timeout 30 \
                -r "$req" >&2; then
            cp "$req" "$venv/cairn-requirements.txt"
        else
            echo "run.sh: could not set up $venv (no python3 -m venv, or pip failed);" \
                "the Blosc2 baseline will be skipped" >&2
        fi
    fi
    exec "${CARGO_TARGET_DIR:-target}/release/cairn-bench-reduce" --python "$venv/bin/python" "$@"
    ;;
esac
if [ "${1:-}" = "-n" ]; then
    ranks=$2
    shift 2
fi
cargo build --release -p cairn-bench >&2
if [ "$(id -u)" -eq 0 ]; then
    # Open MPI refuses to run as root without both of these.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec mpirun --oversubscribe -n "$ranks" "${CARGO_TARGET_DIR:-target}/release/$bin" "$@"
