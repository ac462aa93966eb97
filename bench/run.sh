#!/bin/sh
# Build and run Cairn's benchmarks.
#
#   bench/run.sh [ckpt] [-n RANKS] [cairn-bench-ckpt options]   e.g. bench/run.sh --mib 64 --json
#   bench/run.sh redundancy [-n RANKS] [options]                 e.g. bench/run.sh redundancy --full
#   bench/run.sh nbody [options]                                 e.g. bench/run.sh nbody --reps 5
#   bench/run.sh flush [-n RANKS] [options]                      e.g. bench/run.sh flush --global /scratch
#   bench/run.sh reduce [options]                                e.g. bench/run.sh reduce --only hash
#   bench/run.sh incremental [options]                           e.g. bench/run.sh incremental --mib 64
#   bench/run.sh fs [options]                                    e.g. bench/run.sh fs --quick
#   bench/run.sh transparent [options]                           e.g. bench/run.sh transparent --only write
#   bench/run.sh launch [options]                                e.g. bench/run.sh launch --quick
#   bench/run.sh mpi [options]                                   e.g. bench/run.sh mpi --quick
#   bench/run.sh peers [options]                                 bench/peers/run.sh, when it is there
#
# Every part prints its tables, and also writes its results as JSON to
# target/bench-results/<part>.json and plots of them (cairn-bench-plot) to
# target/bench-results/plots/<part>-*.svg, both replaced when a run completes and named at
# the end (a run that fails leaves those of the last one that completed). With --json or
# --json-out FILE among the options, the part prints or writes its JSON as asked and nothing
# else (no results file, no plots), as before.
#
# Ranks default to 4 for the checkpoint benchmark, 10 for the redundancy one (8 for the
# engine test on 4 simulated nodes, 10 for rs(8+2) on 10) and 2 for the flush one.
# `--oversubscribe` lets Open MPI start more ranks than cores; with another MPI, run the
# binaries under its own launcher instead (see bench/README.md). `nbody` is not started
# under mpirun: it builds examples/nbody.c and runs mpirun itself. `fs` is not either: it
# starts its own writer processes (and tries the LD_PRELOAD interposer built beside it).
# `transparent` is not either: it compiles the C programs of bench/transparent/ and runs them
# under libcairn-ckpt.so and cairn-restore, which building cairn-bench puts beside it.
# `launch` is not either: it builds the `cairn` command too (cairn-cli), compiles the C
# programs of bench/launch/ and runs them under `cairn launch` and under DMTCP (from
# /opt/cairn-peers/dmtcp, which bench/peers/build.sh --only dmtcp builds; without it, the
# DMTCP comparisons are left out).
# `mpi` is not either: it builds the `cairn` command, the transparent-checkpointing library
# and the C API too, compiles bench/launch/stencil_app.c with mpicc and runs it under
# `cairn launch -- mpirun` and under plain mpirun itself. It draws no plots (yet).
# `reduce` is one process without MPI; the first time, it creates a Python venv in
# target/bench-venv with the pinned python-blosc2 of its baseline
# (bench/reduce/requirements.txt; as root on Debian it installs python3-venv if needed).
# `peers` runs bench/peers/run.sh with the options given and `--json <results file>`.
set -eu
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
part=ckpt
bin=cairn-bench-ckpt
ranks=4
case "${1:-}" in
ckpt)
    shift
    ;;
redundancy)
    part=redundancy
    bin=cairn-bench-redundancy
    ranks=10
    shift
    ;;
flush)
    part=flush
    bin=cairn-bench-flush
    ranks=2
    shift
    ;;
nbody | incremental | fs | transparent | launch | mpi | reduce | peers)
    part=$1
    shift
    ;;
esac
# Did the caller ask for JSON themselves? Then run the part as asked, and only that.
own_json=no
for a in "$@"; do
    case $a in
    --json | --json=* | --json-out | --json-out=*) own_json=yes ;;
    esac
done
# How the part takes the file to write its JSON to.
json_opt=--json-out
if [ "$(id -u)" -eq 0 ]; then
    # Open MPI refuses to run as root without both of these.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
case $part in
ckpt | redundancy | flush)
    if [ "${1:-}" = "-n" ]; then
        ranks=$2
        shift 2
    fi
    cargo build --release -p cairn-bench >&2
    set -- mpirun --oversubscribe -n "$ranks" "$target/release/$bin" "$@"
    ;;
nbody)
    cargo build --release -p cairn-bench -p cairn-capi >&2
    set -- "$target/release/cairn-bench-redundancy" nbody "$@"
    ;;
incremental | fs | transparent)
    cargo build --release -p cairn-bench >&2
    set -- "$target/release/cairn-bench-$part" "$@"
    ;;
launch)
    cargo build --release -p cairn-bench -p cairn-cli >&2
    set -- "$target/release/cairn-bench-launch" "$@"
    ;;
mpi)
    cargo build --release -p cairn-bench -p cairn-cli -p cairn-ckpt -p cairn-capi >&2
    set -- "$target/release/cairn-bench-mpi" "$@"
    ;;
reduce)
    cargo build --release -p cairn-bench >&2
    venv="$target/bench-venv"
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
    set -- "$target/release/cairn-bench-reduce" --python "$venv/bin/python" "$@"
    ;;
peers)
    if [ ! -f bench/peers/run.sh ]; then
        echo "run.sh: bench/peers/run.sh is not there: no peer comparison to run" >&2
        exit 1
    fi
    # The plotter; the script builds what it compares itself.
    cargo build --release -p cairn-bench >&2
    if [ -x bench/peers/run.sh ]; then
        set -- bench/peers/run.sh "$@"
    else
        set -- bash bench/peers/run.sh "$@"
    fi
    json_opt=--json
    ;;
esac
if [ "$own_json" = yes ]; then
    exec "$@"
fi
results=$target/bench-results
json=$results/$part.json
plots=$results/plots
# Our benchmarks write a new file, so the results of the last run that completed stay until
# one has; bench/peers/run.sh is given the results file itself.
new=$results/.$part.json.new
if [ "$part" = peers ]; then
    new=$json
fi
mkdir -p "$plots"
[ "$new" = "$json" ] || rm -f "$new"
status=0
"$@" "$json_opt" "$new" || status=$?
if [ "$status" -ne 0 ]; then
    [ "$new" = "$json" ] || rm -f "$new"
    exit "$status"
fi
if [ ! -f "$new" ]; then
    # --help and the like: nothing was measured.
    exit 0
fi
[ "$new" = "$json" ] || mv -f "$new" "$json"
if [ "$part" = mpi ]; then
    # cairn-bench-plot does not draw this part yet.
    echo
    echo "results: $json"
    exit 0
fi
rm -f "$plots/$part"-*.svg
if ! files=$("$target/release/cairn-bench-plot" --part "$part" --out "$plots" "$json"); then
    echo "run.sh: could not plot $json (the results are there)" >&2
    exit 1
fi
echo
echo "results: $json"
printf '%s\n' "$files" | sed 's/^/plot:    /'
