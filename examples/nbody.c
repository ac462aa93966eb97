/*
 * nbody.c -- a gravitational N-body example that checkpoints and restarts with Cairn.
 *
 * This is a small version of the N-body mock-up that the DEEP-ER project used for its resiliency
 * measurements: N bodies attract each other by gravity, and each time step first computes the
 * force on every body from all others, then updates velocities and positions. Each rank owns a
 * contiguous block of N / P bodies (the rank count P must divide N) and the blocks travel around
 * a ring of ranks (P - 1 MPI_Sendrecv shifts per step), so every rank sees every body once per
 * step. Unlike the original, which adds each block's forces as it arrives, a rank keeps the
 * blocks in a buffer of all N bodies and sums the forces in global body order: floating-point
 * sums depend on their order, and this way every body's arithmetic, and so the result, is the
 * same for every rank count. The integrator is semi-implicit Euler (kick, then drift) with a
 * softened potential, G = 1. The initial state comes from one seeded splitmix64 stream read in
 * body order; each rank jumps straight to its own bodies.
 *
 * Cairn usage: the step counter (id 0), positions (id 1), velocities (id 2) and masses (id 3)
 * are protected; cairn_resume() restores the newest checkpoint, if any, before the loop; and
 * every K steps cairn_checkpoint(name, step) captures the state "step steps completed". A run
 * that is killed and started again ends with the same final checksum as an uninterrupted run.
 *
 * Build (from the workspace root, after `cargo build --release -p cairn-capi`):
 *   mpicc -O2 -Wall -std=c11 -o nbody examples/nbody.c -I crates/cairn-capi/include \
 *         -L target/release -lcairn -Wl,-rpath,$PWD/target/release -lm
 * Run:
 *   mpirun -n 4 ./nbody --bodies 4096 --steps 100 --every 10 [--name nbody]
 *          [--config cairn.toml] [--sleep-ms 0]
 * Output lines start with "nbody:"; the last one is a 64-bit FNV-1a checksum of all positions
 * and velocities. Exit codes: 0 success, 2 bad arguments, 3 a Cairn call failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn_mpi.h"

#define SEED 20170504ULL /* initial conditions; the same for every run and rank count */
#define DT 1e-3          /* time step */
#define SOFT2 1e-3       /* softening length squared: keeps close encounters finite */

static int rank, nranks;

/* Abort the job with exit code 3 if a Cairn call failed, saying which call and why. */
static void check(int rc, const char *call)
{
    if (rc == CAIRN_OK)
        return;
    fprintf(stderr, "nbody: %s failed: %s: %s\n", call, cairn_strerror(rc), cairn_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* Print the usage (after `msg`, if any) once and leave. Every rank sees the same arguments, so
 * every rank takes this path together and no MPI_Abort is needed. */
static void usage_exit(const char *msg, int code)
{
    if (rank == 0) {
        FILE *out = code == 0 ? stdout : stderr;
        if (msg)
            fprintf(out, "nbody: %s\n", msg);
        fprintf(out, "usage: nbody [--bodies N] [--steps S] [--every K] [--name NAME] "
                     "[--config PATH] [--sleep-ms M]\n");
    }
    MPI_Finalize();
    exit(code);
}

static long long parse_count(const char *opt, const char *text, long long min)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min) {
        static char msg[128];
        snprintf(msg, sizeof msg, "%s needs an integer >= %lld, got '%s'", opt, min, text);
        usage_exit(msg, 2);
    }
    return v;
}

/* 64-bit FNV-1a, continued from a previous hash value `h`. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define FNV_OFFSET 0xcbf29ce484222325ULL

/* splitmix64: the state advances by a constant, so draw k of the stream is state SEED + k*GAMMA
 * and any rank can start at its own first body. Returns a uniform double in [0, 1). */
#define GAMMA 0x9e3779b97f4a7c15ULL
static double uniform(uint64_t *state)
{
    uint64_t z = (*state += GAMMA);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

int main(int argc, char **argv)
{
    long long bodies = 4096, steps = 100, every = 10, sleep_ms = 0;
    const char *name = "nbody", *config = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0)
            usage_exit(NULL, 0);
        if (i + 1 >= argc)
            usage_exit("missing value or unknown option", 2);
        const char *val = argv[++i];
        if (strcmp(opt, "--bodies") == 0)        bodies = parse_count(opt, val, 1);
        else if (strcmp(opt, "--steps") == 0)    steps = parse_count(opt, val, 0);
        else if (strcmp(opt, "--every") == 0)    every = parse_count(opt, val, 0);
        else if (strcmp(opt, "--sleep-ms") == 0) sleep_ms = parse_count(opt, val, 0);
        else if (strcmp(opt, "--name") == 0)     name = val;
        else if (strcmp(opt, "--config") == 0)   config = val;
        else                                     usage_exit("unknown option", 2);
    }
    if (bodies > INT_MAX / 4) /* MPI counts are ints: a block of 4 doubles per body must fit */
        usage_exit("--bodies is too large", 2);
    if (bodies % nranks != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "the rank count (%d) must divide the body count (%lld)",
                 nranks, bodies);
        usage_exit(msg, 2);
    }

    /* Owned bodies: pos and vel hold x,y,z per body; `all` holds x,y,z,m of every body in global
     * order and is rebuilt from the ring every step (scratch, not protected). */
    const size_t n = (size_t)bodies, nloc = n / (size_t)nranks, first = (size_t)rank * nloc;
    double *pos = malloc(3 * nloc * sizeof *pos), *vel = malloc(3 * nloc * sizeof *vel);
    double *mass = malloc(nloc * sizeof *mass), *all = malloc(4 * n * sizeof *all);
    if (!pos || !vel || !mass || !all) {
        fprintf(stderr, "nbody: out of memory for %zu bodies\n", n);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    uint64_t state = SEED + (uint64_t)first * 7 * GAMMA; /* 7 draws per body */
    for (size_t i = 0; i < nloc; i++) {
        for (int k = 0; k < 3; k++)
            pos[3 * i + k] = 2.0 * uniform(&state) - 1.0; /* in the cube [-1, 1)^3 */
        for (int k = 0; k < 3; k++)
            vel[3 * i + k] = 0.2 * uniform(&state) - 0.1;
        mass[i] = (0.5 + uniform(&state)) / (double)n; /* total mass about 1 */
    }

    /* The protected state is exactly (step, pos, vel, mass). */
    int64_t step = 0;
    check(cairn_init(MPI_COMM_WORLD, config), "cairn_init");
    check(cairn_protect(0, &step, 1, CAIRN_INT64), "cairn_protect");
    check(cairn_protect(1, pos, 3 * nloc, CAIRN_DOUBLE), "cairn_protect");
    check(cairn_protect(2, vel, 3 * nloc, CAIRN_DOUBLE), "cairn_protect");
    check(cairn_protect(3, mass, nloc, CAIRN_DOUBLE), "cairn_protect");

    int64_t restored = -1;
    check(cairn_resume(name, &restored), "cairn_resume");
    if (rank == 0) {
        if (restored >= 0)
            printf("nbody: restarted from checkpoint v%" PRId64 " (step %" PRId64 ")\n",
                   restored, step);
        else
            printf("nbody: no checkpoint, starting fresh\n");
        fflush(stdout);
    }
    if (restored >= 0 && step != restored) /* every checkpoint is written with version == step */
        fprintf(stderr, "nbody: warning: restored step %" PRId64 " differs from version %" PRId64
                        "\n", step, restored);

    const int left = (rank + nranks - 1) % nranks, right = (rank + 1) % nranks;
    const int block = (int)(4 * nloc); /* doubles per block in `all` */
    const struct timespec nap = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };
    const int64_t first_step = step;
    long long checkpoints = 0;
    double ckpt_seconds = 0.0, step_seconds = 0.0;

    while (step < steps) {
        double t0 = MPI_Wtime();
        /* Put the own block into its slot of `all`, then pass blocks around the ring: at shift
         * s this rank sends block (rank+s-1) to the left and receives block (rank+s) from the
         * right, so after P-1 shifts it holds all of them. */
        for (size_t i = 0; i < nloc; i++) {
            double *b = &all[4 * (first + i)];
            b[0] = pos[3 * i], b[1] = pos[3 * i + 1], b[2] = pos[3 * i + 2], b[3] = mass[i];
        }
        for (int s = 1; s < nranks; s++) {
            size_t out = (size_t)((rank + s - 1) % nranks), in = (size_t)((rank + s) % nranks);
            MPI_Sendrecv(&all[out * 4 * nloc], block, MPI_DOUBLE, left, s,
                         &all[in * 4 * nloc], block, MPI_DOUBLE, right, s,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }

        /* Acceleration of each owned body from all bodies in global order (the body itself
         * adds exactly zero), then kick and drift. Reading only from `all` keeps the forces
         * on the positions before the step while pos is being updated. */
        for (size_t i = 0; i < nloc; i++) {
            const double *me = &all[4 * (first + i)];
            double ax = 0.0, ay = 0.0, az = 0.0;
            for (size_t j = 0; j < n; j++) {
                const double *o = &all[4 * j];
                double dx = o[0] - me[0], dy = o[1] - me[1], dz = o[2] - me[2];
                double r2 = dx * dx + dy * dy + dz * dz + SOFT2;
                double f = o[3] / (r2 * sqrt(r2));
                ax += f * dx, ay += f * dy, az += f * dz;
            }
            vel[3 * i] += DT * ax, vel[3 * i + 1] += DT * ay, vel[3 * i + 2] += DT * az;
            for (int k = 0; k < 3; k++)
                pos[3 * i + k] += DT * vel[3 * i + k];
        }
        step++;
        step_seconds += MPI_Wtime() - t0;

        /* Here (step, pos, vel, mass) means "step steps completed". Because the checkpoint
         * follows the increment, a resumed run never checkpoints its restored version again;
         * the explicit test keeps that true if the loop is ever rearranged. */
        if (every > 0 && step % every == 0 && step != restored) {
            double c0 = MPI_Wtime();
            check(cairn_checkpoint(name, step), "cairn_checkpoint");
            double dt = MPI_Wtime() - c0;
            ckpt_seconds += dt;
            checkpoints++;
            if (rank == 0) {
                printf("nbody: step %" PRId64 " checkpoint v%" PRId64 " %.3f ms\n",
                       step, step, dt * 1e3);
                fflush(stdout);
            }
        }
        if (sleep_ms > 0)
            nanosleep(&nap, NULL);
    }

    /* Checksum: FNV-1a over x,y,z,vx,vy,vz of each body in global order. The running hash
     * travels along the ranks, so the result is the same for any rank count. */
    uint64_t sum = FNV_OFFSET;
    if (rank > 0)
        MPI_Recv(&sum, 1, MPI_UINT64_T, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < nloc; i++) {
        sum = fnv1a(sum, &pos[3 * i], 3 * sizeof *pos);
        sum = fnv1a(sum, &vel[3 * i], 3 * sizeof *vel);
    }
    if (rank < nranks - 1)
        MPI_Send(&sum, 1, MPI_UINT64_T, rank + 1, 0, MPI_COMM_WORLD);
    if (nranks > 1 && rank == nranks - 1)
        MPI_Send(&sum, 1, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD);
    if (nranks > 1 && rank == 0)
        MPI_Recv(&sum, 1, MPI_UINT64_T, nranks - 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

    /* Times: the slowest rank's totals are the job's. Every rank ran the same steps. */
    double local[2] = { ckpt_seconds, step_seconds }, slowest[2] = { 0.0, 0.0 };
    MPI_Reduce(local, slowest, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    const int64_t ran = step - first_step;
    if (rank == 0) {
        printf("nbody: steps %lld checkpoints %lld checkpoint-time %.3f ms\n",
               steps, checkpoints, slowest[0] * 1e3);
        printf("nbody: step-time %.3f ms\n", ran > 0 ? slowest[1] * 1e3 / (double)ran : 0.0);
        printf("nbody: final checksum %016" PRIx64 "\n", sum);
        fflush(stdout);
    }

    check(cairn_finalize(), "cairn_finalize");
    free(pos);
    free(vel);
    free(mass);
    free(all);
    MPI_Finalize();
    return 0;
}
