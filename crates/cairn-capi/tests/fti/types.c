/*
 * types.c -- every FTI data type restored bit for bit, and FTI's errors reported without
 * stopping the program.
 *
 * Protects one array of each basic type (FTI_CHAR ... FTI_LDBE) and two arrays of structs,
 * one typed with each form of FTI_InitType. A first run (FTI_Status() 0) fills them with
 * values that depend on the rank, checkpoints at --level and finishes; run with
 * Keep_last_ckpt = 1, the next run sees FTI_Status() 2, clears the arrays, recovers and
 * compares. Before that, each run makes calls FTI must refuse and checks that they return
 * FTI_NSCS (FTI prints why on stderr).
 *
 * Usage: types CONFIG [--level L]
 * Rank 0 prints "types: errors ok", then "types: status S", then "types: checkpointed" or
 * "types: recovered ok"; a rank whose data differs prints "types: rank R MISMATCH in NAME".
 * Exit codes: 0 success, 2 bad arguments, 5 an FTI call failed or returned the wrong code.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fti.h>

#define N 1000

struct particle {
    double x, y, z;
    int id;
    char tag[4];
};

static int rank;

static void expect(int got, int want, const char *call)
{
    if (got == want)
        return;
    fprintf(stderr, "types: rank %d: %s returned %d, expected %d\n", rank, call, got, want);
    MPI_Finalize();
    exit(5);
}

static char c_[N];
static short s_[N];
static int i_[N];
static long l_[N];
static unsigned char uc_[N];
static unsigned short us_[N];
static unsigned int ui_[N];
static unsigned long ul_[N];
static float f_[N];
static double d_[N];
static long double ld_[N];
static struct particle p_[N], q_[N];

/* The values of run 1 on this rank (k: the element). */
static void fill(void)
{
    for (int k = 0; k < N; k++) {
        long v = (long)rank * 1000003L + k * 7919L;
        c_[k] = (char)(v % 127);
        s_[k] = (short)(-v % 32000);
        i_[k] = (int)(-v * 31);
        l_[k] = -v * 4000000007L;
        uc_[k] = (unsigned char)(v % 251);
        us_[k] = (unsigned short)(v % 65521);
        ui_[k] = (unsigned int)v * 2654435761u;
        ul_[k] = (unsigned long)v * 11400714819323198485ul;
        f_[k] = (float)v / 3.0f;
        d_[k] = (double)v / 7.0 - 1e-300;
        ld_[k] = (long double)v / 11.0L;
        p_[k] = (struct particle){v * 0.5, -v * 0.25, v * 1e10, (int)v, {'p', (char)('a' + k % 26), 0, 0}};
        q_[k] = p_[k];
        q_[k].id = -q_[k].id;
    }
}


int main(int argc, char **argv)
{
    int level = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 2 && !(argc == 4 && strcmp(argv[2], "--level") == 0)) {
        fprintf(stderr, "usage: types CONFIG [--level L]\n");
        MPI_Finalize();
        return 2;
    }
    if (argc == 4)
        level = atoi(argv[3]);

    /* Refused before FTI_Init. */
    expect(FTI_Protect(0, i_, N, FTI_INTG), FTI_NSCS, "FTI_Protect before FTI_Init");
    expect(FTI_Checkpoint(1, 1), FTI_NSCS, "FTI_Checkpoint before FTI_Init");
    expect(FTI_Init(argv[1], MPI_COMM_WORLD), FTI_SCES, "FTI_Init");
    /* A second FTI_Init starts over, as FTI's does. */
    expect(FTI_Init(argv[1], MPI_COMM_WORLD), FTI_SCES, "FTI_Init twice");

    /* Both forms of FTI_InitType: the handle returned (FTI 1.5+) or stored (earlier). */
    fti_id_t particle = FTI_InitType(sizeof(struct particle));
    FTIT_type particle_old;
    expect(FTI_InitType(&particle_old, sizeof(struct particle)), FTI_SCES, "FTI_InitType(&t)");
    expect(particle != FTI_NSCS && particle != particle_old, 1, "FTI_InitType handles");
    expect(FTI_InitType(0), FTI_NSCS, "FTI_InitType(0)");

    /* Refused after FTI_Init: an unknown type, a negative count, a level out of range. */
    expect(FTI_Protect(90, i_, N, (fti_id_t)12345), FTI_NSCS, "FTI_Protect with an unknown type");
    expect(FTI_Protect(91, i_, -1, FTI_INTG), FTI_NSCS, "FTI_Protect with a negative count");
    expect(FTI_Checkpoint(1, 10), FTI_NSCS, "FTI_Checkpoint at level 10");
    expect(FTI_Checkpoint(1, 0), FTI_NSCS, "FTI_Checkpoint at level 0");
    int status = FTI_Status();
    if (status == 0)
        expect(FTI_Recover(), FTI_NREC, "FTI_Recover with nothing to recover");
    if (rank == 0)
        printf("types: errors ok\ntypes: status %d\n", status);

    expect(FTI_Protect(0, c_, N, FTI_CHAR), FTI_SCES, "FTI_Protect FTI_CHAR");
    expect(FTI_Protect(1, s_, N, FTI_SHRT), FTI_SCES, "FTI_Protect FTI_SHRT");
    expect(FTI_Protect(2, i_, N, FTI_INTG), FTI_SCES, "FTI_Protect FTI_INTG");
    expect(FTI_Protect(3, l_, N, FTI_LONG), FTI_SCES, "FTI_Protect FTI_LONG");
    expect(FTI_Protect(4, uc_, N, FTI_UCHR), FTI_SCES, "FTI_Protect FTI_UCHR");
    expect(FTI_Protect(5, us_, N, FTI_USHT), FTI_SCES, "FTI_Protect FTI_USHT");
    expect(FTI_Protect(6, ui_, N, FTI_UINT), FTI_SCES, "FTI_Protect FTI_UINT");
    expect(FTI_Protect(7, ul_, N, FTI_ULNG), FTI_SCES, "FTI_Protect FTI_ULNG");
    expect(FTI_Protect(8, f_, N, FTI_SFLT), FTI_SCES, "FTI_Protect FTI_SFLT");
    expect(FTI_Protect(9, d_, N, FTI_DBLE), FTI_SCES, "FTI_Protect FTI_DBLE");
    expect(FTI_Protect(10, ld_, N, FTI_LDBE), FTI_SCES, "FTI_Protect FTI_LDBE");
    /* Protected twice: the second call replaces the first (FTI's way after a realloc). */
    expect(FTI_Protect(11, q_, N, particle), FTI_SCES, "FTI_Protect particle");
    expect(FTI_Protect(11, p_, N, particle), FTI_SCES, "FTI_Protect particle again");
    expect(FTI_Protect(12, q_, N, particle_old), FTI_SCES, "FTI_Protect particle_old");

    fill();
    if (status == 0) {
        expect(FTI_Checkpoint(1, level), FTI_DONE, "FTI_Checkpoint");
        if (rank == 0)
            printf("types: checkpointed\n");
    } else {
        /* Keep the expected values aside, clear everything, recover, compare. */
        static const struct {
            void *data;
            size_t size;
            const char *name;
        } arrays[] = {
            {c_, sizeof c_, "FTI_CHAR"}, {s_, sizeof s_, "FTI_SHRT"}, {i_, sizeof i_, "FTI_INTG"},
            {l_, sizeof l_, "FTI_LONG"}, {uc_, sizeof uc_, "FTI_UCHR"},
            {us_, sizeof us_, "FTI_USHT"}, {ui_, sizeof ui_, "FTI_UINT"},
            {ul_, sizeof ul_, "FTI_ULNG"}, {f_, sizeof f_, "FTI_SFLT"}, {d_, sizeof d_, "FTI_DBLE"},
            {p_, sizeof p_, "particle"}, {q_, sizeof q_, "particle_old"},
        };
        enum { ARRAYS = sizeof arrays / sizeof arrays[0] };
        static unsigned char want[ARRAYS][sizeof p_];
        static long double want_ld[N];
        for (int a = 0; a < ARRAYS; a++) {
            memcpy(want[a], arrays[a].data, arrays[a].size);
            memset(arrays[a].data, 0, arrays[a].size);
        }
        memcpy(want_ld, ld_, sizeof ld_);
        memset(ld_, 0, sizeof ld_);
        expect(FTI_Recover(), FTI_SCES, "FTI_Recover");
        expect(FTI_Status(), 0, "FTI_Status after FTI_Recover");
        int ok = 1;
        for (int a = 0; a < ARRAYS; a++)
            if (memcmp(want[a], arrays[a].data, arrays[a].size) != 0) {
                printf("types: rank %d MISMATCH in %s\n", rank, arrays[a].name);
                ok = 0;
            }
        /* long double has padding bytes no one writes: compare the values. */
        for (int k = 0; k < N; k++)
            if (ld_[k] != want_ld[k]) {
                printf("types: rank %d MISMATCH in FTI_LDBE\n", rank);
                ok = 0;
                break;
            }
        int all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, FTI_COMM_WORLD);
        if (rank == 0 && all)
            printf("types: recovered ok\n");
    }
    fflush(stdout);
    expect(FTI_Finalize(), FTI_SCES, "FTI_Finalize");
    expect(FTI_Finalize(), FTI_NSCS, "FTI_Finalize twice");
    MPI_Finalize();
    return 0;
}
