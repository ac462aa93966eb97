/* veloc/bitsery.hpp: serializer and deserializer of a data structure for veloc::client_t's
 * mem_protect, through bitsery's stream adapters. */
#ifndef VELOC_BITSERY_HPP
#define VELOC_BITSERY_HPP

#include <bitsery/adapter/stream.h>
#include <bitsery/bitsery.h>

#include <cstdint>
#include <functional>
#include <iostream>

namespace veloc::bitsery {
using namespace ::bitsery;

template <typename T> std::function<void(std::ostream &)> serializer(T &data)
{
    return [&data](std::ostream &out) {
        Serializer<OutputBufferedStreamAdapter> s{out};
        s.object(data);
        s.adapter().flush();
    };
}

template <typename T> std::function<bool(std::istream &)> deserializer(T &data)
{
    return [&data](std::istream &in) {
        return quickDeserialization<InputStreamAdapter>(in, data).first == ReaderError::NoError;
    };
}
} // namespace veloc::bitsery

#endif /* VELOC_BITSERY_HPP */
