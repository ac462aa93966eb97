#!/bin/sh
# build.sh PREFIX [LIB...]: build and install Cairn's compatibility libraries for applications
# written against SCR, FTI or VeloC (default: every one under native/compat/ that exists).
#
#   PREFIX/include/<lib>.h      the header of the original API (scr.h, fti.h, veloc.h)
#   PREFIX/lib/lib<lib>.so      its functions, implemented over libcairn (link with -l<lib>)
#
#   PREFIX/include/<lib>.hpp, PREFIX/include/<lib>/   its C++ API and headers, if it has them
#   PREFIX/include/<lib>f.h     its Fortran include file, if it has one (scrf.h)
#   PREFIX/include/*.mod        its Fortran module, if it has one (fti.mod: `use fti`)
#
# Each library is native/compat/<lib>/*.c and *.cpp (with the shared headers of
# native/compat/common/), compiled with mpicc (and mpicxx) against PREFIX/include/cairn.h
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
CXX=${CXX:-mpicxx}
CXXFLAGS=${CXXFLAGS:--O2}
FC=${FC:-mpif90}
FFLAGS=${FFLAGS:--O2}
for lib in "$@"; do
    src="$here/$lib"
    if [ ! -f "$src/$lib.h" ]; then
        echo "$0: no compatibility library $lib (expected $src/$lib.h)" >&2
        exit 1
    fi
    obj=$(mktemp -d "$prefix/lib/.lib$lib.XXXXXX")
    inc="-I $src -I $here/common -I $prefix/include"
    link=$CC
    for f in "$src"/*.c; do
        # shellcheck disable=SC2086
        $CC $CFLAGS -std=c11 -Wall -Wextra -fPIC -fvisibility=hidden $inc -c "$f" \
            -o "$obj/$(basename "$f").o"
    done
    # A C++ API (veloc.hpp) is compiled with the C++ compiler and links the library with it.
    for f in "$src"/*.cpp; do
        [ -e "$f" ] || continue
        # shellcheck disable=SC2086
        $CXX $CXXFLAGS -std=c++17 -Wall -Wextra -fPIC -fvisibility=hidden \
            -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX $inc -c "$f" -o "$obj/$(basename "$f").o"
        link=$CXX
    done
    # A Fortran module (FTI's `use fti`) is compiled in the object directory, where the
    # compiler writes its .mod file; the library is then linked with the Fortran compiler.
    for f in "$src"/*.f90; do
        [ -e "$f" ] || continue
        # shellcheck disable=SC2086
        (cd "$obj" && $FC $FFLAGS -fPIC -c "$f" -o "$obj/$(basename "$f").o")
        link=$FC
    done
    tmp="$prefix/lib/.lib$lib.so.tmp.$$"
    $link -shared -o "$tmp" "$obj"/*.o -L "$prefix/lib" -lcairn -Wl,-rpath,"$prefix/lib"
    for m in "$obj"/*.mod; do
        if [ -e "$m" ]; then
            install -m 0644 "$m" "$prefix/include/"
        fi
    done
    rm -rf "$obj"
    mv "$tmp" "$prefix/lib/lib$lib.so"
    install -m 0644 "$src/$lib.h" "$prefix/include/$lib.h"
    # A Fortran include file (scrf.h).
    if [ -f "$src/${lib}f.h" ]; then
        install -m 0644 "$src/${lib}f.h" "$prefix/include/${lib}f.h"
    fi
    if [ -f "$src/$lib.hpp" ]; then
        install -m 0644 "$src/$lib.hpp" "$prefix/include/$lib.hpp"
    fi
    # Headers of the API's own directory (<veloc/defs.h>, ...).
    if [ -d "$src/$lib" ]; then
        mkdir -p "$prefix/include/$lib"
        install -m 0644 "$src/$lib"/*.h* "$prefix/include/$lib/"
    fi
done
