/*
 * ftif.c: the C side of FTI's Fortran module (fti_mod.f90): the calls whose arguments
 * Fortran cannot pass to fti.h as they are (a Fortran communicator, a bool, the two
 * FTI_InitType forms, the argument-less calls by number).
 */
#include <stdbool.h>

#include <mpi.h>

#include "fti.h"

#pragma GCC visibility push(default)
int cairn_ftif_init(const char *file, MPI_Fint *comm);
int cairn_ftif_init_type(int size);
int cairn_ftif_init_icp(int id, int level, int activate);
int cairn_ftif_call(int which);
#pragma GCC visibility pop

int cairn_ftif_init(const char *file, MPI_Fint *comm)
{
    int rc = FTI_Init(file, MPI_Comm_f2c(*comm));
    if (rc == FTI_SCES || rc == FTI_NREC)
        *comm = MPI_Comm_c2f(FTI_COMM_WORLD);
    return rc;
}

int cairn_ftif_init_type(int size)
{
    return (FTI_InitType)(size);
}

int cairn_ftif_init_icp(int id, int level, int activate)
{
    return FTI_InitICP(id, level, activate != 0);
}

int cairn_ftif_call(int which)
{
    switch (which) {
    case 0: return FTI_Recover();
    case 1: return FTI_Snapshot();
    case 2: return FTI_Finalize();
    case 3: return FTI_RecoverVarInit();
    case 4: return FTI_RecoverVarFinalize();
    case 5: return FTI_FinalizeICP();
    default: return FTI_NSCS;
    }
}
