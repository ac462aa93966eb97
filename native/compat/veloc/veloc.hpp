/*
 * veloc.hpp: VeloC's C++ client API (namespace veloc), implemented by Cairn over the C API of
 * veloc.h. A client is had from veloc::get_client, once per process; later calls return the
 * same client. Regions are raw memory (pointer, count, element size) or a data structure with
 * a serializer and a deserializer (veloc/cereal.hpp, veloc/boost.hpp and veloc/bitsery.hpp
 * make them from those libraries). Named groups, selective checkpoints and restarts, and the
 * observer of a checkpoint's end behave as in VeloC; docs/migrate-veloc.md has the details.
 * Calls return false (or VELOC_FAILURE) on failure, after one line on standard error naming
 * the cause; nothing throws, aborts or exits.
 */
#ifndef VELOC_HPP
#define VELOC_HPP

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>

#include "veloc/defs.h"

namespace veloc {

class client_t {
protected:
    static constexpr char default_mem_group[] = "default";
    using serializer_t = std::function<void(std::ostream &)>;
    using deserializer_t = std::function<bool(std::istream &)>;
    using observer_t = std::function<void(const std::string &name, int version)>;

public:
    /* Register memory (or a serialized data structure) as region id of group name. */
    virtual bool mem_protect(int id, void *ptr, size_t count, size_t base_size,
                             const std::string &name = default_mem_group) = 0;
    virtual bool mem_protect(int id, const serializer_t &s, const deserializer_t &d,
                             const std::string &name = default_mem_group) = 0;
    virtual bool mem_unprotect(int id, const std::string &name = default_mem_group) = 0;
    virtual void mem_clear(const std::string &name = default_mem_group) = 0;
    /* Call obs(name, version) at the end of every checkpoint (VELOC_OBSERVE_CKPT_END). */
    virtual bool register_observer(int type, const observer_t &obs) = 0;

    virtual std::string route_file(const std::string &original) = 0;
    virtual bool cleanup(const std::string &name) = 0;

    virtual bool checkpoint(const std::string &name, int version) = 0;
    virtual bool checkpoint_begin(const std::string &name, int version) = 0;
    virtual bool checkpoint_mem(int mode, const std::set<int> &ids) = 0;
    virtual bool checkpoint_end(bool success) = 0;
    virtual bool checkpoint_wait() = 0;
    virtual bool checkpoint_finished() = 0;

    /* target_rank: -1 (this process); another process's checkpoints are not read. */
    virtual int restart_test(const std::string &name, int version, int target_rank = -1) = 0;
    virtual bool restart(const std::string &name, int version, int target_rank = -1) = 0;
    virtual bool restart_begin(const std::string &name, int version, int target_rank = -1) = 0;
    virtual size_t recover_size(int id) = 0;
    virtual bool recover_mem(int mode, const std::set<int> &ids) = 0;
    virtual bool restart_end(bool success) = 0;

    virtual ~client_t() = 0;
};

/* The process's client: VELOC_Init_single(id, cfg_file) or VELOC_Init(comm, cfg_file) on the
 * first call; NULL if that fails (the reason is on standard error). The client is finalized
 * (flushes drained) when it is deleted, or at exit while MPI still runs. */
client_t *get_client(unsigned int id, const std::string &cfg_file);
client_t *get_client(MPI_Comm comm, const std::string &cfg_file);

} // namespace veloc

#endif /* VELOC_HPP */
