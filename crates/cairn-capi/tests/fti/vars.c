/*
 * vars.c -- FTI's calls beyond checkpoint-and-recover-all, on Cairn: variables named with
 * FTI_setIDFromString, their stored sizes (FTI_GetStoredSize), FTI_Realloc to that size,
 * recovery one variable at a time (FTI_RecoverVarInit / FTI_RecoverVar / _Finalize), an
 * incremental checkpoint (FTI_InitICP / FTI_AddVarICP / FTI_FinalizeICP) whose variables
 * change after they were added, FTI_NREC, staging a file (FTI_SendFile), and the file's
 * settings as FTI_GetConfig gives them. Built against
 * Cairn's fti.h, linked with -lfti only; run under mpirun, twice: the first run checkpoints
 * and stops without FTI_Finalize (as a failed run), the second recovers.
 *
 * Usage: vars CONFIG first|second|none
 *   first:  reads the file back with FTI_GetConfig (it must say Ckpt_dir = local, Glbl_dir =
 *           global, Node_size = 2, no Ckpt_io, and 4 ranks); names "alpha" (n ints) and
 *           "beta" (2n doubles, n = 100 + rank), checkpoints them with iCP, changing alpha
 *           after it was added; stages a file; exits without FTI_Finalize.
 *   second: finds FTI_Status() != 0, looks the names up, reallocates beta from a 1-element
 *           buffer, recovers alpha and beta one by one, checks every value; checkpoints,
 *           recovers that checkpoint in the same run, calls FTI_Init again (no FTI_Finalize
 *           before it) and recovers once more; finalizes.
 *   none:   expects FTI_Init to return FTI_NREC (the file says a restart is expected and
 *           there is nothing to recover), then finalizes.
 * Output: "vars: <step> ok" (rank 0), "vars: rank <r> FAIL <what>" on a failed check.
 * Exit codes: 0 success, 2 bad arguments, 5 a check failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fti.h>
#include <mpi.h>

static int rank;

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("vars: rank %d FAIL %s\n", rank, what);
        fflush(stdout);
        MPI_Finalize();
        exit(5);
    }
}

static void step_ok(const char *what)
{
    if (rank == 0)
        printf("vars: %s ok\n", what);
    fflush(stdout);
}

static int alpha_value(int i) { return 7 * i + rank; }
static double beta_value(int i) { return 0.25 * i - rank; }

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    const char *mode = argv[2];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int n = 100 + rank;
    int init = FTI_Init(argv[1], MPI_COMM_WORLD);

    if (strcmp(mode, "none") == 0) {
        check(init == FTI_NREC, "FTI_Init returns FTI_NREC");
        check(FTI_Status() == 0, "status 0");
        check(FTI_Recover() == FTI_NREC, "FTI_Recover returns FTI_NREC");
        check(FTI_Finalize() == FTI_SCES, "finalize");
        step_ok("nrec");
    } else if (strcmp(mode, "first") == 0) {
        check(init == FTI_SCES && FTI_Status() == 0, "a fresh start");
        FTIT_allConfiguration c = FTI_GetConfig(argv[1], FTI_COMM_WORLD);
        check(c.configuration.ioMode == FTI_IO_POSIX, "GetConfig: ioMode");
        check(strcmp(c.configuration.localDir, "local") == 0 &&
                  strcmp(c.configuration.glbalDir, "global") == 0 &&
                  strcmp(c.checkpoint[4].dir, "global") == 0,
              "GetConfig: directories");
        check(c.topology.nbProc == 4 && c.topology.myRank == rank &&
                  c.topology.nodeSize == 2 && c.topology.nodeID == rank / 2 &&
                  c.topology.nbNodes == 2,
              "GetConfig: topology");
        check(c.execution.reco == 0 && c.checkpoint[1].ckptIntv == 0, "GetConfig: values");
        check(FTI_GetConfig("/nonexistent/fti.cfg", FTI_COMM_WORLD).configuration.ioMode == -1,
              "GetConfig of a missing file");
        step_ok("getconfig");
        int *alpha = malloc(n * sizeof *alpha);
        double *beta = malloc(2 * n * sizeof *beta);
        for (int i = 0; i < n; i++)
            alpha[i] = alpha_value(i);
        for (int i = 0; i < 2 * n; i++)
            beta[i] = beta_value(i);
        int a = FTI_setIDFromString("alpha"), b = FTI_setIDFromString("beta");
        check(a == 0 && b == 1 && FTI_setIDFromString("alpha") == 0, "ids from names");
        check(FTI_getIDFromString("gamma") == -1, "an unknown name");
        check(FTI_Protect(a, alpha, n, FTI_INTG) == FTI_SCES, "protect alpha");
        check(FTI_Protect(b, beta, 2 * n, FTI_DBLE) == FTI_SCES, "protect beta");
        check(FTI_InitICP(1, 1, true) == FTI_SCES, "InitICP");
        check(FTI_AddVarICP(a) == FTI_SCES, "add alpha");
        check(FTI_FinalizeICP() == FTI_NSCS, "an incomplete iCP is refused");
        check(FTI_InitICP(2, 1, true) == FTI_SCES, "InitICP again");
        check(FTI_AddVarICP(a) == FTI_SCES, "add alpha");
        alpha[0] = -1; /* after it was added: the checkpoint keeps the value added */
        check(FTI_AddVarICP(b) == FTI_SCES, "add beta");
        check(FTI_FinalizeICP() == FTI_SCES, "FinalizeICP");
        check(FTI_InitICP(3, 1, false) == FTI_SCES && FTI_AddVarICP(a) == FTI_SCES &&
                  FTI_FinalizeICP() == FTI_SCES,
              "an inactive iCP does nothing");
        step_ok("icp");

        char dir[FTI_BUFS], local[FTI_BUFS + 32], remote[FTI_BUFS + 32];
        check(FTI_GetStageDir(dir, sizeof dir) == FTI_SCES, "stage dir");
        snprintf(local, sizeof local, "%s/out.%d", dir, rank);
        snprintf(remote, sizeof remote, "staged.%d", rank);
        FILE *f = fopen(local, "w");
        check(f && fprintf(f, "rank %d\n", rank) > 0 && fclose(f) == 0, "write the file");
        int req = FTI_SendFile(local, remote);
        check(req >= 0 && FTI_GetStageStatus(req) == FTI_SI_SCES, "staged");
        check(FTI_GetStageStatus(req + 100) == FTI_SI_NINI, "unknown request");
        step_ok("staging");
        /* A failed run: no FTI_Finalize. */
        MPI_Finalize();
        return 0;
    } else {
        check(init == FTI_SCES && FTI_Status() != 0, "a restart");
        int a = FTI_getIDFromString("alpha"), b = FTI_getIDFromString("beta");
        check(a == 0 && b == 1, "names found again");
        int *alpha = calloc(n, sizeof *alpha);
        double *beta = calloc(1, sizeof *beta);
        check(FTI_Protect(a, alpha, n, FTI_INTG) == FTI_SCES, "protect alpha");
        check(FTI_Protect(b, beta, 1, FTI_DBLE) == FTI_SCES, "protect beta small");
        check(FTI_GetStoredSize(b) == (int64_t)(2 * n * sizeof(double)), "stored size");
        beta = FTI_Realloc(b, beta);
        check(beta != NULL, "realloc");
        check(FTI_RecoverVarInit() == FTI_SCES, "RecoverVarInit");
        check(FTI_RecoverVar(a) == FTI_SCES && FTI_RecoverVar(b) == FTI_SCES, "RecoverVar");
        check(FTI_RecoverVar(42) == FTI_NSCS, "an unprotected id");
        check(FTI_RecoverVarFinalize() == FTI_SCES, "RecoverVarFinalize");
        check(FTI_Status() == 0, "recovered");
        for (int i = 0; i < n; i++)
            check(alpha[i] == alpha_value(i), "alpha as added");
        for (int i = 0; i < 2 * n; i++)
            check(beta[i] == beta_value(i), "beta");
        step_ok("recovered");
        check(FTI_Checkpoint(9, 1) == FTI_DONE, "checkpoint after the restart");
        /* FTI_Recover in the same run reads the checkpoint just taken. */
        memset(alpha, 0, n * sizeof *alpha);
        check(FTI_Recover() == FTI_SCES && alpha[n - 1] == alpha_value(n - 1),
              "recover the run's own checkpoint");
        /* FTI_Init again, without FTI_Finalize: FTI starts over and finds that checkpoint;
         * one taken before recovering it is the newer, and what FTI_Recover reads. */
        check(FTI_Init(argv[1], MPI_COMM_WORLD) == FTI_SCES && FTI_Status() != 0, "init again");
        check(FTI_Protect(a, alpha, n, FTI_INTG) == FTI_SCES &&
                  FTI_Protect(b, beta, 2 * n, FTI_DBLE) == FTI_SCES,
              "protect after init again");
        alpha[0] = -5;
        check(FTI_Checkpoint(11, 1) == FTI_DONE, "checkpoint after init again");
        memset(alpha, 0, n * sizeof *alpha);
        check(FTI_Recover() == FTI_SCES && alpha[0] == -5, "recover the newer checkpoint");
        for (int i = 1; i < n; i++)
            check(alpha[i] == alpha_value(i), "alpha after init again");
        step_ok("same run");
        /* FTI's differential level 4 is level 4 (durable on the global tier). */
        check(FTI_Checkpoint(10, FTI_L4_DCP) == FTI_DONE, "FTI_L4_DCP");
        check(FTI_Finalize() == FTI_SCES, "finalize");
    }
    MPI_Finalize();
    return 0;
}
