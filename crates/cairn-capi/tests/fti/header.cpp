// header.cpp -- fti.h compiles as C++ (built with -fsyntax-only by tests/fti.rs): both forms
// of FTI_InitType, the type and return-code constants in constant expressions, and
// FTI_COMM_WORLD as an MPI communicator.
#include <fti.h>

namespace {

struct Cell {
    double t;
    int flags;
};

int protect_cells(Cell *cells, int n)
{
    fti_id_t cell = FTI_InitType(sizeof(Cell));
    FTIT_type legacy;
    if (cell == FTI_NSCS || FTI_InitType(&legacy, static_cast<int>(sizeof(Cell))) != FTI_SCES)
        return FTI_NSCS;
    return FTI_Protect(0, cells, n, cell);
}

static_assert(FTI_DBLE != FTI_SFLT && FTI_SCES == 0 && FTI_DONE != FTI_SCES, "constants");

} // namespace

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (FTI_Init(argc > 1 ? argv[1] : "config.fti", MPI_COMM_WORLD) != FTI_SCES)
        return 1;
    int rank = 0;
    MPI_Comm_rank(FTI_COMM_WORLD, &rank);
    Cell cells[4] = {};
    protect_cells(cells, 4);
    switch (FTI_Status()) {
    case 0:
        FTI_Checkpoint(1, 4);
        break;
    default:
        FTI_Recover();
    }
    FTI_Snapshot();
    FTI_Finalize();
    MPI_Finalize();
    return 0;
}
