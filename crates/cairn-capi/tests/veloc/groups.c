/*
 * groups.c -- the VeloC API of its later releases on Cairn: named region groups
 * (VELOC_Region_protect), selective checkpoints, VELOC_Recover_size with a region registered
 * only after VELOC_Restart_begin, a registered region the checkpoint does not hold,
 * VELOC_Checkpoint_finished, VELOC_Cleanup, and a file routed under another name at restart
 * (VeloC keeps one file per checkpoint and process). Built against Cairn's veloc.h, linked
 * with -lveloc only; run under mpirun.
 *
 * Usage: groups CONFIG write|read
 *   write: checkpoints alpha v1 (group alpha: region 0), beta v1 (group beta: region 1),
 *          gamma v1 (the default group: region 2), alpha v2 (only region 3, selected),
 *          file v1 (a routed file); tries an empty selection; waits for the flushes; cleans
 *          up gamma.
 *   read:  restores each of them in a fresh process and checks every value.
 * Output (stdout, rank 0 only, except "FAIL" lines): "groups: <step> ok" per step, then
 * "groups: all ok". Exit codes: 0 success, 2 bad arguments, 5 a check failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <veloc.h>

#define NA 1000
#define NB 777

static int rank;
static int a[NA];
static double b[NB];
static long c;
static char d[100];

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("groups: rank %d FAIL %s\n", rank, what);
        fflush(stdout);
        MPI_Finalize();
        exit(5);
    }
}

static void step_ok(const char *what)
{
    if (rank == 0)
        printf("groups: %s ok\n", what);
    fflush(stdout);
}

static void fill(int v)
{
    for (int i = 0; i < NA; i++)
        a[i] = v * 1000 + i + rank;
    for (int i = 0; i < NB; i++)
        b[i] = v + i * 0.5 + rank;
    c = 424242L + rank + v;
    snprintf(d, sizeof d, "rank %d version %d", rank, v);
}

static void write_all(void)
{
    fill(1);
    check(VELOC_Region_protect(0, a, NA, sizeof a[0], "alpha") == VELOC_SUCCESS, "protect a");
    check(VELOC_Region_protect(1, b, NB, sizeof b[0], "beta") == VELOC_SUCCESS, "protect b");
    check(VELOC_Mem_protect(2, &c, 1, sizeof c) == VELOC_SUCCESS, "protect c");
    check(VELOC_Checkpoint("alpha", 1) == VELOC_SUCCESS, "alpha v1");
    check(VELOC_Checkpoint("beta", 1) == VELOC_SUCCESS, "beta v1");
    check(VELOC_Checkpoint("gamma", 1) == VELOC_SUCCESS, "gamma v1");
    step_ok("groups");

    /* Only region 3 goes into alpha v2. */
    check(VELOC_Region_protect(3, d, sizeof d, 1, "alpha") == VELOC_SUCCESS, "protect d");
    check(VELOC_Checkpoint_wait() == VELOC_SUCCESS, "wait");
    check(VELOC_Checkpoint_begin("alpha", 2) == VELOC_SUCCESS, "begin alpha v2");
    int none[] = {99};
    check(VELOC_Checkpoint_selective(VELOC_CKPT_SOME, none, 1) == VELOC_FAILURE,
          "an empty selection fails");
    int three[] = {3};
    check(VELOC_Checkpoint_selective(VELOC_CKPT_SOME, three, 1) == VELOC_SUCCESS, "select 3");
    check(VELOC_Checkpoint_end(1) == VELOC_SUCCESS, "end alpha v2");
    step_ok("selective");

    /* A routed file, named by version and rank (the restart names it differently). */
    check(VELOC_Checkpoint_begin("file", 1) == VELOC_SUCCESS, "begin file v1");
    char orig[64], routed[VELOC_MAX_NAME];
    snprintf(orig, sizeof orig, "state_1_%d.dat", rank);
    check(VELOC_Route_file(orig, routed) == VELOC_SUCCESS, "route");
    FILE *f = fopen(routed, "w");
    check(f != NULL, "open the routed file");
    fprintf(f, "payload of rank %d\n", rank);
    check(fclose(f) == 0, "close the routed file");
    check(VELOC_Checkpoint_end(1) == VELOC_SUCCESS, "end file v1");
    step_ok("file");

    check(VELOC_Checkpoint_wait() == VELOC_SUCCESS, "wait");
    check(VELOC_Checkpoint_finished() == VELOC_SUCCESS, "finished after wait");
    check(VELOC_Cleanup("gamma") == VELOC_SUCCESS, "cleanup gamma");
    step_ok("cleanup");
    check(VELOC_Mem_clear() == VELOC_SUCCESS && VELOC_Region_clear("beta") == VELOC_SUCCESS,
          "clear");
    check(VELOC_Region_unprotect(0, "alpha") == VELOC_SUCCESS &&
              VELOC_Region_unprotect(0, "alpha") == VELOC_FAILURE,
          "unprotect twice");
}

static void read_all(void)
{
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    c = 0;
    memset(d, 0, sizeof d);
    char want[100];
    snprintf(want, sizeof want, "rank %d version %d", rank, 1);

    /* alpha v2 holds region 3 alone: its size is known before it is registered. */
    check(VELOC_Restart_test("alpha", 0) == 2, "alpha's newest is v2");
    check(VELOC_Restart_begin("alpha", 2) == VELOC_SUCCESS, "begin alpha v2");
    check(VELOC_Recover_size(3) == (int)sizeof d, "size of region 3");
    check(VELOC_Recover_size(0) == VELOC_FAILURE, "region 0 is not in v2");
    check(VELOC_Region_protect(3, d, sizeof d, 1, "alpha") == VELOC_SUCCESS, "protect d");
    check(VELOC_Recover_mem() == VELOC_SUCCESS, "recover alpha v2");
    check(VELOC_Restart_end(1) == VELOC_SUCCESS, "end alpha v2");
    check(strcmp(d, want) == 0, "region 3 restored");
    step_ok("recover_size");

    /* alpha v1 holds region 0 only, while group alpha now has 0 and 3: 3 stays as it is. */
    memset(d, 'x', 10);
    check(VELOC_Region_protect(0, a, NA, sizeof a[0], "alpha") == VELOC_SUCCESS, "protect a");
    check(VELOC_Restart("alpha", 1) == VELOC_SUCCESS, "restart alpha v1");
    for (int i = 0; i < NA; i++)
        check(a[i] == 1000 + i + rank, "region 0 restored");
    check(d[0] == 'x', "region 3 untouched");
    step_ok("partial");

    /* beta v1 into its group; gamma v1 into the default group, from the persistent copy. */
    check(VELOC_Region_protect(1, b, NB, sizeof b[0], "beta") == VELOC_SUCCESS, "protect b");
    check(VELOC_Mem_protect(2, &c, 1, sizeof c) == VELOC_SUCCESS, "protect c");
    check(VELOC_Restart("beta", 1) == VELOC_SUCCESS, "restart beta v1");
    for (int i = 0; i < NB; i++)
        check(b[i] == 1 + i * 0.5 + rank, "region 1 restored");
    check(VELOC_Restart("gamma", 1) == VELOC_SUCCESS, "restart gamma v1");
    check(c == 424242L + rank + 1, "region 2 restored");
    step_ok("default");

    /* The file, asked for under another name. */
    check(VELOC_Restart_begin("file", 1) == VELOC_SUCCESS, "begin file v1");
    char routed[VELOC_MAX_NAME], line[64] = "", expect[64];
    check(VELOC_Route_file("state-1.dat", routed) == VELOC_SUCCESS, "route by another name");
    FILE *f = fopen(routed, "r");
    check(f != NULL && fgets(line, sizeof line, f) != NULL, "read the file");
    fclose(f);
    snprintf(expect, sizeof expect, "payload of rank %d\n", rank);
    check(strcmp(line, expect) == 0, "file content");
    check(VELOC_Restart_end(1) == VELOC_SUCCESS, "end file v1");
    step_ok("file");
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "write") != 0 && strcmp(argv[2], "read") != 0)) {
        fprintf(stderr, "usage: groups CONFIG write|read\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check(VELOC_Init(MPI_COMM_WORLD, argv[1]) == VELOC_SUCCESS, "init");
    if (strcmp(argv[2], "write") == 0)
        write_all();
    else
        read_all();
    check(VELOC_Finalize(1) == VELOC_SUCCESS, "finalize");
    if (rank == 0)
        printf("groups: all ok\n");
    MPI_Finalize();
    return 0;
}
