//! The byte shuffle, with word-at-a-time kernels for even element sizes.
//!
//! Layout (part of the checkpoint format): with `n = len / elem` whole elements, shuffled byte
//! `j * n + i` is byte `j` of element `i`; the trailing `len % elem` bytes follow unchanged.
//! An element size of 0 or 1 leaves the bytes as they are.
//!
//! The kernels take 8 elements at a time and transpose them as byte matrices held in `u64`
//! words (little-endian: byte `b` of a word is bits `8b..8b + 8`), with masked shifts and
//! xors. Element sizes that are multiples of 8 are cut into 8-byte columns, each an 8 x 8
//! transpose; other multiples of 4 into 4-byte columns, and other even sizes into 2-byte
//! columns. Odd sizes, and the last `n % 8` elements, go byte by byte.

const LO32: u64 = 0x0000_0000_FFFF_FFFF;
const HI32: u64 = 0xFFFF_FFFF_0000_0000;

/// Swap the bits of `a` selected by `mask << shift` with the bits of `b` selected by `mask`.
#[inline(always)]
fn swap(a: &mut u64, b: &mut u64, shift: u32, mask: u64) {
    let t = ((*a >> shift) ^ *b) & mask;
    *a ^= t << shift;
    *b ^= t;
}

/// Transpose the 8 x 8 byte matrix whose row `k` is `r[k]` (column `j` = byte `j`).
#[inline(always)]
fn transpose8(r: &mut [u64; 8]) {
    let [r0, r1, r2, r3, r4, r5, r6, r7] = r;
    const M32: u64 = LO32;
    const M16: u64 = 0x0000_FFFF_0000_FFFF;
    const M8: u64 = 0x00FF_00FF_00FF_00FF;
    swap(r0, r4, 32, M32);
    swap(r1, r5, 32, M32);
    swap(r2, r6, 32, M32);
    swap(r3, r7, 32, M32);
    swap(r0, r2, 16, M16);
    swap(r1, r3, 16, M16);
    swap(r4, r6, 16, M16);
    swap(r5, r7, 16, M16);
    swap(r0, r1, 8, M8);
    swap(r2, r3, 8, M8);
    swap(r4, r5, 8, M8);
    swap(r6, r7, 8, M8);
}

/// Two 4 x 4 byte transposes side by side: the low and the high 32 bits of the four words
/// are each a matrix whose row `k` is word `k`'s half (column `j` = byte `j` of that half).
#[inline(always)]
fn transpose4x2(r: &mut [u64; 4]) {
    let [r0, r1, r2, r3] = r;
    const M16: u64 = 0x0000_FFFF_0000_FFFF;
    const M8: u64 = 0x00FF_00FF_00FF_00FF;
    swap(r0, r2, 16, M16);
    swap(r1, r3, 16, M16);
    swap(r0, r1, 8, M8);
    swap(r2, r3, 8, M8);
}

/// Swap bytes 1 and 2, and bytes 5 and 6, of `x`.
#[inline(always)]
fn swap_bytes_12_56(x: u64) -> u64 {
    let t = (x ^ (x >> 8)) & 0x0000_FF00_0000_FF00;
    x ^ t ^ (t << 8)
}

/// Swap bytes 2-3 with bytes 4-5 of `x` (its 16-bit units 1 and 2).
#[inline(always)]
fn swap_pairs_1_2(x: u64) -> u64 {
    let t = (x ^ (x >> 16)) & 0x0000_0000_FFFF_0000;
    x ^ t ^ (t << 16)
}

/// Four 2-byte elements `[a0 a1 b0 b1 c0 c1 d0 d1]` to `[a0 b0 c0 d0 a1 b1 c1 d1]`.
#[inline(always)]
fn unzip2(x: u64) -> u64 {
    swap_pairs_1_2(swap_bytes_12_56(x))
}

/// The inverse of [`unzip2`].
#[inline(always)]
fn zip2(x: u64) -> u64 {
    swap_bytes_12_56(swap_pairs_1_2(x))
}

#[inline(always)]
fn load(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[inline(always)]
fn store(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Shuffle the first `n / 8 * 8` of the `n` elements of `src` (`n * elem` bytes) into `dst`
/// (as long), for an element size that is a multiple of 8.
#[inline(always)]
fn shuffle_w8(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    for c in (0..elem / 8).map(|col| col * 8) {
        for (g, chunk) in src.chunks_exact(8 * elem).take(n / 8).enumerate() {
            let mut r = [0u64; 8];
            for (k, w) in r.iter_mut().enumerate() {
                *w = load(chunk, k * elem + c);
            }
            transpose8(&mut r);
            for (j, &w) in r.iter().enumerate() {
                store(dst, (c + j) * n + g * 8, w);
            }
        }
    }
}

#[inline(always)]
fn unshuffle_w8(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    for c in (0..elem / 8).map(|col| col * 8) {
        for (g, chunk) in dst.chunks_exact_mut(8 * elem).take(n / 8).enumerate() {
            let mut r = [0u64; 8];
            for (j, w) in r.iter_mut().enumerate() {
                *w = load(src, (c + j) * n + g * 8);
            }
            transpose8(&mut r);
            for (k, &w) in r.iter().enumerate() {
                store(chunk, k * elem + c, w);
            }
        }
    }
}

/// As [`shuffle_w8`] for element sizes that are multiples of 4: each 4-byte column of 8
/// elements is two 4 x 4 transposes, elements 0-3 in the low halves, 4-7 in the high ones.
#[inline(always)]
fn shuffle_w4(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    for c in (0..elem / 4).map(|col| col * 4) {
        for (g, chunk) in src.chunks_exact(8 * elem).take(n / 8).enumerate() {
            let mut r = if elem == 4 {
                // Elements 0-7 are contiguous: read them as four words of two.
                let [w0, w1, w2, w3] = [0, 8, 16, 24].map(|at| load(chunk, at));
                [
                    (w0 & LO32) | w2 << 32,
                    w0 >> 32 | (w2 & HI32),
                    (w1 & LO32) | w3 << 32,
                    w1 >> 32 | (w3 & HI32),
                ]
            } else {
                let e = |k: usize| load4(chunk, k * elem + c);
                [
                    e(0) | e(4) << 32,
                    e(1) | e(5) << 32,
                    e(2) | e(6) << 32,
                    e(3) | e(7) << 32,
                ]
            };
            transpose4x2(&mut r);
            for (j, &w) in r.iter().enumerate() {
                store(dst, (c + j) * n + g * 8, w);
            }
        }
    }
}

#[inline(always)]
fn unshuffle_w4(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    for c in (0..elem / 4).map(|col| col * 4) {
        for (g, chunk) in dst.chunks_exact_mut(8 * elem).take(n / 8).enumerate() {
            let mut r = [0u64; 4];
            for (j, w) in r.iter_mut().enumerate() {
                *w = load(src, (c + j) * n + g * 8);
            }
            transpose4x2(&mut r);
            if elem == 4 {
                // Elements 0-7 are contiguous: write them as four words.
                let [r0, r1, r2, r3] = r;
                store(chunk, 0, (r0 & LO32) | r1 << 32);
                store(chunk, 8, (r2 & LO32) | r3 << 32);
                store(chunk, 16, r0 >> 32 | (r1 & HI32));
                store(chunk, 24, r2 >> 32 | (r3 & HI32));
            } else {
                for (k, &w) in r.iter().enumerate() {
                    store4(chunk, k * elem + c, w as u32);
                    store4(chunk, (k + 4) * elem + c, (w >> 32) as u32);
                }
            }
        }
    }
}

#[inline(always)]
fn load4(b: &[u8], at: usize) -> u64 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as u64
}

#[inline(always)]
fn store4(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline(always)]
fn load2(b: &[u8], at: usize) -> u64 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes")) as u64
}

#[inline(always)]
fn store2(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// As [`shuffle_w8`] for even element sizes: each 2-byte column of 8 elements is gathered
/// into two words of four elements and unzipped into its two planes.
#[inline(always)]
fn shuffle_w2(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    for c in (0..elem / 2).map(|col| col * 2) {
        for (g, chunk) in src.chunks_exact(8 * elem).take(n / 8).enumerate() {
            let (x0, x1) = if elem == 2 {
                (load(chunk, 0), load(chunk, 8))
            } else {
                let e = |k: usize| load2(chunk, k * elem + c) << (16 * (k % 4));
                (e(0) | e(1) | e(2) | e(3), e(4) | e(5) | e(6) | e(7))
            };
            let (x0, x1) = (unzip2(x0), unzip2(x1));
            store(dst, c * n + g * 8, (x0 & LO32) | x1 << 32);
            store(dst, (c + 1) * n + g * 8, x0 >> 32 | (x1 & HI32));
        }
    }
}

#[inline(always)]
fn unshuffle_w2(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    for c in (0..elem / 2).map(|col| col * 2) {
        for (g, chunk) in dst.chunks_exact_mut(8 * elem).take(n / 8).enumerate() {
            let p0 = load(src, c * n + g * 8);
            let p1 = load(src, (c + 1) * n + g * 8);
            let x0 = zip2((p0 & LO32) | p1 << 32);
            let x1 = zip2(p0 >> 32 | (p1 & HI32));
            if elem == 2 {
                store(chunk, 0, x0);
                store(chunk, 8, x1);
            } else {
                for k in 0..4 {
                    store2(chunk, k * elem + c, (x0 >> (16 * k)) as u16);
                    store2(chunk, (k + 4) * elem + c, (x1 >> (16 * k)) as u16);
                }
            }
        }
    }
}

/// Whole elements in `len` bytes that the shuffle rearranges (0: the bytes stay as they are).
#[inline]
fn elements(len: usize, elem: usize) -> usize {
    if elem > 1 {
        len / elem
    } else {
        0
    }
}

/// Shuffle the elements of `src` from element `from` on into `dst` (same length) byte by byte.
fn shuffle_bytes(src: &[u8], elem: usize, n: usize, from: usize, dst: &mut [u8]) {
    let src = &src[from * elem..];
    for (j, plane) in dst.chunks_exact_mut(n).enumerate() {
        for (i, out) in plane[from..].iter_mut().enumerate() {
            *out = src[i * elem + j];
        }
    }
}

fn unshuffle_bytes(src: &[u8], elem: usize, n: usize, from: usize, dst: &mut [u8]) {
    for (i, e) in dst.chunks_exact_mut(elem).enumerate().skip(from) {
        for (j, out) in e.iter_mut().enumerate() {
            *out = src[j * n + i];
        }
    }
}

// The kernels as functions of their own: the common element sizes (2, 4, 8, and 16 for
// complex doubles) with the size as a constant, so each is compiled for it (about twice as
// fast as with the size as a variable), and one for any other multiple of each word width.
#[inline(never)]
fn shuffle2(src: &[u8], _: usize, n: usize, dst: &mut [u8]) {
    shuffle_w2(src, 2, n, dst)
}
#[inline(never)]
fn shuffle4(src: &[u8], _: usize, n: usize, dst: &mut [u8]) {
    shuffle_w4(src, 4, n, dst)
}
#[inline(never)]
fn shuffle8(src: &[u8], _: usize, n: usize, dst: &mut [u8]) {
    shuffle_w8(src, 8, n, dst)
}
#[inline(never)]
fn shuffle16(src: &[u8], _: usize, n: usize, dst: &mut [u8]) {
    shuffle_w8(src, 16, n, dst)
}
#[inline(never)]
fn shuffle_by2(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    shuffle_w2(src, elem, n, dst)
}
#[inline(never)]
fn shuffle_by4(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    shuffle_w4(src, elem, n, dst)
}
#[inline(never)]
fn shuffle_by8(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    shuffle_w8(src, elem, n, dst)
}
#[inline(never)]
fn unshuffle2(src: &[u8], _: usize, n: usize, dst: &mut [u8]) {
    unshuffle_w2(src, 2, n, dst)
}
#[inline(never)]
fn unshuffle4(src: &[u8], _: usize, n: usize, dst: &mut [u8]) {
    unshuffle_w4(src, 4, n, dst)
}
#[inline(never)]
fn unshuffle8(src: &[u8], _: usize, n: usize, dst: &mut [u8]) {
    unshuffle_w8(src, 8, n, dst)
}
#[inline(never)]
fn unshuffle16(src: &[u8], _: usize, n: usize, dst: &mut [u8]) {
    unshuffle_w8(src, 16, n, dst)
}
#[inline(never)]
fn unshuffle_by2(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    unshuffle_w2(src, elem, n, dst)
}
#[inline(never)]
fn unshuffle_by4(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    unshuffle_w4(src, elem, n, dst)
}
#[inline(never)]
fn unshuffle_by8(src: &[u8], elem: usize, n: usize, dst: &mut [u8]) {
    unshuffle_w8(src, elem, n, dst)
}

type Kernel = fn(&[u8], usize, usize, &mut [u8]);

/// The word kernel for `elem` in each direction (shuffle, unshuffle), if there is one.
fn kernels(elem: usize) -> Option<(Kernel, Kernel)> {
    Some(match elem {
        2 => (shuffle2, unshuffle2),
        4 => (shuffle4, unshuffle4),
        8 => (shuffle8, unshuffle8),
        16 => (shuffle16, unshuffle16),
        e if e % 8 == 0 => (shuffle_by8, unshuffle_by8),
        e if e % 4 == 0 => (shuffle_by4, unshuffle_by4),
        e if e % 2 == 0 && e > 0 => (shuffle_by2, unshuffle_by2),
        _ => return None,
    })
}

/// Shuffle `src` into `dst`, which must have the same length.
pub(crate) fn shuffle_slice(src: &[u8], elem: usize, dst: &mut [u8]) {
    assert_eq!(
        src.len(),
        dst.len(),
        "shuffle: source and destination lengths"
    );
    let n = elements(src.len(), elem);
    let body = n * elem;
    let (src_body, src_tail) = src.split_at(body);
    let (dst_body, dst_tail) = dst.split_at_mut(body);
    let mut done = 0;
    if let (true, Some((kernel, _))) = (n >= 8, kernels(elem)) {
        kernel(src_body, elem, n, dst_body);
        done = n / 8 * 8;
    }
    if done < n {
        shuffle_bytes(src_body, elem, n, done, dst_body);
    }
    dst_tail.copy_from_slice(src_tail);
}

/// Undo [`shuffle_slice`]: `dst` must have the length of `src`.
pub(crate) fn unshuffle_slice(src: &[u8], elem: usize, dst: &mut [u8]) {
    assert_eq!(
        src.len(),
        dst.len(),
        "unshuffle: source and destination lengths"
    );
    let n = elements(src.len(), elem);
    let body = n * elem;
    let (src_body, src_tail) = src.split_at(body);
    let (dst_body, dst_tail) = dst.split_at_mut(body);
    let mut done = 0;
    if let (true, Some((_, kernel))) = (n >= 8, kernels(elem)) {
        kernel(src_body, elem, n, dst_body);
        done = n / 8 * 8;
    }
    if done < n {
        unshuffle_bytes(src_body, elem, n, done, dst_body);
    }
    dst_tail.copy_from_slice(src_tail);
}
