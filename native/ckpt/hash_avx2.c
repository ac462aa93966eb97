/*
** hash_avx2.c: the image hashes of libcairn-ckpt.so (xxhash.h's XXH3, inlined) compiled for
** AVX2. xxhash.h picks its vector code when it is compiled, so the AVX2 build is this file,
** compiled with -mavx2 beside ckpt.c (built for the baseline x86-64); ckpt.c calls these
** only after the CPU and the kernel said AVX2 is usable (image_hashes_pick). The results are
** the same bits as the baseline build's: XXH3 is defined by its scalar algorithm.
*/
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hashes.h"

/* cairn_avx2_hash64, cairn_avx2_hash128, cairn_avx2_update128 */
CAIRN_IMAGE_HASHES(cairn_avx2_, __attribute__((visibility("hidden"))))
