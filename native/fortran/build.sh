#!/bin/sh
# build.sh PREFIX: build and install Cairn's Fortran module, then the Fortran heat example.
#
#   PREFIX/include/cairn.mod   the module (`use cairn`)
#   PREFIX/lib/libcairnf.a     its procedures (link with -lcairnf -lcairn)
#   PREFIX/bin/heat2d_f        examples/heat2d.f90, linked against PREFIX/lib/libcairn.so
#
# libcairn must already be installed in PREFIX/lib (./run build does both). The compiler is
# $FC (default mpif90, so that the .mod file is the MPI library's compiler's) with $FFLAGS
# (default -O2). A .mod file only works with the compiler (and version) that wrote it; a
# program built with another compiler needs the module built again with that one.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
if [ ! -e "$1/lib/libcairn.so" ]; then
    echo "$0: $1/lib/libcairn.so is missing: install libcairn first (./run build)" >&2
    exit 1
fi
prefix=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
FC=${FC:-mpif90}
FFLAGS=${FFLAGS:--O2}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$prefix/include" "$prefix/bin"

# Compilers write .mod files into the current directory, so compile inside the work directory.
# shellcheck disable=SC2086
(cd "$work" && $FC $FFLAGS -c "$here/cairn.f90" -o cairn.o)
ar rcs "$work/libcairnf.a" "$work/cairn.o"
install -m 0644 "$work/cairn.mod" "$prefix/include/cairn.mod"
install -m 0644 "$work/libcairnf.a" "$prefix/lib/libcairnf.a"

# The example is built the way a user builds against an installed Cairn.
# shellcheck disable=SC2086
(cd "$work" && $FC $FFLAGS -I "$prefix/include" -o heat2d_f "$root/examples/heat2d.f90" \
    -L "$prefix/lib" -lcairnf -lcairn -Wl,-rpath,"$prefix/lib")
install -m 0755 "$work/heat2d_f" "$prefix/bin/heat2d_f"
