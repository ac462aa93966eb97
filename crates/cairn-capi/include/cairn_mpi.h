/*
 * cairn_mpi.h: the MPI entry point of Cairn. Include this instead of cairn.h in MPI programs.
 *
 * Link with -lcairn (pkg-config --cflags --libs cairn). The library uses a duplicate of the
 * communicator given here for all its messages, so they never interfere with the
 * application's own.
 */
#ifndef CAIRN_MPI_H
#define CAIRN_MPI_H

#include <mpi.h>
#include "cairn.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Start Cairn over the ranks of comm. Collective over comm.
 *   comm        [IN] an intra-communicator of the initialised MPI library (MPI_Init first);
 *                    it may be any communicator, not only MPI_COMM_WORLD
 *   config_path [IN] a TOML configuration file, or NULL to use $CAIRN_CONFIG or defaults
 * Returns CAIRN_OK, or an error on every rank if initialisation failed on any rank.
 * Call cairn_finalize() before MPI_Finalize().
 */
int cairn_init(MPI_Comm comm, const char *config_path);

#ifdef __cplusplus
}
#endif

#endif /* CAIRN_MPI_H */
