// cxx.cpp: scr.h from C++ (tests/scr.rs compiles it with mpicxx -Wall -Wextra -Werror): string
// literals as names, the flags combined, and one checkpoint written and offered back.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "scr.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::free(const_cast<char *>(SCR_Config("SCR_CACHE_SIZE=2")));
    int ok = SCR_Init() == SCR_SUCCESS;

    int have = 0;
    char name[SCR_MAX_FILENAME];
    ok = ok && SCR_Have_restart(&have, name) == SCR_SUCCESS;
    if (ok && have) {
        ok = SCR_Start_restart(nullptr) == SCR_SUCCESS && std::strcmp(name, "cxx.1") == 0;
        ok = SCR_Complete_restart(ok) == SCR_SUCCESS && ok;
    } else if (ok) {
        char path[SCR_MAX_FILENAME];
        std::string file = "cxx.1/rank" + std::to_string(rank);
        ok = SCR_Start_output("cxx.1", SCR_FLAG_CHECKPOINT | SCR_FLAG_NONE) == SCR_SUCCESS &&
             SCR_Route_file(file.c_str(), path) == SCR_SUCCESS;
        std::FILE *f = ok ? std::fopen(path, "w") : nullptr;
        ok = f && std::fputs("c++\n", f) >= 0;
        ok = f && std::fclose(f) == 0 && ok;
        ok = SCR_Complete_output(ok) == SCR_SUCCESS && ok;
    }
    ok = SCR_Finalize() == SCR_SUCCESS && ok;
    if (rank == 0)
        std::printf("cxx: %s %s\n", have ? "restarted" : "wrote", ok ? "ok" : "FAILED");
    MPI_Finalize();
    return ok ? 0 : 4;
}
