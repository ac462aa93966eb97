/*
** hashes.h: the image hashes (a page run's checksum, the engine's block hashes), defined
** once for each build of them: ckpt.c's for the baseline CPU and hash_avx2.c's for AVX2.
** They are xxhash.h's XXH3, inlined, so each includer gets the vector code it is compiled
** for; include xxhash.h (XXH_INLINE_ALL) first.
*/
#ifndef CAIRN_HASHES_H
#define CAIRN_HASHES_H

#define CAIRN_IMAGE_HASHES(prefix, linkage)                                                       \
    linkage uint64_t prefix##hash64(const void *p, size_t len)                                    \
    {                                                                                              \
        return XXH3_64bits(p, len);                                                                \
    }                                                                                              \
    linkage XXH128_hash_t prefix##hash128(const void *p, size_t len)                              \
    {                                                                                              \
        return XXH3_128bits(p, len);                                                               \
    }                                                                                              \
    linkage void prefix##update128(XXH3_state_t *st, const void *p, size_t len)                   \
    {                                                                                              \
        (void)XXH3_128bits_update(st, p, len);                                                     \
    }

#endif
