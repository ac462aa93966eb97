#!/bin/sh
# Build and run Cairn's checkpoint benchmark.
#
#   bench/run.sh [-n RANKS] [cairn-bench-ckpt options]     e.g. bench/run.sh --mib 64 --json
#
# Ranks default to 4. `--oversubscribe` lets Open MPI start more ranks than cores; with
# another MPI, run the binary under its own launcher instead (see bench/README.md).
set -eu
cd "$(dirname "$0")/.."
ranks=4
if [ "${1:-}" = "-n" ]; then
    ranks=$2
    shift 2
fi
cargo build --release -p cairn-bench >&2
if [ "$(id -u)" -eq 0 ]; then
    # Open MPI refuses to run as root without both of these.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec mpirun --oversubscribe -n "$ranks" "${CARGO_TARGET_DIR:-target}/release/cairn-bench-ckpt" "$@"
