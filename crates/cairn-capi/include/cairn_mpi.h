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

/*
 * cairn_init for a Fortran communicator handle; the Fortran module (use cairn) calls it.
 * Collective over the communicator.
 *   comm        [IN] a Fortran handle: the INTEGER of `use mpi` / mpif.h, or comm%MPI_VAL of
 *                    `use mpi_f08`; it is converted with MPI_Comm_f2c
 *   config_path [IN] a TOML configuration file, or NULL to use $CAIRN_CONFIG or defaults
 * Returns what cairn_init returns, and CAIRN_ERR_INVALID if comm names no communicator, or
 * CAIRN_ERR_COMM if MPI is not running (before MPI_Init or after MPI_Finalize).
 */
int cairn_init_f(MPI_Fint comm, const char *config_path);

#ifdef __cplusplus
}
#endif

#endif /* CAIRN_MPI_H */
