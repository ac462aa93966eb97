//! The stripe layout and erasure codes of an xor / rs set.
//!
//! A set has `n` members and `m` parity shards per stripe (`k = n - m` data shards). Every
//! member's part, padded to the set's longest part, is cut into `k` segments of `S` bytes.
//! There are `n` stripes; stripe `t` holds
//!
//! - data shard `i` (for `i < k`): segment `i` of member `(t + m + i) mod n`,
//! - parity shard `j` (for `j < m`): stored by member `(t + j) mod n`.
//!
//! So every member contributes exactly one segment to `k` stripes and holds one parity shard
//! of `m` others, and no stripe has two shards on one member: losing any `m` members loses at
//! most `m` shards of each stripe, which the code recovers.

/// Member holding parity shard `j` of stripe `t`.
pub fn parity_holder(n: usize, t: usize, j: usize) -> usize {
    (t + j) % n
}

/// Member contributing data shard `i` of stripe `t`.
pub fn data_member(n: usize, m: usize, t: usize, i: usize) -> usize {
    (t + m + i) % n
}

/// The stripes whose parity member `h` holds, as (stripe, parity index).
pub fn held_stripes(n: usize, m: usize, h: usize) -> Vec<(usize, usize)> {
    (0..m).map(|j| ((h + n - j) % n, j)).collect()
}

/// Segment size for parts of at most `max_len` bytes: even (the Reed-Solomon code works on
/// 16-bit words) and at least 2.
pub fn segment_size(max_len: u64, n: usize, m: usize) -> u64 {
    let k = (n - m) as u64;
    let s = max_len.div_ceil(k).max(2);
    s + (s & 1)
}

/// Slices of a stripe encoded on their own give the same parity bytes as the whole stripe
/// when every slice but the last is a multiple of this (the Reed-Solomon code works on
/// 64-byte chunks of 16-bit words).
pub const SLICE_ALIGN: usize = 64;

/// The erasure code of a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// One parity shard, the XOR of the data shards.
    Xor,
    /// `m` parity shards from a systematic Reed-Solomon code (reed-solomon-simd).
    ReedSolomon,
}

/// Compute the `m` parity shards of one stripe from its `k` data shards (all `S` bytes).
pub fn encode(codec: Codec, data: &[&[u8]], m: usize) -> Result<Vec<Vec<u8>>, String> {
    match codec {
        Codec::Xor => {
            let mut p = vec![0u8; data.first().map_or(0, |d| d.len())];
            for d in data {
                xor_into(&mut p, d);
            }
            Ok(vec![p])
        }
        Codec::ReedSolomon => reed_solomon_simd::encode(data.len(), m, data)
            .map_err(|e| format!("Reed-Solomon encode: {e}")),
    }
}

/// An encoder kept from slice to slice, so encoding a stripe in cache-sized slices allocates
/// nothing after the first.
pub struct SliceEncoder {
    codec: Codec,
    k: usize,
    m: usize,
    rs: Option<reed_solomon_simd::ReedSolomonEncoder>,
}

fn rs_error(e: reed_solomon_simd::Error) -> String {
    format!("Reed-Solomon encode: {e}")
}

impl SliceEncoder {
    pub fn new(codec: Codec, k: usize, m: usize) -> SliceEncoder {
        SliceEncoder {
            codec,
            k,
            m,
            rs: None,
        }
    }

    /// Every parity shard of one slice of a stripe, from its `k` data slices (all the same
    /// even length), into `out[j]` (each resized to that length).
    pub fn encode_all(&mut self, data: &[&[u8]], out: &mut [Vec<u8>]) -> Result<(), String> {
        if out.len() != self.m {
            return Err(format!("a stripe has {} parity shards", self.m));
        }
        match self.codec {
            Codec::Xor => self.encode_one(data, 0, &mut out[0]),
            Codec::ReedSolomon => {
                let len = data.first().map_or(0, |d| d.len());
                if data.len() != self.k || data.iter().any(|d| d.len() != len) {
                    return Err(format!(
                        "a stripe slice needs {} data slices of one length",
                        self.k
                    ));
                }
                let rs = self.rs_encoder(data, len)?;
                let result = rs.encode().map_err(rs_error)?;
                for (j, o) in out.iter_mut().enumerate() {
                    let shard = result
                        .recovery(j)
                        .ok_or_else(|| format!("Reed-Solomon encode: no recovery shard {j}"))?;
                    o.clear();
                    o.extend_from_slice(shard);
                }
                Ok(())
            }
        }
    }

    /// The kept Reed-Solomon encoder, reset for shards of `len` bytes and fed `data`.
    fn rs_encoder(
        &mut self,
        data: &[&[u8]],
        len: usize,
    ) -> Result<&mut reed_solomon_simd::ReedSolomonEncoder, String> {
        match self.rs.as_mut() {
            Some(rs) => rs.reset(self.k, self.m, len).map_err(rs_error)?,
            None => {
                self.rs = Some(
                    reed_solomon_simd::ReedSolomonEncoder::new(self.k, self.m, len)
                        .map_err(rs_error)?,
                )
            }
        }
        let rs = self.rs.as_mut().ok_or("Reed-Solomon encoder missing")?;
        for d in data {
            rs.add_original_shard(d).map_err(rs_error)?;
        }
        Ok(rs)
    }

    /// Parity shard `j` of one slice of a stripe, from its `k` data slices (all the same
    /// even length), written into `out` (resized to that length).
    pub fn encode_one(
        &mut self,
        data: &[&[u8]],
        j: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let len = data.first().map_or(0, |d| d.len());
        if data.len() != self.k || data.iter().any(|d| d.len() != len) || j >= self.m {
            return Err(format!(
                "a stripe slice needs {} data slices of one length and a parity index below {}",
                self.k, self.m
            ));
        }
        out.clear();
        out.resize(len, 0);
        match self.codec {
            Codec::Xor => {
                for d in data {
                    xor_into(out, d);
                }
            }
            Codec::ReedSolomon => {
                let rs = self.rs_encoder(data, len)?;
                let result = rs.encode().map_err(rs_error)?;
                let shard = result
                    .recovery(j)
                    .ok_or_else(|| format!("Reed-Solomon encode: no recovery shard {j}"))?;
                out.copy_from_slice(shard);
            }
        }
        Ok(())
    }
}

/// `acc ^= src`, byte by byte over the shorter of the two.
fn xor_into(acc: &mut [u8], src: &[u8]) {
    // Word-at-a-time XOR; the compiler vectorises the 8-byte loop.
    let (a8, a_tail) = acc.split_at_mut(acc.len() / 8 * 8);
    let (s8, s_tail) = src.split_at(a8.len());
    for (a, s) in a8.chunks_exact_mut(8).zip(s8.chunks_exact(8)) {
        let v =
            u64::from_ne_bytes(a.try_into().unwrap()) ^ u64::from_ne_bytes(s.try_into().unwrap());
        a.copy_from_slice(&v.to_ne_bytes());
    }
    for (a, s) in a_tail.iter_mut().zip(s_tail) {
        *a ^= s;
    }
}

/// Recover the missing data shards of one stripe (`None` entries) from the shards present.
/// At most `m` shards in all may be missing. Returns the complete data shards.
pub fn recover(
    codec: Codec,
    data: &[Option<Vec<u8>>],
    parity: &[Option<Vec<u8>>],
) -> Result<Vec<Vec<u8>>, String> {
    let (k, m) = (data.len(), parity.len());
    let missing: Vec<usize> = (0..k).filter(|i| data[*i].is_none()).collect();
    if missing.is_empty() {
        return Ok(data.iter().map(|d| d.clone().unwrap()).collect());
    }
    let lost = missing.len() + parity.iter().filter(|p| p.is_none()).count();
    if lost > m {
        return Err(format!(
            "{lost} shards of a stripe are lost but the code tolerates {m}"
        ));
    }
    let mut out: Vec<Option<Vec<u8>>> = data.to_vec();
    match codec {
        Codec::Xor => {
            let mut p = parity[0]
                .clone()
                .expect("checked above: only one shard lost");
            for d in data.iter().flatten() {
                xor_into(&mut p, d);
            }
            out[missing[0]] = Some(p);
        }
        Codec::ReedSolomon => {
            let originals = data
                .iter()
                .enumerate()
                .filter_map(|(i, d)| d.as_ref().map(|d| (i, d)));
            let recovery = parity
                .iter()
                .enumerate()
                .filter_map(|(j, p)| p.as_ref().map(|p| (j, p)));
            let restored = reed_solomon_simd::decode(k, m, originals, recovery)
                .map_err(|e| format!("Reed-Solomon decode: {e}"))?;
            for (i, d) in restored {
                out[i] = Some(d);
            }
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(i, d)| d.ok_or_else(|| format!("data shard {i} could not be recovered")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    #[test]
    fn layout_puts_each_shard_on_a_distinct_member() {
        for n in 2..10 {
            for m in 1..n {
                let k = n - m;
                let mut contributions = vec![0; n];
                let mut held = vec![0; n];
                for t in 0..n {
                    let mut members: Vec<usize> = (0..k)
                        .map(|i| data_member(n, m, t, i))
                        .chain((0..m).map(|j| parity_holder(n, t, j)))
                        .collect();
                    for i in 0..k {
                        contributions[data_member(n, m, t, i)] += 1;
                    }
                    for j in 0..m {
                        held[parity_holder(n, t, j)] += 1;
                    }
                    members.sort();
                    members.dedup();
                    assert_eq!(
                        members.len(),
                        n,
                        "stripe {t} of n={n} m={m} reuses a member"
                    );
                }
                assert!(contributions.iter().all(|c| *c == k) && held.iter().all(|c| *c == m));
                for h in 0..n {
                    for (t, j) in held_stripes(n, m, h) {
                        assert_eq!(parity_holder(n, t, j), h);
                    }
                }
            }
        }
    }

    #[test]
    fn any_m_lost_shards_are_recovered() {
        let mut next = rng(7);
        for (codec, k, m) in [
            (Codec::Xor, 3, 1),
            (Codec::Xor, 1, 1),
            (Codec::ReedSolomon, 4, 2),
            (Codec::ReedSolomon, 8, 2),
            (Codec::ReedSolomon, 1, 2),
            (Codec::ReedSolomon, 5, 3),
        ] {
            let s = 2 * (1 + next() % 500) as usize;
            let data: Vec<Vec<u8>> = (0..k)
                .map(|_| (0..s).map(|_| next() as u8).collect())
                .collect();
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let parity = encode(codec, &refs, m).unwrap();
            assert_eq!(parity.len(), m);
            // Every way of losing up to m of the k + m shards.
            for mask in 0u32..(1 << (k + m)) {
                if mask.count_ones() as usize > m {
                    continue;
                }
                let d: Vec<Option<Vec<u8>>> = (0..k)
                    .map(|i| (mask & (1 << i) == 0).then(|| data[i].clone()))
                    .collect();
                let p: Vec<Option<Vec<u8>>> = (0..m)
                    .map(|j| (mask & (1 << (k + j)) == 0).then(|| parity[j].clone()))
                    .collect();
                assert_eq!(
                    recover(codec, &d, &p).unwrap(),
                    data,
                    "{codec:?} k={k} m={m} mask={mask:b}"
                );
            }
            let all_lost: Vec<Option<Vec<u8>>> = vec![None; k];
            let none: Vec<Option<Vec<u8>>> = vec![None; m];
            if k + m > m {
                assert!(
                    recover(codec, &all_lost, &none).is_err(),
                    "losing everything must fail, not invent data"
                );
            }
        }
    }

    #[test]
    fn encoding_slices_gives_the_parity_of_the_whole() {
        // The engine encodes a stripe slice by slice (multiples of SLICE_ALIGN, the last one
        // shorter); the parity must be the same bytes as encoding whole shards, which is what
        // the rebuild decodes.
        let mut next = rng(11);
        for (codec, k, m, s, slice) in [
            (Codec::Xor, 3, 1, 1000, 128),
            (Codec::ReedSolomon, 2, 2, 4096 + 62, 1024),
            (Codec::ReedSolomon, 8, 2, 3 * 640 + 6, 640),
            (Codec::ReedSolomon, 4, 3, 200, 64),
        ] {
            assert_eq!(slice % SLICE_ALIGN, 0);
            let data: Vec<Vec<u8>> = (0..k)
                .map(|_| (0..s).map(|_| next() as u8).collect())
                .collect();
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let whole = encode(codec, &refs, m).unwrap();
            let mut sliced = vec![Vec::new(); m];
            for o in (0..s).step_by(slice) {
                let c = slice.min(s - o);
                let part: Vec<&[u8]> = data.iter().map(|d| &d[o..o + c]).collect();
                for (j, p) in encode(codec, &part, m).unwrap().into_iter().enumerate() {
                    sliced[j].extend_from_slice(&p);
                }
            }
            assert_eq!(sliced, whole, "{codec:?} k={k} m={m} s={s} slice={slice}");
            let mut enc = SliceEncoder::new(codec, k, m);
            let mut out = Vec::new();
            for (j, w) in whole.iter().enumerate() {
                let mut got = Vec::new();
                for o in (0..s).step_by(slice) {
                    let c = slice.min(s - o);
                    let part: Vec<&[u8]> = data.iter().map(|d| &d[o..o + c]).collect();
                    enc.encode_one(&part, j, &mut out).unwrap();
                    got.extend_from_slice(&out);
                }
                assert_eq!(&got, w, "SliceEncoder {codec:?} k={k} m={m} j={j}");
            }
            let mut all = vec![Vec::new(); m];
            let mut outs = vec![Vec::new(); m];
            for o in (0..s).step_by(slice) {
                let c = slice.min(s - o);
                let part: Vec<&[u8]> = data.iter().map(|d| &d[o..o + c]).collect();
                enc.encode_all(&part, &mut outs).unwrap();
                for (a, p) in all.iter_mut().zip(&outs) {
                    a.extend_from_slice(p);
                }
            }
            assert_eq!(all, whole, "encode_all {codec:?} k={k} m={m}");
        }
    }

    #[test]
    fn segments_are_even_and_cover_the_longest_part() {
        assert_eq!(segment_size(0, 3, 1), 2);
        assert_eq!(segment_size(11, 3, 1), 6);
        assert_eq!(segment_size(4096, 4, 2), 2048);
        for len in 0..300u64 {
            let s = segment_size(len, 5, 2);
            assert!(s % 2 == 0 && s * 3 >= len);
        }
    }
}
