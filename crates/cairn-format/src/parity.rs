//! The parity object of an XOR or Reed-Solomon set member (`parity/rank<r>.par`).
//!
//! ```text
//! offset  size    field (little-endian)
//! 0       8       magic "CAIRNPAR"
//! 8       4       u32 format version (1)
//! 12      4       u32 header length H (through the header checksum)
//! 16      1       u8 codec: 1 = xor, 2 = Reed-Solomon
//! 17      3       zero padding
//! 20      4       u32 set id
//! 24      4       u32 n, members in the set
//! 28      4       u32 m, parity shards per stripe
//! 32      4       u32 this holder's member index
//! 36      8       u64 segment (shard) size S
//! 44      12 x n  per member: u32 rank, u64 length of its rank file
//! ...     8 x m   xxh3-64 of each shard this member holds
//! H - 8   8       xxh3-64 of bytes [0, H - 8)
//! H       S x m   the shards
//! ```

use crate::{checksum, FormatError};

pub const PARITY_MAGIC: &[u8; 8] = b"CAIRNPAR";

/// Which erasure code a parity object holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParityCodec {
    Xor = 1,
    ReedSolomon = 2,
}

/// The header of a parity object: the set it protects and checksums of its shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParityHeader {
    pub codec: ParityCodec,
    pub set_id: u32,
    pub m: u32,
    /// This holder's index among `members`.
    pub holder: u32,
    pub segment: u64,
    /// (rank, rank-file length) of every member, in member order.
    pub members: Vec<(u32, u64)>,
    /// Checksum of each of the `m` shards held.
    pub shard_sums: Vec<u64>,
}

impl ParityHeader {
    pub fn n(&self) -> usize {
        self.members.len()
    }

    /// Bytes at the start of a parity object that say how long its header is.
    pub const PREFIX_LEN: usize = 16;

    /// The length of the header that starts with `prefix` (its first [`Self::PREFIX_LEN`]
    /// bytes), to read it whole before [`ParityHeader::decode`]; `None` for what is not a
    /// parity header or cannot be a sane one. The header itself is checked by `decode`.
    pub fn len_from_prefix(prefix: &[u8]) -> Option<usize> {
        if prefix.len() < Self::PREFIX_LEN || &prefix[..8] != PARITY_MAGIC {
            return None;
        }
        let h = u32::from_le_bytes(prefix[12..16].try_into().unwrap()) as usize;
        // At most 1024 members and as many shards (see `decode`).
        (52..=44 + 20 * 1024 + 8).contains(&h).then_some(h)
    }

    pub fn encoded_len(&self) -> usize {
        44 + 12 * self.members.len() + 8 * self.shard_sums.len() + 8
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        b.extend_from_slice(PARITY_MAGIC);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&(self.encoded_len() as u32).to_le_bytes());
        b.push(self.codec as u8);
        b.extend_from_slice(&[0u8; 3]);
        b.extend_from_slice(&self.set_id.to_le_bytes());
        b.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.m.to_le_bytes());
        b.extend_from_slice(&self.holder.to_le_bytes());
        b.extend_from_slice(&self.segment.to_le_bytes());
        for (rank, len) in &self.members {
            b.extend_from_slice(&rank.to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
        }
        for s in &self.shard_sums {
            b.extend_from_slice(&s.to_le_bytes());
        }
        let sum = checksum(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decode the header at the start of `buf` (which may hold more, e.g. the shards).
    pub fn decode(buf: &[u8]) -> Result<ParityHeader, FormatError> {
        let u32_at = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(buf[o..o + 8].try_into().unwrap());
        if buf.len() < 52 {
            return Err(FormatError::Truncated("parity header"));
        }
        if &buf[..8] != PARITY_MAGIC {
            return Err(FormatError::Magic);
        }
        if u32_at(8) != 1 {
            return Err(FormatError::Version(u32_at(8)));
        }
        let h = u32_at(12) as usize;
        let (n, m) = (u32_at(24) as usize, u32_at(28) as usize);
        if n == 0 || n > 1024 || m == 0 || m >= n || h != 44 + 12 * n + 8 * m + 8 || buf.len() < h {
            return Err(FormatError::Invalid {
                field: "parity header",
                value: format!("n {n}, m {m}, length {h}"),
            });
        }
        if checksum(&buf[..h - 8]) != u64_at(h - 8) {
            return Err(FormatError::Checksum("parity header".into()));
        }
        let codec = match buf[16] {
            1 => ParityCodec::Xor,
            2 => ParityCodec::ReedSolomon,
            c => {
                return Err(FormatError::Invalid {
                    field: "parity codec",
                    value: c.to_string(),
                })
            }
        };
        let holder = u32_at(32);
        if holder as usize >= n {
            return Err(FormatError::Invalid {
                field: "parity holder",
                value: format!("{holder} of {n}"),
            });
        }
        let members = (0..n)
            .map(|i| (u32_at(44 + 12 * i), u64_at(48 + 12 * i)))
            .collect();
        let shard_sums = (0..m).map(|j| u64_at(44 + 12 * n + 8 * j)).collect();
        Ok(ParityHeader {
            codec,
            set_id: u32_at(20),
            m: m as u32,
            holder,
            segment: u64_at(36),
            members,
            shard_sums,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let h = ParityHeader {
            codec: ParityCodec::ReedSolomon,
            set_id: 3,
            m: 2,
            holder: 1,
            segment: 4096,
            members: vec![(0, 100), (2, 200), (4, 300), (6, 50)],
            shard_sums: vec![7, 8],
        };
        let mut b = h.encode();
        assert_eq!(b.len(), h.encoded_len());
        b.extend_from_slice(&[0u8; 16]);
        assert_eq!(ParityHeader::decode(&b).unwrap(), h);
        for i in 0..h.encoded_len() {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert!(ParityHeader::decode(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(ParityHeader::decode(&b[..40]).is_err());
        assert_eq!(ParityHeader::len_from_prefix(&b), Some(h.encoded_len()));
        assert_eq!(ParityHeader::len_from_prefix(&b[..15]), None);
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert_eq!(ParityHeader::len_from_prefix(&bad), None);
        bad = b.clone();
        bad[14] = 0x7f;
        assert_eq!(
            ParityHeader::len_from_prefix(&bad),
            None,
            "an absurd length"
        );
    }
}
