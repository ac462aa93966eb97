// client.cpp -- VeloC's C++ client (veloc.hpp) on Cairn: a raw region and a serialized data
// structure in named groups, the observer of a checkpoint's end, checkpoint_finished,
// restart_test, recover_size, and restart into changed data. Built against Cairn's
// veloc.hpp, linked with -lveloc only; runs as one process (veloc::get_client(id, ...)).
//
// Usage: client CONFIG write|read
// Output: "client: observed <name> v<version>" per checkpoint, "client: ok" at the end.
// Exit codes: 0 success, 2 bad arguments, 5 a check failed.
#include <veloc.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

static void check(bool ok, const char *what)
{
    if (!ok) {
        std::printf("client: FAIL %s\n", what);
        std::exit(5);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3 || (std::strcmp(argv[2], "write") != 0 && std::strcmp(argv[2], "read") != 0)) {
        std::fprintf(stderr, "usage: client CONFIG write|read\n");
        return 2;
    }
    const bool writing = std::strcmp(argv[2], "write") == 0;
    veloc::client_t *ckpt = veloc::get_client(7u, argv[1]);
    check(ckpt != nullptr, "get_client");
    check(veloc::get_client(8u, argv[1]) == ckpt, "one client per process");

    double field[500];
    std::vector<int> list;
    auto save = [&list](std::ostream &out) {
        size_t n = list.size();
        out.write(reinterpret_cast<const char *>(&n), sizeof n);
        out.write(reinterpret_cast<const char *>(list.data()), n * sizeof(int));
    };
    auto load = [&list](std::istream &in) {
        size_t n = 0;
        if (!in.read(reinterpret_cast<char *>(&n), sizeof n) || n > 1000000)
            return false;
        list.resize(n);
        return static_cast<bool>(in.read(reinterpret_cast<char *>(list.data()), n * sizeof(int)));
    };
    check(ckpt->mem_protect(0, field, 500, sizeof(double), "state"), "protect field");
    check(ckpt->mem_protect(1, save, load, "state"), "protect list");
    check(ckpt->register_observer(VELOC_OBSERVE_CKPT_END,
                                  [](const std::string &name, int version) {
                                      std::printf("client: observed %s v%d\n", name.c_str(),
                                                  version);
                                  }),
          "register_observer");

    if (writing) {
        for (int v = 1; v <= 3; v++) {
            for (int i = 0; i < 500; i++)
                field[i] = v * 1000.0 + i;
            list.assign(static_cast<size_t>(10 * v), v);
            check(ckpt->checkpoint("state", v), "checkpoint");
        }
        check(ckpt->checkpoint_wait(), "checkpoint_wait");
        check(ckpt->checkpoint_finished(), "checkpoint_finished");
    } else {
        int v = ckpt->restart_test("state", 0);
        check(v == 3, "restart_test finds v3");
        check(ckpt->restart_test("state", 0, 3) == VELOC_FAILURE, "another rank is refused");
        std::memset(field, 0, sizeof field);
        list.assign(5, -1);
        check(ckpt->restart_begin("state", v), "restart_begin");
        check(ckpt->recover_size(1) == sizeof(size_t) + 30 * sizeof(int), "recover_size");
        check(ckpt->recover_mem(VELOC_RECOVER_ALL, {}), "recover_mem");
        check(ckpt->restart_end(true), "restart_end");
        for (int i = 0; i < 500; i++)
            check(field[i] == 3000.0 + i, "field restored");
        check(list == std::vector<int>(30, 3), "list restored");
    }
    std::printf("client: ok\n");
    return 0;
}
