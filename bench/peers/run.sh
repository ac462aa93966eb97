#!/usr/bin/env bash
# Side-by-side benchmark: the same C workload (bench/peers/ckpt.c) through plain stdio, SCR,
# VeloC and FTI built from their sources, Cairn's compatibility libraries (libscr, libveloc,
# libfti) and Cairn's native API, in one batch. See bench/peers/README.md.
#
#   bench/peers/run.sh [--mib M] [--k K] [--reps R] [-n RANKS] [--dir DIR] [--json FILE]
#                      [--only SYSTEM[,SYSTEM...]] [--keep-logs]
#
#   --mib M     MiB per rank (default 256)
#   --k K       checkpoints per run (default 5); the restart restores checkpoint K
#   --reps R    runs of every case (default 3), interleaved: each repetition runs all cases,
#               in an order rotated from the previous repetition's
#   -n RANKS    MPI ranks (default 4; even, split over 2 simulated nodes)
#   --dir DIR   where the run's private directory is made (default /dev/shm)
#   --json FILE also write every sample as JSON
#   --only S,.. run only these systems (plain is always run: it is the baseline)
#   --keep-logs keep the per-run logs (printed path) instead of deleting them
#
# Peers are looked for under $CAIRN_PEERS (default /opt/cairn-peers: scr/, veloc/, fti/, as
# bench/peers/build.sh installs them); a peer that is not there is skipped with a message.
# Cairn is taken from $CAIRN_BUILD (default <repo>/build, made by ./run build); its
# libraries are copied into the run directory first, so a rebuild during the batch does not
# change what is measured.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PEERS=${CAIRN_PEERS:-/opt/cairn-peers}
CAIRN_BUILD=${CAIRN_BUILD:-$REPO/build}
MIB=256 K=5 REPS=3 RANKS=4 BASEDIR=/dev/shm JSON="" ONLY="" KEEP_LOGS=0
SIM_NODES=2

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --mib) MIB=$2; shift 2 ;;
        --k) K=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        -n|--ranks) RANKS=$2; shift 2 ;;
        --dir) BASEDIR=$2; shift 2 ;;
        --json) JSON=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --keep-logs) KEEP_LOGS=1; shift ;;
        -h|--help) usage ;;
        *) echo "run.sh: unknown option $1" >&2; usage ;;
    esac
done
for v in MIB K REPS RANKS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --${v,,} must be a positive integer" >&2; exit 2; }
done
if [ $((RANKS % SIM_NODES)) -ne 0 ]; then
    echo "run.sh: -n must be a multiple of $SIM_NODES (ranks are split over $SIM_NODES simulated nodes)" >&2
    exit 2
fi
[ -n "$JSON" ] && JSON=$(realpath -m "$JSON")
command -v mpicc >/dev/null && command -v mpirun >/dev/null \
    || { echo "run.sh: mpicc and mpirun are needed (Debian: libopenmpi-dev openmpi-bin)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "run.sh: python3 is needed for the report" >&2; exit 1; }
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# ---------------------------------------------------------------- memory check
# buffers (ranks x MiB) + up to 2 kept checkpoints with one full copy of redundancy each
# (4 x ranks x MiB) + the one being written (2 x ranks x MiB) + slack
need_mib=$(( RANKS * MIB * 7 + 512 ))
avail_mib=$(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo)
free_mib=$(df -Pm "$BASEDIR" | awk 'NR==2 {print $4}')
if [ "$avail_mib" -lt "$need_mib" ] || [ "$free_mib" -lt $(( RANKS * MIB * 6 )) ]; then
    echo "run.sh: needs about $need_mib MiB of memory and $(( RANKS * MIB * 6 )) MiB free in $BASEDIR" \
         "(have $avail_mib MiB available, $free_mib MiB free); use a smaller --mib" >&2
    exit 1
fi

WORK=$(mktemp -d "$BASEDIR/cairn-peers-XXXXXX") || exit 1
chmod 700 "$WORK"
BIN=$WORK/bin; RUN=$WORK/run; LOGS=$WORK/logs
mkdir -p "$BIN" "$RUN" "$LOGS"
VELOC_READY=/dev/shm/veloc-backend-ready-$(id -u)
cleanup() {
    stop_veloc_backend
    if [ "$KEEP_LOGS" = 1 ]; then
        rm -rf "$RUN" "$BIN"
        echo "logs kept in $LOGS" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The VeloC backend (async mode) is a daemon, one per host and user, that keeps the
# configuration it was started with; its pid is in $VELOC_READY. veloc_backend_pid prints it
# if that backend is one this run started (its command line names our directory).
veloc_backend_pid() {
    local pid
    [ -f "$VELOC_READY" ] || return 1
    pid=$(od -An -tu4 -N4 "$VELOC_READY" 2>/dev/null | tr -d ' ')
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "veloc-backend $RUN/" || return 1
    echo "$pid"
}
# VeloC 1.8's veloc-backend daemonises by forking: the child signals the parent (SIGUSR1) once
# it is ready, but the parent installs its handler only after the fork, so on a busy machine
# the parent can die of that signal and VELOC_Init fails ("User defined signal 1"). So the
# async case starts the backend itself before each run (the child is up even when its parent
# died) and VELOC_Init finds it running.
start_veloc_backend() {  # config file
    local try
    for try in 1 2 3; do
        ( cd "$(dirname "$1")" && timeout 30 "$PEERS/veloc/bin/veloc-backend" "$1" --disable-ec ) \
            >/dev/null 2>&1
        for _ in $(seq 50); do veloc_backend_pid >/dev/null && return 0; sleep 0.1; done
    done
    echo "run.sh: could not start $PEERS/veloc/bin/veloc-backend $1" >&2
    return 1
}
# stop our backend after every run (by the pid it recorded)
stop_veloc_backend() {
    local pid
    pid=$(veloc_backend_pid) || return 0
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
}

# ---------------------------------------------------------------- build the variants
echo "== building into $BIN"
CFLAGS=(-O2 -std=c11 -Wall -Wextra)
SYSTEMS=(plain)
skip() { echo "   SKIP $1: $2"; }
want() { [ -z "$ONLY" ] || [ "$1" = plain ] || [[ ",$ONLY," == *",$1,"* ]]; }

# build_variant system backend [prefix library]: ckpt.c as $BIN/ckpt-<system>, linked against
# <prefix>/lib/lib<library>.so with <prefix>/include's headers
build_variant() {
    local sys=$1 backend=$2 prefix=${3:-} lib=${4:-}
    local -a link=()
    [ -n "$prefix" ] && link=(-I"$prefix/include" -L"$prefix/lib" -Wl,-rpath,"$prefix/lib" -l"$lib")
    mpicc "${CFLAGS[@]}" -DBACKEND_$backend -o "$BIN/ckpt-$sys" "$HERE/ckpt.c" "${link[@]}"
}
# build_peer system library: the peer's variant, if wanted and installed in $PEERS/<system>
build_peer() {
    local sys=$1 lib=$2 P=$PEERS/$1
    want "$sys" || return 1
    if [ ! -e "$P/lib/lib$lib.so" ] || [ ! -e "$P/include/$sys.h" ]; then
        skip "$sys" "not installed in $P (bench/peers/build.sh)"
        return 1
    fi
    build_variant "$sys" "${sys^^}" "$P" "$lib"
}

build_variant plain PLAIN || exit 1

CAIRN=$WORK/cairn
CAIRN_INFO=none
if [ -e "$CAIRN_BUILD/lib/libcairn.so" ] && [ -e "$CAIRN_BUILD/include/cairn.h" ]; then
    mkdir -p "$CAIRN/lib" "$CAIRN/include"
    # Headers with their directories (veloc.h includes <veloc/defs.h>).
    cp -R "$CAIRN_BUILD"/include/. "$CAIRN/include/"
    cp "$CAIRN_BUILD"/lib/lib*.so "$CAIRN/lib/"
    CAIRN_INFO="libcairn.so of $(date -u -r "$CAIRN_BUILD/lib/libcairn.so" '+%Y-%m-%d %H:%M UTC')"
    if head=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null); then
        dirty=$(git -C "$REPO" status --porcelain -- crates native 2>/dev/null | wc -l)
        CAIRN_INFO="$CAIRN_INFO, repository at $head"
        [ "$dirty" -gt 0 ] && CAIRN_INFO="$CAIRN_INFO ($dirty files changed under crates/ native/)"
    fi
    echo "   cairn: $CAIRN_INFO"
    want cairn-native && build_variant cairn-native CAIRN "$CAIRN" cairn && SYSTEMS+=(cairn-native)
    want cairn-file && build_variant cairn-file CAIRNFILE "$CAIRN" cairn && SYSTEMS+=(cairn-file)
    for lib in scr veloc fti; do
        want "cairn-lib$lib" || continue
        if [ -e "$CAIRN/lib/lib$lib.so" ] && [ -e "$CAIRN/include/$lib.h" ]; then
            build_variant "cairn-lib$lib" "${lib^^}" "$CAIRN" "$lib" && SYSTEMS+=("cairn-lib$lib")
        else
            skip "cairn-lib$lib" "$CAIRN_BUILD/lib/lib$lib.so or include/$lib.h missing (./run build)"
        fi
    done
else
    skip cairn "$CAIRN_BUILD/lib/libcairn.so missing: run ./run build (or set CAIRN_BUILD)"
fi

# SCR's two simulated nodes need a private mount namespace per rank (simnode.sh)
if want scr && ! { command -v unshare >/dev/null && unshare -m true 2>/dev/null; }; then
    skip scr "its 2 simulated nodes need private mount namespaces (unshare -m: root or CAP_SYS_ADMIN)"
elif build_peer scr scr; then
    gcc -O2 -Wall -fPIC -shared -o "$BIN/simhost.so" "$HERE/simhost.c" && SYSTEMS+=(scr)
fi
if build_peer veloc veloc-client; then
    SYSTEMS+=(veloc)
    [ -x "$PEERS/veloc/bin/veloc-backend" ] \
        || echo "   note: $PEERS/veloc/bin/veloc-backend missing: the veloc async case will fail"
fi
build_peer fti fti && SYSTEMS+=(fti)
have() { [[ " ${SYSTEMS[*]} " == *" $1 "* ]]; }

# ---------------------------------------------------------------- the cases
# system:scheme
CASES=(plain:single)
for s in single partner xor; do have scr && CASES+=(scr:$s); done
for s in single partner xor rs; do have cairn-libscr && CASES+=(cairn-libscr:$s); done
for s in single partner xor rs; do have cairn-native && CASES+=(cairn-native:$s); done
for s in single partner xor rs; do have cairn-file && CASES+=(cairn-file:$s); done
for s in single partner rs; do have fti && CASES+=(fti:$s); done
for s in single partner rs; do have cairn-libfti && CASES+=(cairn-libfti:$s); done
for s in single async; do have veloc && CASES+=(veloc:$s); done
for s in single async; do have cairn-libveloc && CASES+=(cairn-libveloc:$s); done

# configuration files and environment of one case, in directory $1
FTI_LEVEL=1
write_fti_config() {  # dir scheme
    local l2=0 l3=0
    case $2 in partner) l2=1; FTI_LEVEL=2 ;; rs) l3=1; FTI_LEVEL=3 ;; *) FTI_LEVEL=1 ;; esac
    mkdir -p "$1/local" "$1/global" "$1/meta"
    cat >"$1/config.fti" <<EOF
# FTI configuration of this case; node_size with local_test = 1 makes each block of
# node_size ranks a node of its own (directory $1/local/node<i>)
[basic]
head = 0
node_size = $((RANKS / SIM_NODES))
ckpt_dir = $1/local
glbl_dir = $1/global
meta_dir = $1/meta
ckpt_l1 = 0
ckpt_l2 = $l2
ckpt_l3 = $l3
ckpt_l4 = 0
inline_l2 = 1
inline_l3 = 1
inline_l4 = 1
keep_last_ckpt = 0
group_size = $SIM_NODES
max_sync_intv = 512
ckpt_io = 1
verbosity = 3

[restart]
failure = 0
exec_id = none

[advanced]
block_size = 1024
transfer_size = 16
local_test = 1
EOF
}

write_veloc_config() {  # dir mode
    mkdir -p "$1/scratch" "$1/persistent"
    # persistent_interval: VeloC 1.8's restart fails unless a module (persistence or EC)
    # accepts the restart command, so persistence is on with an interval no run reaches:
    # nothing is ever flushed. ec_interval = -1: no erasure coding (VeloC runs it between
    # one backend per host, so it cannot protect against a node of one host).
    # max_parallelism: VeloC's default is the number of cores (2 here), and with more
    # ranks than that on a node it refuses to aggregate and its restart fails.
    cat >"$1/veloc.cfg" <<EOF
scratch = $1/scratch
persistent = $1/persistent
mode = $2
persistent_interval = 86400
ec_interval = -1
scratch_versions = 2
max_parallelism = 64
log_prefix = $1
EOF
}

# run one case once: prints "system scheme op seconds" lines into $RESULTS
RESULTS=$WORK/results.tsv
FAILURES=$WORK/failures.txt
: >"$RESULTS"; : >"$FAILURES"
run_case() {  # system scheme rep
    local sys=$1 scheme=$2 rep=$3
    local dir=$RUN/$sys-$scheme
    rm -rf "$dir"; mkdir -p "$dir"
    local log=$LOGS/$sys-$scheme.$rep
    local -a env=() args=(--mib "$MIB" --k "$K") launch=()
    local upper=""
    case $scheme in single) upper=SINGLE ;; partner) upper=PARTNER ;; xor) upper=XOR ;; rs) upper=RS ;; esac
    case $sys in
        plain)
            args+=(--dir "$dir") ;;
        scr|cairn-libscr)
            mkdir -p "$dir/prefix" "$dir/cache"
            env+=(SCR_PREFIX="$dir/prefix" SCR_COPY_TYPE=$upper SCR_CACHE_BYPASS=0 SCR_FLUSH=0
                  SCR_CACHE_SIZE=2 SCR_SET_FAILURES=1 SCR_JOB_ID=cairnpeers
                  SCR_USER_NAME="$(id -un)" SCR_CONF_FILE="$dir/scr.conf")
            : >"$dir/scr.conf"
            if [ "$sys" = scr ]; then
                env+=(SIM_NODES=$SIM_NODES SIM_BASE="$dir/sim" SIMHOST_SO="$BIN/simhost.so")
                mkdir -p "$dir/sim"
                launch=("$HERE/simnode.sh")
            else
                env+=(SCR_CACHE_BASE="$dir/cache")
            fi ;;
        cairn-native|cairn-file)
            env+=(CAIRN_TIERS_LOCAL="$dir/local" CAIRN_TIERS_GLOBAL="$dir/global"
                  CAIRN_REDUNDANCY_SCHEME=$scheme)
            [ "$scheme" = rs ] && env+=(CAIRN_REDUNDANCY_PARITY=1) ;;
        fti|cairn-libfti)
            write_fti_config "$dir" "$scheme"
            args+=(--config "$dir/config.fti" --level "$FTI_LEVEL") ;;
        veloc|cairn-libveloc)
            local mode=sync
            [ "$scheme" = async ] && mode=async
            write_veloc_config "$dir" "$mode"
            args+=(--config "$dir/veloc.cfg")
            env+=(VELOC_BIN="$PEERS/veloc/bin") ;;
    esac
    case $sys in
        cairn-*) env+=(CAIRN_TOPOLOGY_SIM_NODES=$SIM_NODES CAIRN_CHECKPOINT_FINALIZE=false
                       LD_LIBRARY_PATH="$CAIRN/lib") ;;
    esac
    local -a xs=()
    local e
    for e in "${env[@]}"; do xs+=(-x "$e"); done
    local ok=1 op
    for op in checkpoint restart; do
        [ "$sys:$scheme" = veloc:async ] && start_veloc_backend "$dir/veloc.cfg" >>"$log" 2>&1
        ( cd "$dir" && mpirun --oversubscribe -n "$RANKS" "${xs[@]}" \
              "${launch[@]}" "$BIN/ckpt-$sys" $op "${args[@]}" ) >>"$log" 2>&1
        local rc=$?
        stop_veloc_backend
        # a run counts only if it printed its results: K checkpoints, a verified restart
        if [ $rc -eq 0 ] && [ $op = checkpoint ] \
            && [ "$(grep -c '^RESULT checkpoint ' "$log")" -ne "$K" ]; then
            echo "run.sh: $K checkpoint results expected" >>"$log"; rc=101
        fi
        if [ $rc -eq 0 ] && [ $op = restart ] && ! grep -q '^VERIFY ok ' "$log"; then
            echo "run.sh: no VERIFY ok line: the restored data was not verified" >>"$log"; rc=102
        fi
        if [ $rc -ne 0 ]; then
            ok=0
            {
                echo "FAILED: $sys $scheme $op (repetition $rep, exit $rc); last lines of $log:"
                grep -v '^\s*$' "$log" | tail -n 12 | sed 's/^/    /'
            } >>"$FAILURES"
            echo "   FAILED $sys $scheme $op (exit $rc)"
            break
        fi
    done
    awk -v s="$sys" -v c="$scheme" '
        $1 == "RESULT" && $2 == "checkpoint" { print s "\t" c "\tcheckpoint\t" $4 }
        $1 == "RESULT" && $2 == "restart"    { print s "\t" c "\trestart\t" $4 }' "$log" >"$log.res"
    if [ $ok = 1 ]; then
        cat "$log.res" >>"$RESULTS"
        local line
        line=$(awk '$1 == "RESULT" && $2 == "checkpoint" {printf " %.3f", $4}
                    $1 == "RESULT" && $2 == "restart" {printf " | restart %.3f (init %s)", $4, $5}' "$log" \
               | sed 's/init=//')
        printf '   %-15s %-8s ckpt%s\n' "$sys" "$scheme" "$line"
    fi
    rm -rf "$dir"
    [ "$KEEP_LOGS" = 1 ] || rm -f "$log" "$log.res"
}

echo "== $RANKS ranks on $SIM_NODES simulated nodes, $MIB MiB per rank, $K checkpoints a run," \
     "$REPS repetitions, ${#CASES[@]} cases, in $WORK"
echo "   systems: ${SYSTEMS[*]}"
n=${#CASES[@]}
step=$(( n / REPS )); [ $step -ge 1 ] || step=1
start_time=$(date +%s)
for ((rep = 0; rep < REPS; rep++)); do
    echo "-- repetition $((rep + 1))/$REPS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    for ((i = 0; i < n; i++)); do
        c=${CASES[$(( (i + rep * step) % n ))]}
        run_case "${c%%:*}" "${c#*:}" "$rep"
    done
done
echo "== done in $(( $(date +%s) - start_time )) s (load average $(cut -d' ' -f1-3 /proc/loadavg))"

# ---------------------------------------------------------------- report
python3 - "$RESULTS" "$RANKS" "$MIB" "$K" "$REPS" "$JSON" "$FAILURES" "$CAIRN_INFO" <<'EOF'
import json, statistics, sys
results, ranks, mib, k, reps, json_path, failures, cairn_info = sys.argv[1:9]
ranks, mib, k, reps = int(ranks), int(mib), int(k), int(reps)
samples = {}
for line in open(results):
    sysname, scheme, op, sec = line.split("\t")
    samples.setdefault((sysname, scheme, op), []).append(float(sec))
med = {key: statistics.median(v) for key, v in samples.items()}
order = ["plain", "scr", "cairn-libscr", "fti", "cairn-libfti", "veloc", "cairn-libveloc",
         "cairn-native", "cairn-file"]
schemes = ["single", "partner", "xor", "rs", "async"]
keys = sorted({(s, c) for (s, c, _) in samples},
              key=lambda x: (order.index(x[0]) if x[0] in order else 99, schemes.index(x[1])))

def fmt(x):
    return "-" if x is None else ("%.3f" % x if x < 100 else "%.0f" % x)

base_c = med.get(("plain", "single", "checkpoint"))
base_r = med.get(("plain", "single", "restart"))
gib = ranks * mib / 1024
print()
print(f"{ranks} ranks x {mib} MiB ({gib:.2f} GiB a checkpoint), {k} checkpoints a run, "
      f"{reps} runs a case; medians over all samples (checkpoint: {k} x runs, restart: runs)")
print(f"Cairn: {cairn_info}")
print()
hdr = f"{'system':<15} {'scheme':<8} {'ckpt s':>8} {'÷ fwrite':>9} {'GiB/s':>7} {'n':>3}   {'restart s':>9} {'÷ fread':>8} {'n':>3}"
print(hdr)
print("-" * len(hdr))
for s, c in keys:
    ck = med.get((s, c, "checkpoint")); rs = med.get((s, c, "restart"))
    nc = len(samples.get((s, c, "checkpoint"), [])); nr = len(samples.get((s, c, "restart"), []))
    rc = ck / base_c if ck and base_c else None
    rr = rs / base_r if rs and base_r else None
    bw = gib / ck if ck else None
    print(f"{s:<15} {c:<8} {fmt(ck):>8} {fmt(rc):>9} {fmt(bw):>7} {nc:>3}   {fmt(rs):>9} {fmt(rr):>8} {nr:>3}")

pairs = [("cairn-libscr", "scr", "Cairn through libscr ÷ SCR"),
         ("cairn-libfti", "fti", "Cairn through libfti ÷ FTI"),
         ("cairn-libveloc", "veloc", "Cairn through libveloc ÷ VeloC"),
         ("cairn-native", "scr", "Cairn native ÷ SCR"),
         ("cairn-native", "fti", "Cairn native ÷ FTI"),
         ("cairn-native", "veloc", "Cairn native ÷ VeloC"),
         ("cairn-libscr", "cairn-file", "libscr ÷ Cairn native file API"),
         ("cairn-libfti", "cairn-native", "libfti ÷ Cairn native"),
         ("cairn-libveloc", "cairn-native", "libveloc ÷ Cairn native")]
print()
hdr = f"{'ratio (< 1: Cairn faster)':<32} {'scheme':<8} {'checkpoint':>10} {'restart':>8}"
print(hdr)
print("-" * len(hdr))
for a, b, label in pairs:
    for c in schemes:
        cb = c
        if b == "cairn-native" and c == "async":
            continue
        if a == "cairn-native" and c == "async":
            continue
        ka, kb = (a, c), (b, cb)
        if (a, c, "checkpoint") not in med or (b, cb, "checkpoint") not in med:
            continue
        r1 = med[(a, c, "checkpoint")] / med[(b, cb, "checkpoint")]
        r2 = None
        if (a, c, "restart") in med and (b, cb, "restart") in med:
            r2 = med[(a, c, "restart")] / med[(b, cb, "restart")]
        print(f"{label:<32} {c:<8} {fmt(r1):>10} {fmt(r2):>8}")

fails = open(failures).read()
if fails:
    print()
    print("Failures:")
    print(fails, end="")

if json_path:
    runs = [{"system": s, "scheme": c, "op": op, "seconds": v}
            for (s, c, op), v in sorted(samples.items(),
                key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order else 99,
                                schemes.index(kv[0][1]), kv[0][2]))]
    failed = [l[len("FAILED: "):].split(" (")[0] for l in fails.splitlines() if l.startswith("FAILED: ")]
    with open(json_path, "w") as f:
        json.dump({"ranks": ranks, "mib_per_rank": mib, "checkpoints_per_run": k,
                   "reps": reps, "cairn": cairn_info, "runs": runs, "failed": failed}, f,
                  indent=1)
        f.write("\n")
    print(f"\nJSON written to {json_path}")
EOF
