#!/bin/sh
# Build and run Cairn's benchmarks.
#
#   bench/run.sh [-n RANKS] [cairn-bench-ckpt options]          e.g. bench/run.sh --mib 64 --json
#   bench/run.sh redundancy [-n RANKS] [options]                 e.g. bench/run.sh redundancy --full
#   bench/run.sh nbody [options]                                 e.g. bench/run.sh nbody --reps 5
#   bench/run.sh flush [-n RANKS] [options]                      e.g. bench/run.sh flush --global /scratch
#
# Ranks default to 4 for the checkpoint benchmark, 10 for the redundancy one (8 for the
# engine test on 4 simulated nodes, 10 for rs(8+2) on 10) and 2 for the flush one.
# `--oversubscribe` lets Open MPI start more ranks than cores; with another MPI, run the
# binaries under its own launcher instead (see bench/README.md). `nbody` is not started
# under mpirun: it builds examples/nbody.c and runs mpirun itself.
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
