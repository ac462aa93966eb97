/*
 * client.cpp: VeloC's C++ client (veloc.hpp) over the C API of this library (veloc.c).
 *
 * Raw regions go straight to the C API's region table, in the group of their name (the C++
 * default group is the C API's default one). A serialized region lives here: when a
 * checkpoint saves it, its serializer writes into a buffer of this client, which is
 * registered with the C API as a raw region for the time of the checkpoint; at a restart,
 * the C API holds the stored bytes (VELOC_Recover_size tells their size), recover_mem reads
 * them into the buffer and hands them to the deserializer.
 */
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#pragma GCC visibility push(default)
#include "veloc.h"
#include "veloc.hpp"
#pragma GCC visibility pop

namespace {

struct serialized {
    std::function<void(std::ostream &)> save;
    std::function<bool(std::istream &)> load;
    std::string bytes; /* the last serialization, or the bytes read at a restart */
};

/* The C API's name of a C++ group. */
std::string c_group(const std::string &name)
{
    return name == "default" ? std::string() : name;
}

bool complain(const char *what, const std::string &why)
{
    std::fprintf(stderr, "veloc: %s: %s\n", what, why.c_str());
    return false;
}

bool selected(int mode, const std::set<int> &ids, int id)
{
    return mode == VELOC_CKPT_ALL || (ids.count(id) != 0) == (mode == VELOC_CKPT_SOME);
}

std::vector<int> as_vector(const std::set<int> &ids)
{
    return std::vector<int>(ids.begin(), ids.end());
}

class client_impl final : public veloc::client_t {
public:
    explicit client_impl(bool mpi) : mpi_(mpi) {}

    ~client_impl() override { finalize(); }

    /* VELOC_Finalize, once; not after MPI_Finalize for an MPI client (it would need MPI). */
    void finalize()
    {
        if (done_)
            return;
        done_ = true;
        int finished = 0;
        if (mpi_)
            MPI_Finalized(&finished);
        if (!finished)
            VELOC_Finalize(1);
    }

    bool mem_protect(int id, void *ptr, size_t count, size_t base_size,
                     const std::string &name) override
    {
        if (VELOC_Region_protect(id, ptr, count, base_size, c_group(name).c_str()) != 0)
            return false;
        serial_[name].erase(id);
        if (count == 0)
            raw_[name].erase(id);
        else
            raw_[name].insert(id);
        return true;
    }

    bool mem_protect(int id, const serializer_t &s, const deserializer_t &d,
                     const std::string &name) override
    {
        if (!s || !d)
            return complain("mem_protect", "region " + std::to_string(id) +
                                               ": the serializer or deserializer is empty");
        if (raw_[name].erase(id) != 0)
            VELOC_Region_unprotect(id, c_group(name).c_str());
        serial_[name][id] = serialized{s, d, std::string()};
        return true;
    }

    bool mem_unprotect(int id, const std::string &name) override
    {
        if (serial_[name].erase(id) != 0)
            return true;
        if (raw_[name].erase(id) == 0)
            return complain("mem_unprotect", "region " + std::to_string(id) +
                                                 " is not registered in group " + name);
        return VELOC_Region_unprotect(id, c_group(name).c_str()) == VELOC_SUCCESS;
    }

    void mem_clear(const std::string &name) override
    {
        serial_[name].clear();
        raw_[name].clear();
        VELOC_Region_clear(c_group(name).c_str());
    }

    bool register_observer(int type, const observer_t &obs) override
    {
        if (type != VELOC_OBSERVE_CKPT_END)
            return complain("register_observer", "unknown observer type " +
                                                      std::to_string(type) +
                                                      " (VELOC_OBSERVE_CKPT_END)");
        bool fresh = observers_.count(type) == 0;
        observers_[type] = obs;
        return fresh;
    }

    std::string route_file(const std::string &original) override
    {
        char routed[VELOC_MAX_NAME];
        if (VELOC_Route_file(original.c_str(), routed) != VELOC_SUCCESS)
            return std::string();
        return routed;
    }

    bool cleanup(const std::string &name) override
    {
        return VELOC_Cleanup(name.c_str()) == VELOC_SUCCESS;
    }

    bool checkpoint(const std::string &name, int version) override
    {
        bool waited = checkpoint_wait();
        if (!checkpoint_begin(name, version))
            return false;
        bool mem = checkpoint_mem(VELOC_CKPT_ALL, {});
        return checkpoint_end(mem) && mem && waited;
    }

    bool checkpoint_begin(const std::string &name, int version) override
    {
        if (VELOC_Checkpoint_begin(name.c_str(), version) != VELOC_SUCCESS)
            return false;
        name_ = name;
        version_ = version;
        return true;
    }

    bool checkpoint_mem(int mode, const std::set<int> &ids) override
    {
        const std::string g = group_of(name_);
        for (auto &e : serial_[g]) {
            if (!selected(mode, ids, e.first))
                continue;
            std::ostringstream out;
            e.second.save(out);
            e.second.bytes = out.str();
            /* An empty serialization is stored as one byte, so that it still counts. */
            if (e.second.bytes.empty())
                e.second.bytes.push_back('\0');
            if (VELOC_Region_protect(e.first, &e.second.bytes[0], e.second.bytes.size(), 1,
                                     c_group(g).c_str()) != VELOC_SUCCESS)
                return false;
            lent_.push_back(e.first);
        }
        lent_group_ = g;
        std::vector<int> v = as_vector(ids);
        return VELOC_Checkpoint_selective(mode, v.data(), (int)v.size()) == VELOC_SUCCESS;
    }

    bool checkpoint_end(bool success) override
    {
        int rc = VELOC_Checkpoint_end(success);
        take_back();
        if (rc != VELOC_SUCCESS)
            return false;
        auto it = observers_.find(VELOC_OBSERVE_CKPT_END);
        if (it != observers_.end())
            it->second(name_, version_);
        return true;
    }

    bool checkpoint_wait() override { return VELOC_Checkpoint_wait() == VELOC_SUCCESS; }

    bool checkpoint_finished() override { return VELOC_Checkpoint_finished() == VELOC_SUCCESS; }

    int restart_test(const std::string &name, int version, int target_rank) override
    {
        if (!own(target_rank))
            return VELOC_FAILURE;
        return VELOC_Restart_test(name.c_str(), version);
    }

    bool restart(const std::string &name, int version, int target_rank) override
    {
        if (!restart_begin(name, version, target_rank))
            return false;
        bool mem = recover_mem(VELOC_RECOVER_ALL, {});
        return restart_end(mem) && mem;
    }

    bool restart_begin(const std::string &name, int version, int target_rank) override
    {
        if (!own(target_rank) || VELOC_Restart_begin(name.c_str(), version) != VELOC_SUCCESS)
            return false;
        name_ = name;
        version_ = version;
        return true;
    }

    size_t recover_size(int id) override
    {
        int n = VELOC_Recover_size(id);
        return n < 0 ? 0 : (size_t)n;
    }

    bool recover_mem(int mode, const std::set<int> &ids) override
    {
        const std::string g = group_of(name_);
        std::vector<serialized *> read;
        bool ok = true;
        for (auto &e : serial_[g]) {
            if (!selected(mode, ids, e.first))
                continue;
            int n = VELOC_Recover_size(e.first);
            if (n <= 0)
                continue; /* not in the checkpoint: left as it is */
            e.second.bytes.assign((size_t)n, '\0');
            if (VELOC_Region_protect(e.first, &e.second.bytes[0], (size_t)n, 1,
                                     c_group(g).c_str()) != VELOC_SUCCESS) {
                ok = false;
                break;
            }
            lent_.push_back(e.first);
            read.push_back(&e.second);
        }
        lent_group_ = g;
        std::vector<int> v = as_vector(ids);
        ok = ok && VELOC_Recover_selective(mode, v.data(), (int)v.size()) == VELOC_SUCCESS;
        take_back();
        for (size_t i = 0; ok && i < read.size(); i++) {
            std::istringstream in(read[i]->bytes);
            if (!read[i]->load(in))
                ok = complain("recover_mem", "a serialized region of " + name_ + " v" +
                                                 std::to_string(version_) +
                                                 " could not be deserialized");
        }
        return ok;
    }

    bool restart_end(bool success) override
    {
        return VELOC_Restart_end(success) == VELOC_SUCCESS;
    }

private:
    /* The group a checkpoint or restart of `name` uses: its own, or the default one. */
    std::string group_of(const std::string &name)
    {
        bool own_group = !raw_[name].empty() || !serial_[name].empty();
        return own_group ? name : std::string(default_mem_group);
    }

    /* Unregister the buffers lent to the C API for a checkpoint or a restart. */
    void take_back()
    {
        for (int id : lent_)
            VELOC_Region_unprotect(id, c_group(lent_group_).c_str());
        lent_.clear();
    }

    bool own(int target_rank)
    {
        if (target_rank < 0)
            return true;
        return complain("restart", "target_rank " + std::to_string(target_rank) +
                                       ": Cairn restarts each process from its own checkpoint "
                                       "only (use -1)");
    }

    bool mpi_;
    bool done_ = false;
    std::map<std::string, std::set<int>> raw_;
    std::map<std::string, std::map<int, serialized>> serial_;
    std::map<int, observer_t> observers_;
    std::vector<int> lent_;
    std::string lent_group_;
    std::string name_;
    int version_ = 0;
};

client_impl *the_client = nullptr;

void at_exit()
{
    if (the_client != nullptr)
        the_client->finalize();
}

veloc::client_t *made(bool ok, bool mpi)
{
    if (!ok)
        return nullptr;
    the_client = new client_impl(mpi);
    std::atexit(at_exit);
    return the_client;
}

} // namespace

veloc::client_t::~client_t() = default;

veloc::client_t *veloc::get_client(unsigned int id, const std::string &cfg_file)
{
    if (the_client != nullptr)
        return the_client;
    return made(VELOC_Init_single(id, cfg_file.c_str()) == VELOC_SUCCESS, false);
}

veloc::client_t *veloc::get_client(MPI_Comm comm, const std::string &cfg_file)
{
    if (the_client != nullptr)
        return the_client;
    return made(VELOC_Init(comm, cfg_file.c_str()) == VELOC_SUCCESS, true);
}
