/* veloc/boost.hpp: serializer and deserializer of a data structure for veloc::client_t's
 * mem_protect, through Boost.Serialization's binary archives. */
#ifndef VELOC_BOOST_HPP
#define VELOC_BOOST_HPP

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>

#include <exception>
#include <functional>
#include <iostream>

namespace veloc::boost {
using namespace ::boost;

template <typename T> std::function<void(std::ostream &)> serializer(T &data)
{
    return [&data](std::ostream &out) {
        ::boost::archive::binary_oarchive archive(out);
        archive << data;
    };
}

template <typename T> std::function<bool(std::istream &)> deserializer(T &data)
{
    return [&data](std::istream &in) {
        try {
            ::boost::archive::binary_iarchive archive(in);
            archive >> data;
            return true;
        } catch (const std::exception &) {
            return false;
        }
    };
}
} // namespace veloc::boost

#endif /* VELOC_BOOST_HPP */
