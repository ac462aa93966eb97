#!/usr/bin/env bash
# Build the peer checkpoint systems (SCR 3.1.0, VeloC 1.8, FTI master, DMTCP 4.2.0) from their
# public sources into an install prefix OUTSIDE the repository, for bench/peers/run.sh and
# (DMTCP) cairn-bench-launch.
#
#   bench/peers/build.sh [--src DIR] [--prefix DIR] [--jobs N] [--only scr|veloc|fti|dmtcp]...
#
#   --src DIR     directory holding one git clone per repository, named as below
#                 (default /tmp/peers-src); a missing one is cloned from GitHub if the
#                 network allows it, else reported as missing
#   --prefix DIR  install prefix (default $CAIRN_PEERS or /opt/cairn-peers); each peer gets
#                 its own sub-prefix: DIR/scr, DIR/veloc, DIR/fti, DIR/dmtcp
#   --jobs N      parallel make jobs (default 2)
#   --only NAME   build only this peer (repeatable)
#
# Repositories (directory name under --src: GitHub owner/name):
#   scr: LLNL/scr       lwgrp: LLNL/lwgrp     dtcmp: LLNL/dtcmp
#   KVTree AXL spath rankstr redset shuffile er: ECP-VeloC/<same name>
#   VELOC: ECP-VeloC/VELOC                    fti: leobago/fti
#   dmtcp: dmtcp/dmtcp
#
# Versions: SCR v3.1.0 with the component tags its bootstrap.sh names for --tag builds
# (KVTree v1.5.0, AXL v0.9.0, spath v0.4.0, rankstr v0.4.0, redset v0.4.0, shuffile v0.4.0,
# er v0.5.0, lwgrp v1.0.6, dtcmp v1.1.5); VeloC veloc-1.8 with the component tags its
# auto-install.py names (KVTree v1.4.0, AXL v0.8.0, rankstr v0.3.0, shuffile v0.3.0,
# redset v0.3.0, er v0.4.0), socket_queue protocol, posix_io=direct (auto-install.py's
# defaults); FTI: the checked-out commit of master (without Fortran/HDF5/examples); DMTCP:
# the release tag 4.2.0 (v4.2.0), configured with its defaults, with one fix to its
# coordinator applied by this script (below, dmtcp_fix_bcheckpoint): from 3.1 to 4.2,
# `dmtcp_command --bcheckpoint` returns at once instead of when the checkpoint is written.
# Each component is exported with `git archive <tag>` into a scratch build tree, so the
# clones under --src are never modified (their checked-out branch does not matter).
#
# Needs: git, cmake >= 3.14, autoconf/automake/libtool (lwgrp, dtcmp from git), mpicc/mpicxx,
# zlib, OpenSSL headers (Debian: cmake autoconf automake libtool zlib1g-dev libssl-dev
# libopenmpi-dev openmpi-bin); DMTCP only git, gcc, g++, make and awk.
set -euo pipefail

SRC=/tmp/peers-src
PREFIX=${CAIRN_PEERS:-/opt/cairn-peers}
JOBS=2
ONLY=()
while [ $# -gt 0 ]; do
    case "$1" in
        --src) SRC=$2; shift 2 ;;
        --prefix) PREFIX=$2; shift 2 ;;
        --jobs|-j) JOBS=$2; shift 2 ;;
        --only) ONLY+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "build.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
want() { [ ${#ONLY[@]} -eq 0 ] && return 0; local x; for x in "${ONLY[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }

declare -A GH=(
    [scr]=LLNL/scr [lwgrp]=LLNL/lwgrp [dtcmp]=LLNL/dtcmp
    [KVTree]=ECP-VeloC/KVTree [AXL]=ECP-VeloC/AXL [spath]=ECP-VeloC/spath
    [rankstr]=ECP-VeloC/rankstr [redset]=ECP-VeloC/redset [shuffile]=ECP-VeloC/shuffile
    [er]=ECP-VeloC/er [VELOC]=ECP-VeloC/VELOC [fti]=leobago/fti [dmtcp]=dmtcp/dmtcp
)

missing=()
if want scr || want veloc || want fti; then
    for tool in git cmake mpicc mpicxx autoreconf libtoolize make; do
        command -v $tool >/dev/null || missing+=("tool: $tool")
    done
    [ -e /usr/include/zlib.h ] || missing+=("zlib headers (Debian: zlib1g-dev)")
    [ -e /usr/include/openssl/md5.h ] || missing+=("OpenSSL headers (Debian: libssl-dev)")
fi
if want dmtcp; then
    for tool in git gcc g++ make awk; do
        command -v $tool >/dev/null || missing+=("tool: $tool (for DMTCP)")
    done
fi

# source: make sure $SRC/<name> is a git clone holding <tag>; clone if possible
need_src() {
    local name=$1 tag=$2
    if [ ! -d "$SRC/$name/.git" ] && [ ! -f "$SRC/$name/HEAD" ]; then
        mkdir -p "$SRC"
        echo "== cloning https://github.com/${GH[$name]} into $SRC/$name"
        if ! git clone -q "https://github.com/${GH[$name]}.git" "$SRC/$name" 2>/dev/null; then
            rm -rf "$SRC/$name"
            missing+=("source: $SRC/$name (git clone of github.com/${GH[$name]}, needs $tag)")
            return 1
        fi
    fi
    if ! git -C "$SRC/$name" rev-parse -q --verify "$tag^{commit}" >/dev/null; then
        missing+=("source: $SRC/$name has no $tag")
        return 1
    fi
}

SCR_DEPS=(lwgrp:v1.0.6 dtcmp:v1.1.5 KVTree:v1.5.0 AXL:v0.9.0 spath:v0.4.0 rankstr:v0.4.0
          redset:v0.4.0 shuffile:v0.4.0 er:v0.5.0 scr:v3.1.0)
VELOC_DEPS=(KVTree:v1.4.0 AXL:v0.8.0 rankstr:v0.3.0 shuffile:v0.3.0 redset:v0.3.0 er:v0.4.0
            VELOC:veloc-1.8)
FTI_DEPS=(fti:HEAD)
DMTCP_TAG=v4.2.0

want scr && for d in "${SCR_DEPS[@]}"; do need_src "${d%%:*}" "${d#*:}" || true; done
want veloc && for d in "${VELOC_DEPS[@]}"; do need_src "${d%%:*}" "${d#*:}" || true; done
want fti && { need_src fti HEAD || true; }
want dmtcp && { need_src dmtcp "$DMTCP_TAG" || true; }

if [ ${#missing[@]} -gt 0 ]; then
    echo "build.sh: cannot build, missing:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    echo "Put clones of the repositories under --src (default /tmp/peers-src) or allow git to reach GitHub." >&2
    exit 1
fi

BUILD=$(mktemp -d /tmp/cairn-peers-build.XXXXXX)
trap 'rm -rf "$BUILD"' EXIT
export CC=mpicc CXX=mpicxx

# export <name> at <tag> into a fresh build tree, echo its path
export_tree() {
    local name=$1 tag=$2 dir="$BUILD/$1-$2"
    rm -rf "$dir"; mkdir -p "$dir"
    git -C "$SRC/$name" archive --format=tar "$tag" | tar -x -C "$dir"
    echo "$dir"
}

cmake_install() {  # name tag prefix [extra cmake args]
    local name=$1 tag=$2 prefix=$3; shift 3
    local dir; dir=$(export_tree "$name" "$tag")
    echo "== $name $tag -> $prefix"
    cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
        -DCMAKE_PREFIX_PATH="$prefix" -DBUILD_SHARED_LIBS=ON -DENABLE_TESTS=OFF \
        -DCMAKE_INSTALL_RPATH="$prefix/lib;$prefix/lib64" "$@" >"$dir/cmake.log" 2>&1 \
        || { tail -30 "$dir/cmake.log"; echo "build.sh: cmake failed for $name" >&2; exit 1; }
    make -C "$dir/build" -j"$JOBS" install >"$dir/make.log" 2>&1 \
        || { tail -40 "$dir/make.log"; echo "build.sh: make failed for $name" >&2; exit 1; }
}

autotools_install() {  # name tag prefix [configure args]
    local name=$1 tag=$2 prefix=$3; shift 3
    local dir; dir=$(export_tree "$name" "$tag")
    echo "== $name $tag -> $prefix"
    ( cd "$dir" && mkdir -p config && autoreconf -fi -I m4 >autoreconf.log 2>&1 \
        && ./configure --prefix="$prefix" "$@" >configure.log 2>&1 \
        && make -j"$JOBS" >make.log 2>&1 && make install >>make.log 2>&1 ) \
        || { tail -30 "$dir"/*.log; echo "build.sh: build failed for $name" >&2; exit 1; }
}

# build and install one peer's components in order (name:tag pairs, as in *_DEPS) into prefix
install_chain() {  # prefix name:tag...
    local prefix=$1 d name tag; shift
    mkdir -p "$prefix"
    for d in "$@"; do
        name=${d%%:*} tag=${d#*:}
        case $name in
            lwgrp) autotools_install "$name" "$tag" "$prefix" ;;
            dtcmp) autotools_install "$name" "$tag" "$prefix" --with-lwgrp="$prefix" ;;
            KVTree|AXL|spath) cmake_install "$name" "$tag" "$prefix" -DMPI=ON ;;
            # RESOURCE_MANAGER NONE: no Slurm job id needed under mpirun; ENABLE_PDSH OFF: pdsh
            # only serves SCR's job scripts (scr_srun & co.); the benchmark uses the C API only
            scr) cmake_install "$name" "$tag" "$prefix" -DSCR_RESOURCE_MANAGER=NONE -DENABLE_PDSH=OFF \
                     -DENABLE_FORTRAN=OFF -DWITH_DTCMP_PREFIX="$prefix" -DSCR_CONFIG_FILE="$prefix/etc/scr.conf" ;;
            VELOC) cmake_install "$name" "$tag" "$prefix" -DCOMM_QUEUE=socket_queue -DPOSIX_IO=direct \
                       -DVELOC_RESOURCE_MANAGER=NONE ;;
            fti) cmake_install "$name" "$tag" "$prefix" -DENABLE_EXAMPLES=OFF -DENABLE_FORTRAN=OFF -DENABLE_HDF5=OFF
                 git -C "$SRC/fti" rev-parse HEAD >"$prefix/FTI_COMMIT" ;;
            *) cmake_install "$name" "$tag" "$prefix" ;;
        esac
    done
}

if want scr; then
    install_chain "$PREFIX/scr" "${SCR_DEPS[@]}"
    echo "SCR installed in $PREFIX/scr"
fi
if want veloc; then
    install_chain "$PREFIX/veloc" "${VELOC_DEPS[@]}"
    echo "VeloC installed in $PREFIX/veloc"
fi
if want fti; then
    install_chain "$PREFIX/fti" "${FTI_DEPS[@]}"
    echo "FTI installed in $PREFIX/fti (commit $(cat "$PREFIX/fti/FTI_COMMIT"))"
fi

# DMTCP's `dmtcp_command --bcheckpoint` sends the coordinator two requests, the blocking
# prefix 'b' alone and then 'c'; from 3.1 to 4.2 the coordinator only knows the prefix as
# part of "bc", so it answers 'b' as an unknown command and 'c' at once, before anything is
# written. The fix, applied to the exported tree's src/dmtcp_coordinator.cpp by this awk
# program (no diff is kept here): in handleUserCommand, 'b' alone arms the reply that the
# coordinator already sends when every process has written its image; in processDmtUserCmd,
# a 'c' after 'b' that starts no checkpoint (no process, or one under way) is answered at
# once with its error rather than never. DMTCP's main branch has reworked these commands.
dmtcp_fix_bcheckpoint() {  # file
    local f=$1
    awk '
        /^DmtcpCoordinator::handleUserCommand\(/ { in_cmd = 1 }
        in_cmd && /^  }$/ {
            print
            print ""
            print "  if (cmd == \"b\") {  // cairn bench/peers/build.sh: --bcheckpoint blocks"
            print "    blockUntilDone = true;"
            print "    blockUntilDoneRemote = -1;"
            print "    return;"
            print "  }"
            in_cmd = 0; fixed++; next
        }
        /blockUntilDoneRemote = remote\.sockfd\(\);/ { in_block = 1 }
        in_block && /handleUserCommand\(cmd, &reply\);/ {
            print
            print "    if (reply.coordCmdStatus != CoordCmdStatus::NOERROR) {"
            print "      // cairn bench/peers/build.sh: no checkpoint started, answer now"
            print "      blockUntilDone = false;"
            print "      blockUntilDoneRemote = -1;"
            print "      remote << reply;"
            print "      remote.close();"
            print "    }"
            in_block = 0; fixed++; next
        }
        { print }
        END { if (fixed != 2) exit 1 }
    ' "$f" >"$f.fixed" && mv "$f.fixed" "$f"
}

if want dmtcp; then
    dir=$(export_tree dmtcp "$DMTCP_TAG")
    echo "== dmtcp $DMTCP_TAG -> $PREFIX/dmtcp"
    dmtcp_fix_bcheckpoint "$dir/src/dmtcp_coordinator.cpp" \
        || { echo "build.sh: could not apply the --bcheckpoint fix to DMTCP $DMTCP_TAG's src/dmtcp_coordinator.cpp (its code changed?)" >&2; exit 1; }
    # DMTCP is built with the system's compilers, not MPI's (CC/CXX are mpicc/mpicxx above).
    ( cd "$dir" && CC=gcc CXX=g++ ./configure --prefix="$PREFIX/dmtcp" >configure.log 2>&1 \
        && make -j"$JOBS" >make.log 2>&1 && make install >>make.log 2>&1 ) \
        || { tail -30 "$dir"/*.log; echo "build.sh: build failed for dmtcp" >&2; exit 1; }
    echo "$DMTCP_TAG $(git -C "$SRC/dmtcp" rev-parse "$DMTCP_TAG^{commit}") with the --bcheckpoint fix of build.sh" \
        >"$PREFIX/dmtcp/DMTCP_VERSION"
    echo "DMTCP installed in $PREFIX/dmtcp ($(cat "$PREFIX/dmtcp/DMTCP_VERSION"))"
fi
