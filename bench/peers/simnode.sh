#!/bin/sh
# simnode.sh CMD...: run one MPI rank as if it were on simulated node k = rank / (ranks / SIM_NODES).
#
# For SCR, which takes a node to be a host name with its own node-local storage at the same
# path as on every other node (/dev/shm on a cluster). run.sh starts each SCR rank through
# this script, which
#   - sets CAIRN_PEERS_SIMHOST=simnode<k>, returned by gethostname() through the simhost.so
#     shim ($SIMHOST_SO, preloaded), so SCR forms its failure groups from 2 "hosts";
#   - gives the rank a private mount namespace (unshare -m, needs root or CAP_SYS_ADMIN) in
#     which $SIM_BASE/node<k> is bind-mounted on $SIM_BASE/local: every simulated node sees
#     its own storage under the same path, as on separate machines;
#   - points SCR_CACHE_BASE and SCR_CNTL_BASE into $SIM_BASE/local.
# Needs SIM_NODES, SIM_BASE and SIMHOST_SO in the environment.
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}
n=${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-1}}
per=$(( n / SIM_NODES ))
[ "$per" -ge 1 ] || per=1
k=$(( r / per ))
[ "$k" -lt "$SIM_NODES" ] || k=$(( SIM_NODES - 1 ))
export CAIRN_PEERS_SIMHOST=simnode$k
export SCR_CACHE_BASE="$SIM_BASE/local/cache" SCR_CNTL_BASE="$SIM_BASE/local/cntl"
mkdir -p "$SIM_BASE/local" "$SIM_BASE/node$k/cache" "$SIM_BASE/node$k/cntl"
export SIM_NODE_DIR="$SIM_BASE/node$k"
export LD_PRELOAD="$SIMHOST_SO${LD_PRELOAD:+:$LD_PRELOAD}"
exec unshare -m sh -c 'mount --make-rprivate / && mount --bind "$SIM_NODE_DIR" "$SIM_BASE/local" && exec "$@"' simnode "$@"
