/* veloc/cereal.hpp: serializer and deserializer of a data structure for veloc::client_t's
 * mem_protect, through cereal's binary archives. */
#ifndef VELOC_CEREAL_HPP
#define VELOC_CEREAL_HPP

#include <cereal/archives/binary.hpp>

#include <exception>
#include <functional>
#include <iostream>

namespace veloc::cereal {
using namespace ::cereal;

template <typename T> std::function<void(std::ostream &)> serializer(T &data)
{
    return [&data](std::ostream &out) {
        BinaryOutputArchive archive(out);
        archive(data);
    };
}

template <typename T> std::function<bool(std::istream &)> deserializer(T &data)
{
    return [&data](std::istream &in) {
        try {
            BinaryInputArchive archive(in);
            archive(data);
            return true;
        } catch (const std::exception &) {
            return false;
        }
    };
}
} // namespace veloc::cereal

#endif /* VELOC_CEREAL_HPP */
