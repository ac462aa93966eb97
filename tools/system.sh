# tools/system.sh: checks for the system packages Cairn's build and tests use, sourced by
# ./run and crates/cairn-py/test.sh. Each check tests the file or program the build really
# uses, so that a neighbouring package cannot pass for the needed one.

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Whether bindgen (the MPI bindings' build) can load libclang: the unversioned libclang.so
# that libclang-dev installs, not a neighbour such as libclang-cpp.so.14 that other packages
# bring without it.
have_libclang() {
    local f
    for f in ${LIBCLANG_PATH:+"$LIBCLANG_PATH"/libclang.so} /usr/lib/llvm-*/lib/libclang.so /usr/lib/*/libclang.so /usr/lib/libclang.so; do
        [ -e "$f" ] && return 0
    done
    return 1
}

# Whether python3 can make a virtual environment with pip (python3-venv) and compile
# extensions against its headers (python3-dev): the Python package and mpi4py need both.
have_python_dev() {
    "${PYTHON:-python3}" -c 'import venv, ensurepip' >/dev/null 2>&1 &&
        "${PYTHON:-python3}" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' >/dev/null 2>&1
}

# Install the Debian packages named in "$@" that are missing (as root), or name them and stop.
install_missing() {
    [ $# -gt 0 ] || return 0
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing $*"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq -o DPkg::Lock::Timeout=600
        apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "$@" >/dev/null
    else
        echo "$(basename "$0"): missing system packages: $* (install them with: sudo apt-get install $*)" >&2
        exit 1
    fi
}

# Everything the build uses: compilers, Open MPI, libclang, pkg-config, xxHash's header,
# Python with venv and headers, and Rust; as root, Open MPI is told that running as root is intended.
ensure_system() {
    local missing=()
    # cargo and pip fetch crates and wheels over HTTPS: they need the system's CA bundle.
    [ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    # mpicxx (the C++ tests of the C API and of the compatibility headers) runs g++.
    command -v g++ >/dev/null 2>&1 || missing+=(g++)
    command -v make >/dev/null 2>&1 || missing+=(make)
    command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev)
    command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
    # mpif90 (the Fortran module and example) comes with libopenmpi-dev but needs gfortran.
    command -v gfortran >/dev/null 2>&1 || missing+=(gfortran)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    # xxhash.h: the checkpoint library and the restorer checksum process images with it
    # (inlined, nothing linked); neither is built without it.
    [ -e /usr/include/xxhash.h ] || missing+=(libxxhash-dev)
    # libpmix's server interface: cairn-prun, the launcher that starts MPI ranks with a PMIx
    # server inside the job (libopenmpi-dev depends on it too).
    compgen -G '/usr/lib/*/pkgconfig/pmix.pc' >/dev/null || missing+=(libpmix-dev)
    have_libclang || missing+=(libclang-dev)
    # The Python package (PyO3) builds against python3; pip installs into a venv.
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    have_python_dev || missing+=(python3-venv python3-dev)
    install_missing "${missing[@]}"
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "${HOME:-}/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        echo "$(basename "$0"): Rust is not installed; install a current toolchain (1.80 or newer) with rustup, then run this again" >&2
        exit 1
    fi
    # Open MPI refuses to start as root unless told twice; the tests and the demo run as
    # whoever runs this script.
    if [ "$(id -u)" -eq 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
}

# What only the tests use: MPICH, a real Slurm (controller, node daemon, client commands and munge)
# that the batch-system tests start on this machine with private state directories, and
# iproute2 and unshare, with which the tests of jobs across hosts make their hosts
# (tools/nshost).
ensure_test_system() {
    local missing=()
    # MPICH beside Open MPI: its binaries are named with .mpich, and Open MPI stays the
    # system's mpicc and mpirun (alternatives: priority 50 against MPICH's 40).
    for cmd in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge ip:iproute2 unshare:util-linux mpicc.mpich:libmpich-dev mpiexec.mpich:mpich; do
        command -v "${cmd%%:*}" >/dev/null 2>&1 || missing+=("${cmd#*:}")
    done
    install_missing "${missing[@]}"
}
