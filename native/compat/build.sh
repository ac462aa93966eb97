#!/bin/sh
# build.sh PREFIX [LIB...]: build and install Cairn's compatibility libraries for applications
# written against SCR, FTI or VeloC (default: every one under native/compat/ that exists).
#
#   PREFIX/include/<lib>.h      the header of the original API (scr.h, fti.h, veloc.h)
#   PREFIX/lib/lib<lib>.so      its functions, implemented over libcairn (link with -l<lib>)
#
# Each library is native/compat/<lib>/*.c (with the shared headers of native/compat/common/),
# compiled with mpicc against PREFIX/include/cairn.h
# and cairn_mpi.h and linked to PREFIX/lib/libcairn.so, which must already be installed
# (./run build does both). CC and CFLAGS may be overridden.
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 PREFIX [scr|fti|veloc]..." >&2
    exit 2
fi
if [ ! -e "$1/lib/libcairn.so" ] || [ ! -e "$1/include/cairn.h" ]; then
    echo "$0: $1/lib/libcairn.so or $1/include/cairn.h is missing: install libcairn first (./run build)" >&2
    exit 1
fi
prefix=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
CC=${CC:-mpicc}
CFLAGS=${CFLAGS:--O2}
if [ $# -eq 0 ]; then
    set --
    for d in "$here"/*/; do
        # common/ holds headers the libraries share, not a library.
        [ -d "$d" ] && [ "$(basename "$d")" != common ] && set -- "$@" "$(basename "$d")"
    done
fi
mkdir -p "$prefix/include" "$prefix/lib"
for lib in "$@"; do
    src="$here/$lib"
    if [ ! -f "$src/$lib.h" ]; then
        echo "$0: no compatibility library $lib (expected $src/$lib.h)" >&2
        exit 1
    fi
    tmp="$prefix/lib/.lib$lib.so.tmp.$$"
    # shellcheck disable=SC2086
    $CC $CFLAGS -std=c11 -Wall -Wextra -fPIC -shared -fvisibility=hidden -o "$tmp" \
        "$src"/*.c -I "$src" -I "$here/common" -I "$prefix/include" -L "$prefix/lib" -lcairn \
        -Wl,-rpath,"$prefix/lib"
    mv "$tmp" "$prefix/lib/lib$lib.so"
    install -m 0644 "$src/$lib.h" "$prefix/include/$lib.h"
done
