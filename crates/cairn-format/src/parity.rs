//! The parity object of an XOR or Reed-Solomon set member (`parity/rank<r>.par`).
//!
//! ```text
//! offset  size    field (little-endian), format version 2
//! 0       8       magic "CAIRNPAR"
//! 8       4       u32 format version (2; version 1 is still read)
//! 12      4       u32 header length H (through the header checksum)
//! 16      1       u8 codec: 1 = xor, 2 = Reed-Solomon
//! 17      1       u8 L, length of the checkpoint's name (1 to 128)
//! 18      2       zero padding
//! 20      4       u32 set id
//! 24      4       u32 n, members in the set
//! 28      4       u32 m, parity shards per stripe
//! 32      4       u32 this holder's member index
//! 36      8       u64 segment (shard) size S
//! 44      8       i64 the checkpoint's version
//! 52      L       the checkpoint's name
//! 52+L    20 x n  per member: u32 rank, u64 length of its rank file, u64 the index checksum
//!                 of its rank file (the trailer's), which names its contents
//! ...     8 x m   xxh3-64 of each shard this member holds
//! H - 8   8       xxh3-64 of bytes [0, H - 8)
//! H       S x m   the shards
//! ```
//!
//! Version 1 has no name, version or index checksums (byte 17 is zero and the member records
//! start at 44, 12 bytes each): such parity is not bound to its checkpoint, and readers say so.

use crate::{check_name, checksum, shown, FormatError};

pub const PARITY_MAGIC: &[u8; 8] = b"CAIRNPAR";

/// The parity format this build writes.
pub const PARITY_FORMAT: u32 = 2;

/// Which erasure code a parity object holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParityCodec {
    Xor = 1,
    ReedSolomon = 2,
}

/// The header of a parity object: the checkpoint and set it protects, the rank files it was
/// encoded from, and checksums of its shards.
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
    /// The checkpoint protected, and the index checksum of every member's rank file (in
    /// member order); `None` for a format-1 object, which records neither.
    pub bound: Option<Binding>,
}

/// What a parity object protects: a checkpoint version, and the exact rank files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub version: i64,
    /// The trailer's index checksum of each member's rank file, in member order.
    pub index_sums: Vec<u64>,
}

impl ParityHeader {
    pub fn n(&self) -> usize {
        self.members.len()
    }

    /// Bytes at the start of a parity object that say how long its header is.
    pub const PREFIX_LEN: usize = 16;

    /// The longest header: a 128-byte name, 1024 members and 1023 shards.
    pub const MAX_LEN: usize = 52 + 128 + 20 * 1024 + 8 * 1023 + 8;

    /// The length of the header that starts with `prefix` (its first [`Self::PREFIX_LEN`]
    /// bytes), to read it whole before [`ParityHeader::decode`]; `None` for what is not a
    /// parity header or cannot be a sane one. The header itself is checked by `decode`.
    pub fn len_from_prefix(prefix: &[u8]) -> Option<usize> {
        if prefix.len() < Self::PREFIX_LEN || &prefix[..8] != PARITY_MAGIC {
            return None;
        }
        let h = u32::from_le_bytes(prefix[12..16].try_into().unwrap()) as usize;
        (52..=Self::MAX_LEN).contains(&h).then_some(h)
    }

    pub fn encoded_len(&self) -> usize {
        match &self.bound {
            Some(b) => 52 + b.name.len() + 20 * self.members.len() + 8 * self.shard_sums.len() + 8,
            None => 44 + 12 * self.members.len() + 8 * self.shard_sums.len() + 8,
        }
    }

    /// The header's bytes: format 2 when it is bound to a checkpoint, else format 1.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        b.extend_from_slice(PARITY_MAGIC);
        let format: u32 = if self.bound.is_some() { 2 } else { 1 };
        b.extend_from_slice(&format.to_le_bytes());
        b.extend_from_slice(&(self.encoded_len() as u32).to_le_bytes());
        b.push(self.codec as u8);
        b.push(self.bound.as_ref().map_or(0, |x| x.name.len() as u8));
        b.extend_from_slice(&[0u8; 2]);
        b.extend_from_slice(&self.set_id.to_le_bytes());
        b.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.m.to_le_bytes());
        b.extend_from_slice(&self.holder.to_le_bytes());
        b.extend_from_slice(&self.segment.to_le_bytes());
        if let Some(x) = &self.bound {
            b.extend_from_slice(&x.version.to_le_bytes());
            b.extend_from_slice(x.name.as_bytes());
        }
        for (i, (rank, len)) in self.members.iter().enumerate() {
            b.extend_from_slice(&rank.to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
            if let Some(x) = &self.bound {
                b.extend_from_slice(&x.index_sums.get(i).copied().unwrap_or(0).to_le_bytes());
            }
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
        let format = u32_at(8);
        if format != 1 && format != 2 {
            return Err(FormatError::Version(format));
        }
        let h = u32_at(12) as usize;
        let (n, m) = (u32_at(24) as usize, u32_at(28) as usize);
        let name_len = if format == 2 { buf[17] as usize } else { 0 };
        let (members_at, member_len) = if format == 2 {
            (52 + name_len, 20)
        } else {
            (44, 12)
        };
        let want = members_at + member_len * n + 8 * m + 8;
        if n == 0
            || n > 1024
            || m == 0
            || m >= n
            || (format == 2 && !(1..=128).contains(&name_len))
            || h != want
            || buf.len() < h
        {
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
        let at = |i: usize| members_at + member_len * i;
        let members = (0..n).map(|i| (u32_at(at(i)), u64_at(at(i) + 4))).collect();
        let bound = if format == 2 {
            let name = std::str::from_utf8(&buf[52..52 + name_len])
                .map_err(|_| FormatError::Invalid {
                    field: "parity checkpoint name",
                    value: "not UTF-8".into(),
                })?
                .to_string();
            check_name(&name)?;
            Some(Binding {
                name,
                version: u64_at(44) as i64,
                index_sums: (0..n).map(|i| u64_at(at(i) + 12)).collect(),
            })
        } else {
            None
        };
        let shard_sums = (0..m).map(|j| u64_at(at(n) + 8 * j)).collect();
        Ok(ParityHeader {
            codec,
            set_id: u32_at(20),
            m: m as u32,
            holder,
            segment: u64_at(36),
            members,
            shard_sums,
            bound,
        })
    }

    /// Whether this parity protects version `version` of `name` built from rank files with
    /// the given index checksums (`sums(rank)`: `None` for a member whose rank file is not
    /// there to compare); the error says what it protects instead. Format-1 parity records
    /// neither and is taken as it is.
    pub fn protects(
        &self,
        name: &str,
        version: i64,
        sums: impl Fn(u32) -> Option<u64>,
    ) -> Result<(), String> {
        let Some(b) = &self.bound else {
            return Ok(());
        };
        if b.name != name || b.version != version {
            return Err(format!(
                "protects {} v{}, not {} v{version}",
                shown(&b.name),
                b.version,
                shown(name)
            ));
        }
        for ((rank, _), want) in self.members.iter().zip(&b.index_sums) {
            if let Some(have) = sums(*rank) {
                if have != *want {
                    return Err(format!(
                        "was encoded from another rank file of rank {rank} (index checksum \
                         {want:016x}, the rank file has {have:016x})"
                    ));
                }
            }
        }
        Ok(())
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
            bound: Some(Binding {
                name: "heat".into(),
                version: 12,
                index_sums: vec![1, 2, 3, 4],
            }),
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
        // Bound to its checkpoint and rank files.
        let sums = |r: u32| Some([1, 0, 2, 0, 3, 0, 4][r as usize]);
        h.protects("heat", 12, sums).unwrap();
        let e = h.protects("heat", 13, sums).unwrap_err();
        assert!(e.contains("protects \"heat\" v12, not \"heat\" v13"), "{e}");
        assert!(h.protects("cool", 12, sums).is_err());
        let e = h
            .protects("heat", 12, |r| (r == 4).then_some(9))
            .unwrap_err();
        assert!(e.contains("rank 4"), "{e}");
        h.protects("heat", 12, |_| None).unwrap();
        // Format 1 (no binding) is still read, and protects whatever it is found with.
        let old = ParityHeader {
            bound: None,
            ..h.clone()
        };
        let ob = old.encode();
        assert_eq!(u32::from_le_bytes(ob[8..12].try_into().unwrap()), 1);
        assert_eq!(ob.len(), 44 + 12 * 4 + 16 + 8);
        assert_eq!(ParityHeader::decode(&ob).unwrap(), old);
        old.protects("cool", 1, |_| Some(0)).unwrap();
    }
}
