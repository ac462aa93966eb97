//! The per-rank checkpoint container ("rank file").
//!
//! Layout, all integers little-endian (the full description is in `docs/format.md`):
//!
//! ```text
//! +--------------------+  offset 0
//! | header (16 bytes)  |  RANK_MAGIC, format version u32, header length u32
//! +--------------------+  HEADER_LEN
//! | region bytes       |  each region's raw bytes, regions back to back in index order
//! +--------------------+  index_offset
//! | index              |  RankIndex::encode(): who wrote it, regions, one checksum per chunk
//! +--------------------+  index_offset + index_len
//! | trailer (32 bytes) |  index offset, index length, index checksum, INDEX_MAGIC
//! +--------------------+
//! ```
//!
//! Data comes first so a writer can stream regions straight from application memory and
//! append the index once every chunk checksum is known. Every length read back is checked
//! against the file size before it is used, so a damaged file gives a [`FormatError`], never a
//! huge allocation or a panic.

use crate::{Dtype, FormatError, FORMAT_VERSION};

/// First eight bytes of every rank file.
pub const RANK_MAGIC: &[u8; 8] = b"CAIRNCKP";
/// Last eight bytes of every rank file, and the first eight of its index.
pub const INDEX_MAGIC: &[u8; 8] = b"CAIRNIDX";
/// Length of the fixed header.
pub const HEADER_LEN: u64 = 16;
/// Length of the fixed trailer.
pub const TRAILER_LEN: u64 = 32;

/// The checksum used for chunks and records: xxh3, 64 bits.
pub fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Encode the fixed header.
pub fn encode_header() -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(RANK_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h
}

/// Check a header read from the start of a rank file.
pub fn check_header(h: &[u8]) -> Result<(), FormatError> {
    if h.len() < HEADER_LEN as usize {
        return Err(FormatError::Truncated("header"));
    }
    if &h[..8] != RANK_MAGIC {
        return Err(FormatError::Magic);
    }
    let v = u32::from_le_bytes(h[8..12].try_into().unwrap());
    if v != FORMAT_VERSION {
        return Err(FormatError::Version(v));
    }
    Ok(())
}

/// The fixed record at the end of a rank file that locates the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    pub index_offset: u64,
    pub index_len: u64,
    pub index_sum: u64,
}

impl Trailer {
    pub fn encode(&self) -> [u8; TRAILER_LEN as usize] {
        let mut t = [0u8; TRAILER_LEN as usize];
        t[..8].copy_from_slice(&self.index_offset.to_le_bytes());
        t[8..16].copy_from_slice(&self.index_len.to_le_bytes());
        t[16..24].copy_from_slice(&self.index_sum.to_le_bytes());
        t[24..].copy_from_slice(INDEX_MAGIC);
        t
    }

    /// Decode a trailer and check it fits a file of `file_len` bytes.
    pub fn decode(t: &[u8], file_len: u64) -> Result<Trailer, FormatError> {
        if t.len() != TRAILER_LEN as usize || file_len < HEADER_LEN + TRAILER_LEN {
            return Err(FormatError::Truncated("trailer"));
        }
        if &t[24..] != INDEX_MAGIC {
            return Err(FormatError::Truncated(
                "trailer magic missing (file incomplete)",
            ));
        }
        let tr = Trailer {
            index_offset: u64::from_le_bytes(t[..8].try_into().unwrap()),
            index_len: u64::from_le_bytes(t[8..16].try_into().unwrap()),
            index_sum: u64::from_le_bytes(t[16..24].try_into().unwrap()),
        };
        let end = tr.index_offset.checked_add(tr.index_len);
        if tr.index_offset < HEADER_LEN || end != Some(file_len - TRAILER_LEN) {
            return Err(FormatError::Invalid {
                field: "trailer index location",
                value: format!(
                    "{}+{} in a file of {file_len} bytes",
                    tr.index_offset, tr.index_len
                ),
            });
        }
        Ok(tr)
    }
}

/// One protected region as stored in a rank file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionEntry {
    /// The application's id for the region (`cairn_protect(id, ...)`).
    pub id: i32,
    pub dtype: Dtype,
    /// Number of elements.
    pub count: u64,
    /// Offset of the region's first byte in the rank file.
    pub offset: u64,
    /// Number of bytes (`count * dtype.size()`).
    pub nbytes: u64,
    /// Checksum of each chunk of the region, in order; the last chunk may be short.
    pub chunk_sums: Vec<u64>,
}

impl RegionEntry {
    /// Describe a region held in memory, computing its chunk checksums.
    pub fn describe(
        id: i32,
        dtype: Dtype,
        count: u64,
        offset: u64,
        data: &[u8],
        chunk: u32,
    ) -> Self {
        RegionEntry {
            id,
            dtype,
            count,
            offset,
            nbytes: data.len() as u64,
            chunk_sums: data.chunks(chunk.max(1) as usize).map(checksum).collect(),
        }
    }

    /// The byte range `[start, end)` of chunk `i` relative to the region start.
    pub fn chunk_range(&self, i: usize, chunk: u32) -> (u64, u64) {
        let start = i as u64 * chunk as u64;
        (start, (start + chunk as u64).min(self.nbytes))
    }
}

/// Everything a reader needs to restore and verify one rank's part of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankIndex {
    pub name: String,
    pub version: i64,
    pub rank: u32,
    pub world_size: u32,
    /// Chunk size used for checksums, in bytes.
    pub chunk_size: u32,
    /// Wall time this rank spent writing its part, in nanoseconds.
    pub write_ns: u64,
    pub regions: Vec<RegionEntry>,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FormatError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or(FormatError::Truncated(what))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, FormatError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
}

impl RankIndex {
    pub fn new(name: &str, version: i64, rank: u32, world_size: u32, chunk_size: u32) -> Self {
        RankIndex {
            name: name.to_string(),
            version,
            rank,
            world_size,
            chunk_size,
            write_ns: 0,
            regions: Vec::new(),
        }
    }

    /// Total bytes of region data.
    pub fn data_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.nbytes).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + self.regions.len() * 48);
        b.extend_from_slice(INDEX_MAGIC);
        b.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        b.extend_from_slice(self.name.as_bytes());
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.rank.to_le_bytes());
        b.extend_from_slice(&self.world_size.to_le_bytes());
        b.extend_from_slice(&self.chunk_size.to_le_bytes());
        b.extend_from_slice(&self.write_ns.to_le_bytes());
        b.extend_from_slice(&(self.regions.len() as u32).to_le_bytes());
        for r in &self.regions {
            b.extend_from_slice(&r.id.to_le_bytes());
            b.push(r.dtype as u8);
            b.extend_from_slice(&[0u8; 3]);
            b.extend_from_slice(&r.count.to_le_bytes());
            b.extend_from_slice(&r.offset.to_le_bytes());
            b.extend_from_slice(&r.nbytes.to_le_bytes());
            b.extend_from_slice(&(r.chunk_sums.len() as u32).to_le_bytes());
            for s in &r.chunk_sums {
                b.extend_from_slice(&s.to_le_bytes());
            }
        }
        b
    }

    /// Decode and validate an index. Region extents are checked against each other and
    /// against the data area `[HEADER_LEN, data_end)` by [`RankIndex::check_extents`].
    pub fn decode(buf: &[u8]) -> Result<RankIndex, FormatError> {
        let mut r = Reader { buf, pos: 0 };
        if r.take(8, "index magic")? != INDEX_MAGIC {
            return Err(FormatError::Magic);
        }
        let name_len = r.u16("name length")? as usize;
        let name = std::str::from_utf8(r.take(name_len, "name")?)
            .map_err(|_| FormatError::Invalid {
                field: "name",
                value: "not UTF-8".into(),
            })?
            .to_string();
        let version = r.u64("version")? as i64;
        let rank = r.u32("rank")?;
        let world_size = r.u32("world size")?;
        let chunk_size = r.u32("chunk size")?;
        let write_ns = r.u64("write time")?;
        let n = r.u32("region count")? as usize;
        if chunk_size == 0 {
            return Err(FormatError::Invalid {
                field: "chunk size",
                value: "0".into(),
            });
        }
        if rank >= world_size {
            return Err(FormatError::Invalid {
                field: "rank",
                value: format!("{rank} of {world_size}"),
            });
        }
        // Each region needs at least 36 bytes, which bounds `n` by what the buffer holds.
        if n > buf.len() / 36 {
            return Err(FormatError::Truncated("regions"));
        }
        let mut regions = Vec::with_capacity(n);
        for _ in 0..n {
            let id = r.u32("region id")? as i32;
            let code = r.u8("dtype")?;
            r.take(3, "padding")?;
            let dtype = Dtype::from_code(code as u32).ok_or(FormatError::Invalid {
                field: "dtype",
                value: code.to_string(),
            })?;
            let count = r.u64("count")?;
            let offset = r.u64("offset")?;
            let nbytes = r.u64("byte count")?;
            let nchunks = r.u32("chunk count")? as usize;
            if count.checked_mul(dtype.size() as u64) != Some(nbytes) {
                return Err(FormatError::Invalid {
                    field: "region size",
                    value: format!("region {id}: {count} x {dtype} != {nbytes} bytes"),
                });
            }
            if nchunks as u64 != nbytes.div_ceil(chunk_size as u64) {
                return Err(FormatError::Invalid {
                    field: "chunk count",
                    value: format!("region {id}: {nchunks} chunks for {nbytes} bytes"),
                });
            }
            let sums = r.take(
                nchunks
                    .checked_mul(8)
                    .ok_or(FormatError::Truncated("chunk sums"))?,
                "chunk sums",
            )?;
            let chunk_sums = sums
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            regions.push(RegionEntry {
                id,
                dtype,
                count,
                offset,
                nbytes,
                chunk_sums,
            });
        }
        if r.pos != buf.len() {
            return Err(FormatError::Invalid {
                field: "index length",
                value: format!("{} trailing bytes", buf.len() - r.pos),
            });
        }
        Ok(RankIndex {
            name,
            version,
            rank,
            world_size,
            chunk_size,
            write_ns,
            regions,
        })
    }

    /// Check that region ids are unique and every region lies inside `[HEADER_LEN, data_end)`
    /// without overlapping another.
    pub fn check_extents(&self, data_end: u64) -> Result<(), FormatError> {
        let mut spans: Vec<(u64, u64, i32)> = Vec::with_capacity(self.regions.len());
        for r in &self.regions {
            let end = r.offset.checked_add(r.nbytes).filter(|e| *e <= data_end);
            if r.offset < HEADER_LEN || end.is_none() {
                return Err(FormatError::Invalid {
                    field: "region extent",
                    value: format!(
                        "region {} at {}+{} outside the data area",
                        r.id, r.offset, r.nbytes
                    ),
                });
            }
            spans.push((r.offset, r.offset + r.nbytes, r.id));
        }
        spans.sort();
        for w in spans.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(FormatError::Invalid {
                    field: "region extent",
                    value: format!("regions {} and {} overlap", w[0].2, w[1].2),
                });
            }
        }
        let mut ids: Vec<i32> = self.regions.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(FormatError::Invalid {
                field: "region id",
                value: format!("{} appears twice", w[0]),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RankIndex {
        let mut ix = RankIndex::new("heat", 40, 2, 4, 8);
        let a = [1u8; 20];
        ix.regions
            .push(RegionEntry::describe(0, Dtype::Byte, 20, HEADER_LEN, &a, 8));
        let b = [0u8; 16];
        ix.regions.push(RegionEntry::describe(
            7,
            Dtype::Double,
            2,
            HEADER_LEN + 20,
            &b,
            8,
        ));
        ix.write_ns = 1234;
        ix
    }

    #[test]
    fn index_round_trips() {
        let ix = sample();
        assert_eq!(ix.regions[0].chunk_sums.len(), 3);
        let back = RankIndex::decode(&ix.encode()).unwrap();
        assert_eq!(back, ix);
        back.check_extents(HEADER_LEN + 36).unwrap();
    }

    #[test]
    fn every_truncation_of_an_index_is_an_error_not_a_panic() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(
                RankIndex::decode(&bytes[..n]).is_err(),
                "prefix of {n} bytes accepted"
            );
        }
    }

    #[test]
    fn inconsistent_sizes_are_rejected() {
        let mut ix = sample();
        ix.regions[1].count = 3;
        assert!(matches!(
            RankIndex::decode(&ix.encode()),
            Err(FormatError::Invalid { .. })
        ));
        let ix = sample();
        assert!(
            ix.check_extents(HEADER_LEN + 30).is_err(),
            "region past data end accepted"
        );
        let mut ix = sample();
        ix.regions[1].offset = HEADER_LEN + 10;
        assert!(
            ix.check_extents(HEADER_LEN + 36).is_err(),
            "overlap accepted"
        );
        let mut ix = sample();
        ix.regions[1].id = 0;
        ix.regions[1].offset = HEADER_LEN + 20;
        assert!(
            ix.check_extents(HEADER_LEN + 36).is_err(),
            "duplicate id accepted"
        );
    }

    #[test]
    fn trailer_must_point_inside_the_file() {
        let t = Trailer {
            index_offset: 100,
            index_len: 50,
            index_sum: 9,
        };
        assert_eq!(Trailer::decode(&t.encode(), 182).unwrap(), t);
        assert!(Trailer::decode(&t.encode(), 183).is_err());
        let mut bytes = t.encode();
        bytes[31] ^= 1;
        assert!(Trailer::decode(&bytes, 182).is_err());
    }

    #[test]
    fn header_checks_magic_and_version() {
        let h = encode_header();
        check_header(&h).unwrap();
        let mut bad = h;
        bad[0] = b'X';
        assert_eq!(check_header(&bad), Err(FormatError::Magic));
        let mut newer = h;
        newer[8] = 99;
        assert_eq!(check_header(&newer), Err(FormatError::Version(99)));
    }
}
