// vector.cpp: Cairn from C++ over a communicator other than MPI_COMM_WORLD.
//
// Each rank protects a std::vector<double> (of a rank-dependent length) and a step counter,
// checkpoints versions 1..5 whose contents are a function of (version, rank, index), and on
// start resumes from the newest checkpoint, checking every element. Run it twice under
// mpirun: the first run starts fresh, the second prints "vector: rank <r> restored v5 ok".
// Exit 4: restored data is wrong; exit 5: a Cairn call failed.
#include <cairn_mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

static double value(int64_t version, int rank, std::size_t i) {
    return static_cast<double>(version) * 1000.5 + rank * 10.25 + static_cast<double>(i) / 3.0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    // A communicator of our own, ordered in reverse, so rank numbers differ from the world's.
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, 0, -world_rank, &comm);
    int rank = 0;
    MPI_Comm_rank(comm, &rank);

    auto check = [rank](int rc, const char *what) {
        if (rc != CAIRN_OK) {
            std::fprintf(stderr, "vector: rank %d %s failed (%d): %s\n", rank, what, rc, cairn_last_error());
            std::exit(5);
        }
    };
    check(cairn_init(comm, nullptr), "cairn_init");
    std::vector<double> field(1000 + 17 * rank);
    int64_t step = 0;
    check(cairn_protect(0, &step, 1, CAIRN_INT64), "cairn_protect(step)");
    check(cairn_protect(1, field.data(), field.size(), CAIRN_DOUBLE), "cairn_protect(field)");

    int64_t restored = -1;
    check(cairn_resume("cxx", &restored), "cairn_resume");
    if (restored >= 0) {
        bool ok = step == restored;
        for (std::size_t i = 0; ok && i < field.size(); i++) ok = field[i] == value(restored, rank, i);
        std::printf("vector: rank %d restored v%lld %s\n", rank, static_cast<long long>(restored), ok ? "ok" : "MISMATCH");
        if (!ok) std::exit(4);
    }
    while (step < 5) {
        step++;
        for (std::size_t i = 0; i < field.size(); i++) field[i] = value(step, rank, i);
        check(cairn_checkpoint("cxx", step), "cairn_checkpoint");
    }
    check(cairn_finalize(), "cairn_finalize");
    MPI_Comm_free(&comm);
    MPI_Finalize();
    std::printf("vector: rank %d done\n", rank);
    return 0;
}
