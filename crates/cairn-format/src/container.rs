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

use crate::auth::{AuthKey, AUTH_LEN, AUTH_MAGIC};
use crate::{Dtype, FormatError, FORMAT_VERSION};

/// First eight bytes of every rank file.
pub const RANK_MAGIC: &[u8; 8] = b"CAIRNCKP";
/// Last eight bytes of every rank file, and the first eight of its index.
pub const INDEX_MAGIC: &[u8; 8] = b"CAIRNIDX";
/// Last eight bytes of a *headerless* rank file: one whose data starts at offset 0 because
/// its first regions are files the application wrote in place (see `docs/format.md`).
pub const HEADERLESS_MAGIC: &[u8; 8] = b"CAIRNIXH";
/// Length of the fixed header.
pub const HEADER_LEN: u64 = 16;
/// Length of the fixed trailer.
pub const TRAILER_LEN: u64 = 32;

/// The checksum of records (the index, parity headers, format-1 blocks): xxh3, 64 bits.
pub fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// [`checksum`] of bytes that arrive in pieces: the same value as `checksum` of their
/// concatenation.
#[derive(Clone, Default)]
pub struct ChecksumStream(xxhash_rust::xxh3::Xxh3);

impl ChecksumStream {
    pub fn new() -> ChecksumStream {
        ChecksumStream::default()
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn digest(&self) -> u64 {
        self.0.digest()
    }
}

/// The checksum of a block's stored bytes in container `format`: xxh3-64 in format 1, the
/// low 64 bits of xxh3-128 from format 2 on.
pub fn block_sum(format: u32, stored: &[u8]) -> u64 {
    match format {
        1 => checksum(stored),
        _ => xxhash_rust::xxh3::xxh3_128(stored) as u64,
    }
}

/// [`block_sum`] of bytes that arrive in pieces (a block read across two buffers).
#[derive(Clone)]
pub struct BlockSumStream {
    format: u32,
    state: xxhash_rust::xxh3::Xxh3,
}

impl BlockSumStream {
    pub fn new(format: u32) -> BlockSumStream {
        BlockSumStream {
            format,
            state: xxhash_rust::xxh3::Xxh3::new(),
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.state.update(bytes);
    }

    pub fn digest(&self) -> u64 {
        match self.format {
            1 => self.state.digest(),
            _ => self.state.digest128() as u64,
        }
    }
}

/// Encode the fixed header.
pub fn encode_header() -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(RANK_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h
}

/// Check a header read from the start of a rank file; returns its container version
/// (1 or [`FORMAT_VERSION`]).
pub fn check_header(h: &[u8]) -> Result<u32, FormatError> {
    if h.len() < HEADER_LEN as usize {
        return Err(FormatError::Truncated("header"));
    }
    if &h[..8] != RANK_MAGIC {
        return Err(FormatError::Magic);
    }
    let v = u32::from_le_bytes(h[8..12].try_into().unwrap());
    if v != 1 && v != FORMAT_VERSION {
        return Err(FormatError::Version(v));
    }
    Ok(v)
}

/// The fixed record at the end of a rank file that locates the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    pub index_offset: u64,
    pub index_len: u64,
    pub index_sum: u64,
    /// The file has no header: its data area starts at offset 0 and the trailer's magic is
    /// [`HEADERLESS_MAGIC`]. Its index is a version-2 index.
    pub headerless: bool,
}

impl Trailer {
    pub fn encode(&self) -> [u8; TRAILER_LEN as usize] {
        let mut t = [0u8; TRAILER_LEN as usize];
        t[..8].copy_from_slice(&self.index_offset.to_le_bytes());
        t[8..16].copy_from_slice(&self.index_len.to_le_bytes());
        t[16..24].copy_from_slice(&self.index_sum.to_le_bytes());
        t[24..].copy_from_slice(if self.headerless {
            HEADERLESS_MAGIC
        } else {
            INDEX_MAGIC
        });
        t
    }

    /// Where the data area starts: after the header, or at 0 in a headerless file.
    pub fn data_start(&self) -> u64 {
        if self.headerless {
            0
        } else {
            HEADER_LEN
        }
    }

    /// Decode a trailer and check it fits a file of `file_len` bytes.
    pub fn decode(t: &[u8], file_len: u64) -> Result<Trailer, FormatError> {
        if t.len() != TRAILER_LEN as usize || file_len < TRAILER_LEN {
            return Err(FormatError::Truncated("trailer"));
        }
        let headerless = &t[24..] == HEADERLESS_MAGIC;
        if &t[24..] != INDEX_MAGIC && !headerless {
            return Err(FormatError::Truncated(
                "trailer magic missing (file incomplete)",
            ));
        }
        let tr = Trailer {
            index_offset: u64::from_le_bytes(t[..8].try_into().unwrap()),
            index_len: u64::from_le_bytes(t[8..16].try_into().unwrap()),
            index_sum: u64::from_le_bytes(t[16..24].try_into().unwrap()),
            headerless,
        };
        let end = tr.index_offset.checked_add(tr.index_len);
        if file_len < tr.data_start() + TRAILER_LEN
            || tr.index_offset < tr.data_start()
            || end != Some(file_len - TRAILER_LEN)
        {
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

/// How one block of a region is stored (the `kind` byte of a block record). Codes 0–5, 7 and
/// 8 are the encodings of `cairn-reduce` (`BlockKind`, whose codes a test in `cairn-core`'s
/// `part.rs` checks against these); 6 marks a block an incremental checkpoint takes
/// unchanged from its base.
pub mod block_kind {
    /// All zeros: nothing stored.
    pub const ZERO: u8 = 0;
    /// Stored as is.
    pub const RAW: u8 = 1;
    /// Highest codec code: 2..=5 are LZ4/Zstd with or without the typed shuffle, 7 and 8
    /// LZ4/Zstd over the shuffled block's byte planes compressed one by one. [`UNCHANGED`]
    /// (6), in that range, is not a codec.
    pub const LAST_CODEC: u8 = 8;
    /// Unchanged since the base checkpoint: nothing stored, read from the base.
    pub const UNCHANGED: u8 = 6;
}

/// Number of block kind codes (`0 ..= LAST_CODEC`), the length of
/// [`RegionEntry::kind_counts`].
pub const KIND_COUNT: usize = block_kind::LAST_CODEC as usize + 1;

/// One block of a region as stored in a rank file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEntry {
    /// See [`block_kind`].
    pub kind: u8,
    /// Bytes stored for this block (0 for zero and unchanged blocks).
    pub stored: u32,
    /// Checksum of the stored bytes (0 when nothing is stored): the low 64 bits of their
    /// xxh3-128, so a raw block's checksum is a by-product of its hash (format 1: xxh3-64).
    pub sum: u64,
    /// xxh3-128 of the block's raw contents (format 2; 0 in format-1 files).
    pub hash: u128,
}

impl BlockEntry {
    /// Bytes of a block record in the index.
    pub const LEN: usize = 29;
}

/// One protected region as stored in a rank file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionEntry {
    /// The application's id for the region (`cairn_protect(id, ...)`).
    pub id: i32,
    pub dtype: Dtype,
    /// Number of elements.
    pub count: u64,
    /// Offset in the rank file of the region's first stored byte; its blocks' stored bytes
    /// follow each other in block order.
    pub offset: u64,
    /// Number of raw bytes (`count * dtype.size()`).
    pub nbytes: u64,
    /// One record per block of `block_size` raw bytes, in order; the last block may be short.
    pub blocks: Vec<BlockEntry>,
}

/// A block whose bytes are stored in the file: where they are and what they must hash to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBlock {
    /// Block number within the region.
    pub index: usize,
    /// Offset of the stored bytes in the rank file.
    pub offset: u64,
    pub len: u32,
    pub sum: u64,
}

impl RegionEntry {
    /// Describe a region stored raw, block by block, from memory (every block `RAW`).
    pub fn describe(
        id: i32,
        dtype: Dtype,
        count: u64,
        offset: u64,
        data: &[u8],
        block: u32,
    ) -> Self {
        let blocks = data
            .chunks(block.max(1) as usize)
            .map(|c| {
                let hash = xxhash_rust::xxh3::xxh3_128(c);
                BlockEntry {
                    kind: block_kind::RAW,
                    stored: c.len() as u32,
                    sum: hash as u64,
                    hash,
                }
            })
            .collect();
        RegionEntry {
            id,
            dtype,
            count,
            offset,
            nbytes: data.len() as u64,
            blocks,
        }
    }

    /// The raw byte range `[start, end)` of block `i` relative to the region start.
    pub fn block_range(&self, i: usize, block: u32) -> (u64, u64) {
        let start = i as u64 * block as u64;
        (start, (start + block as u64).min(self.nbytes))
    }

    /// Bytes this region occupies in the file.
    pub fn stored_bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.stored as u64).sum()
    }

    /// The blocks with stored bytes, with their place in the file.
    pub fn stored_blocks(&self) -> impl Iterator<Item = StoredBlock> + '_ {
        let mut off = self.offset;
        self.blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.stored > 0)
            .map(move |(index, b)| {
                let s = StoredBlock {
                    index,
                    offset: off,
                    len: b.stored,
                    sum: b.sum,
                };
                off += b.stored as u64;
                s
            })
    }

    /// Blocks of each kind: `counts[k]` for kind code `k`.
    pub fn kind_counts(&self) -> [u64; KIND_COUNT] {
        let mut c = [0u64; KIND_COUNT];
        for b in &self.blocks {
            if let Some(n) = c.get_mut(b.kind as usize) {
                *n += 1;
            }
        }
        c
    }
}

/// Everything a reader needs to restore and verify one rank's part of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankIndex {
    /// The container version the file was written in (1 or 2).
    pub format: u32,
    pub name: String,
    pub version: i64,
    pub rank: u32,
    pub world_size: u32,
    /// Raw bytes per block (the unit of checksums, hashes, zero detection and compression).
    pub block_size: u32,
    /// Wall time this rank spent writing its part, in nanoseconds.
    pub write_ns: u64,
    /// For an incremental checkpoint, the version its unchanged blocks are read from; `None`
    /// for a full checkpoint.
    pub base: Option<i64>,
    pub regions: Vec<RegionEntry>,
    /// An authenticated index (`crate::auth`): its blocks' content hashes are keyed, and it
    /// ends with an authentication record, which [`RankIndex::encode_with`] writes and
    /// [`AuthKey::index_mac_ok`] checks.
    pub keyed: bool,
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

fn invalid(field: &'static str, value: String) -> FormatError {
    FormatError::Invalid { field, value }
}

impl RankIndex {
    /// A full checkpoint's index in the current format, with no regions yet.
    pub fn new(name: &str, version: i64, rank: u32, world_size: u32, block_size: u32) -> Self {
        RankIndex {
            format: FORMAT_VERSION,
            name: name.to_string(),
            version,
            rank,
            world_size,
            block_size,
            write_ns: 0,
            base: None,
            regions: Vec::new(),
            keyed: false,
        }
    }

    /// Total raw bytes of region data.
    pub fn data_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.nbytes).sum()
    }

    /// Total bytes of region data stored in the file.
    pub fn stored_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.stored_bytes()).sum()
    }

    /// Whether blocks carry content hashes (format 2 and later).
    pub fn hashed(&self) -> bool {
        self.format >= 2
    }

    /// The checksum of stored block bytes as this file's format defines it.
    pub fn block_sum(&self, stored: &[u8]) -> u64 {
        block_sum(self.format, stored)
    }

    /// Encode in the current format (format-1 indexes are only read), without an
    /// authentication record.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(None)
    }

    /// Encode, ending with the authentication record of `key` when there is one (the
    /// index's content hashes must then be `key`'s, and `keyed` set).
    pub fn encode_with(&self, key: Option<&AuthKey>) -> Vec<u8> {
        let mut b = self.encode_body();
        if let Some(k) = key {
            b.extend_from_slice(AUTH_MAGIC);
            let mac = k.index_mac(&b);
            b.extend_from_slice(&mac);
        }
        b
    }

    fn encode_body(&self) -> Vec<u8> {
        let nblocks: usize = self.regions.iter().map(|r| r.blocks.len()).sum();
        let mut b = Vec::with_capacity(64 + self.regions.len() * 48 + nblocks * BlockEntry::LEN);
        b.extend_from_slice(INDEX_MAGIC);
        b.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        b.extend_from_slice(self.name.as_bytes());
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.rank.to_le_bytes());
        b.extend_from_slice(&self.world_size.to_le_bytes());
        b.extend_from_slice(&self.block_size.to_le_bytes());
        b.extend_from_slice(&self.write_ns.to_le_bytes());
        b.extend_from_slice(&self.base.unwrap_or(-1).to_le_bytes());
        b.extend_from_slice(&(self.regions.len() as u32).to_le_bytes());
        for r in &self.regions {
            b.extend_from_slice(&r.id.to_le_bytes());
            b.push(r.dtype as u8);
            b.extend_from_slice(&[0u8; 3]);
            b.extend_from_slice(&r.count.to_le_bytes());
            b.extend_from_slice(&r.offset.to_le_bytes());
            b.extend_from_slice(&r.nbytes.to_le_bytes());
            b.extend_from_slice(&(r.blocks.len() as u32).to_le_bytes());
            for k in &r.blocks {
                b.push(k.kind);
                b.extend_from_slice(&k.stored.to_le_bytes());
                b.extend_from_slice(&k.sum.to_le_bytes());
                b.extend_from_slice(&k.hash.to_le_bytes());
            }
        }
        b
    }

    /// Decode and validate an index of container `format` (from the file header). Region
    /// extents are checked against each other and against the data area by
    /// [`RankIndex::check_extents`].
    pub fn decode_format(buf: &[u8], format: u32) -> Result<RankIndex, FormatError> {
        if format != 1 && format != FORMAT_VERSION {
            return Err(FormatError::Version(format));
        }
        let mut r = Reader { buf, pos: 0 };
        if r.take(8, "index magic")? != INDEX_MAGIC {
            return Err(FormatError::Magic);
        }
        let name_len = r.u16("name length")? as usize;
        let name = std::str::from_utf8(r.take(name_len, "name")?)
            .map_err(|_| invalid("name", "not UTF-8".into()))?
            .to_string();
        let version = r.u64("version")? as i64;
        let rank = r.u32("rank")?;
        let world_size = r.u32("world size")?;
        let block_size = r.u32("block size")?;
        let write_ns = r.u64("write time")?;
        let base = match format {
            1 => -1,
            _ => r.u64("base version")? as i64,
        };
        let n = r.u32("region count")? as usize;
        if block_size == 0 {
            return Err(invalid("block size", "0".into()));
        }
        if rank >= world_size {
            return Err(invalid("rank", format!("{rank} of {world_size}")));
        }
        if version < 0 || base < -1 || (base >= 0 && base >= version) {
            return Err(invalid(
                "base version",
                format!("v{version} based on v{base}"),
            ));
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
            let dtype =
                Dtype::from_code(code as u32).ok_or_else(|| invalid("dtype", code.to_string()))?;
            let count = r.u64("count")?;
            let offset = r.u64("offset")?;
            let nbytes = r.u64("byte count")?;
            let nblocks = r.u32("block count")? as usize;
            if count.checked_mul(dtype.size() as u64) != Some(nbytes) {
                return Err(invalid(
                    "region size",
                    format!("region {id}: {count} x {dtype} != {nbytes} bytes"),
                ));
            }
            if nblocks as u64 != nbytes.div_ceil(block_size as u64) {
                return Err(invalid(
                    "block count",
                    format!("region {id}: {nblocks} blocks for {nbytes} bytes"),
                ));
            }
            let rec = if format == 1 { 8 } else { BlockEntry::LEN };
            let raw = r.take(
                nblocks
                    .checked_mul(rec)
                    .ok_or(FormatError::Truncated("block records"))?,
                "block records",
            )?;
            let mut blocks = Vec::with_capacity(nblocks);
            for (i, c) in raw.chunks_exact(rec).enumerate() {
                let len = (nbytes - i as u64 * block_size as u64).min(block_size as u64);
                let b = if format == 1 {
                    BlockEntry {
                        kind: block_kind::RAW,
                        stored: len as u32,
                        sum: u64::from_le_bytes(c.try_into().unwrap()),
                        hash: 0,
                    }
                } else {
                    BlockEntry {
                        kind: c[0],
                        stored: u32::from_le_bytes(c[1..5].try_into().unwrap()),
                        sum: u64::from_le_bytes(c[5..13].try_into().unwrap()),
                        hash: u128::from_le_bytes(c[13..29].try_into().unwrap()),
                    }
                };
                check_block(&b, len, base >= 0).map_err(|why| {
                    invalid("block record", format!("region {id} block {i}: {why}"))
                })?;
                blocks.push(b);
            }
            regions.push(RegionEntry {
                id,
                dtype,
                count,
                offset,
                nbytes,
                blocks,
            });
        }
        // What follows the regions: nothing, or (format 2) an authentication record.
        let rest = &buf[r.pos..];
        let keyed = format >= 2 && rest.len() == AUTH_LEN && &rest[..8] == AUTH_MAGIC;
        if !rest.is_empty() && !keyed {
            return Err(invalid(
                "index length",
                format!("{} trailing bytes", rest.len()),
            ));
        }
        Ok(RankIndex {
            format,
            name,
            version,
            rank,
            world_size,
            block_size,
            write_ns,
            base: (base >= 0).then_some(base),
            regions,
            keyed,
        })
    }

    /// Decode an index of the current format.
    pub fn decode(buf: &[u8]) -> Result<RankIndex, FormatError> {
        Self::decode_format(buf, FORMAT_VERSION)
    }

    /// Check that region ids are unique and every region's stored bytes lie inside
    /// `[HEADER_LEN, data_end)` without overlapping another's.
    pub fn check_extents(&self, data_end: u64) -> Result<(), FormatError> {
        self.check_extents_in(HEADER_LEN, data_end)
    }

    /// [`RankIndex::check_extents`] for a data area `[data_start, data_end)` (a headerless
    /// file's starts at 0).
    pub fn check_extents_in(&self, data_start: u64, data_end: u64) -> Result<(), FormatError> {
        let mut spans: Vec<(u64, u64, i32)> = Vec::with_capacity(self.regions.len());
        for r in &self.regions {
            let stored = r.stored_bytes();
            let end = r.offset.checked_add(stored).filter(|e| *e <= data_end);
            if r.offset < data_start || end.is_none() {
                return Err(invalid(
                    "region extent",
                    format!(
                        "region {} at {}+{} outside the data area",
                        r.id, r.offset, stored
                    ),
                ));
            }
            spans.push((r.offset, r.offset + stored, r.id));
        }
        spans.sort();
        for w in spans.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(invalid(
                    "region extent",
                    format!("regions {} and {} overlap", w[0].2, w[1].2),
                ));
            }
        }
        let mut ids: Vec<i32> = self.regions.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid("region id", format!("{} appears twice", w[0])));
        }
        Ok(())
    }
}

/// The rules one block record must follow, for a block of `len` raw bytes.
fn check_block(b: &BlockEntry, len: u64, incremental: bool) -> Result<(), String> {
    let stored = b.stored as u64;
    match b.kind {
        block_kind::ZERO if stored == 0 => Ok(()),
        block_kind::RAW if stored == len => Ok(()),
        block_kind::UNCHANGED if stored == 0 && incremental => Ok(()),
        block_kind::UNCHANGED if stored == 0 => Err("unchanged block in a full checkpoint".into()),
        k if (2..=block_kind::LAST_CODEC).contains(&k)
            && k != block_kind::UNCHANGED
            && stored > 0
            && stored < len =>
        {
            Ok(())
        }
        k if k > block_kind::LAST_CODEC => Err(format!("unknown block kind {k}")),
        k => Err(format!(
            "kind {k} with {stored} stored bytes for {len} raw bytes"
        )),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn streamed_sums_equal_one_shot_sums() {
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for format in [1, 2] {
            for cut in [0, 1, 240, 4096, 65_537, 299_999] {
                let mut s = BlockSumStream::new(format);
                s.update(&bytes[..cut]);
                s.update(&bytes[cut..]);
                assert_eq!(
                    s.digest(),
                    block_sum(format, &bytes),
                    "format {format} cut {cut}"
                );
                let mut c = ChecksumStream::new();
                c.update(&bytes[..cut]);
                c.update(&bytes[cut..]);
                assert_eq!(c.digest(), checksum(&bytes));
            }
        }
    }

    use super::*;

    #[test]
    fn an_authentication_record_ends_a_keyed_index_and_nothing_else_may() {
        let key = AuthKey::new(&[5; 32]);
        let plain = sample();
        let b = plain.encode_with(Some(&key));
        assert_eq!(b.len(), plain.encode().len() + AUTH_LEN);
        let back = RankIndex::decode(&b).unwrap();
        assert!(back.keyed && !RankIndex::decode(&plain.encode()).unwrap().keyed);
        assert!(key.index_mac_ok(&b));
        assert!(!AuthKey::new(&[6; 32]).index_mac_ok(&b));
        // Any change to the index before the MAC breaks it.
        let mut changed = b.clone();
        changed[12] ^= 1;
        assert!(!key.index_mac_ok(&changed));
        // Trailing bytes that are not a whole record are still refused.
        let mut short = plain.encode();
        short.extend_from_slice(AUTH_MAGIC);
        assert!(RankIndex::decode(&short).is_err());
        let mut other = plain.encode();
        other.extend_from_slice(&[0u8; AUTH_LEN]);
        assert!(RankIndex::decode(&other).is_err());
    }

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
        assert_eq!(ix.regions[0].blocks.len(), 3);
        let back = RankIndex::decode(&ix.encode()).unwrap();
        assert_eq!(back, ix);
        back.check_extents(HEADER_LEN + 36).unwrap();
    }

    fn block(kind: u8, stored: u32) -> BlockEntry {
        BlockEntry {
            kind,
            stored,
            sum: stored as u64 * 3,
            hash: 77,
        }
    }

    #[test]
    fn incremental_index_round_trips_and_locates_stored_blocks() {
        let mut ix = RankIndex::new("heat", 41, 0, 1, 100);
        ix.base = Some(40);
        ix.regions.push(RegionEntry {
            id: 3,
            dtype: Dtype::Byte,
            count: 450,
            offset: HEADER_LEN,
            nbytes: 450,
            blocks: vec![
                block(block_kind::UNCHANGED, 0),
                block(block_kind::RAW, 100),
                block(block_kind::ZERO, 0),
                block(2, 30),
                block(block_kind::RAW, 50),
            ],
        });
        let back = RankIndex::decode(&ix.encode()).unwrap();
        assert_eq!(back, ix);
        assert_eq!(back.stored_bytes(), 180);
        let at: Vec<(usize, u64, u32)> = back.regions[0]
            .stored_blocks()
            .map(|b| (b.index, b.offset, b.len))
            .collect();
        assert_eq!(at, vec![(1, 16, 100), (3, 116, 30), (4, 146, 50)]);
        assert_eq!(back.regions[0].kind_counts(), [1, 2, 1, 0, 0, 0, 1, 0, 0]);
        back.check_extents(HEADER_LEN + 180).unwrap();
        assert!(back.check_extents(HEADER_LEN + 179).is_err());
    }

    #[test]
    fn inconsistent_block_records_are_rejected() {
        let base = || {
            let mut ix = RankIndex::new("x", 5, 0, 1, 100);
            ix.regions.push(RegionEntry {
                id: 0,
                dtype: Dtype::Byte,
                count: 150,
                offset: HEADER_LEN,
                nbytes: 150,
                blocks: vec![block(block_kind::RAW, 100), block(block_kind::RAW, 50)],
            });
            ix
        };
        RankIndex::decode(&base().encode()).unwrap();
        type Spoil = fn(&mut RankIndex);
        let cases: [(&str, Spoil); 6] = [
            ("unchanged in a full checkpoint", |ix| {
                ix.regions[0].blocks[0] = block(block_kind::UNCHANGED, 0)
            }),
            ("raw of the wrong length", |ix| {
                ix.regions[0].blocks[1] = block(block_kind::RAW, 49)
            }),
            ("compressed not smaller", |ix| {
                ix.regions[0].blocks[1] = block(3, 50)
            }),
            ("zero with bytes", |ix| {
                ix.regions[0].blocks[0] = block(block_kind::ZERO, 1)
            }),
            ("unknown kind", |ix| ix.regions[0].blocks[0] = block(9, 0)),
            ("base not older", |ix| ix.base = Some(5)),
        ];
        for (what, spoil) in cases {
            let mut ix = base();
            spoil(&mut ix);
            assert!(
                matches!(
                    RankIndex::decode(&ix.encode()),
                    Err(FormatError::Invalid { .. })
                ),
                "{what} accepted"
            );
        }
    }

    #[test]
    fn split_codecs_are_accepted_and_6_still_means_unchanged() {
        for k in [2, 3, 4, 5, 7, 8] {
            for incremental in [false, true] {
                assert_eq!(check_block(&block(k, 40), 100, incremental), Ok(()), "{k}");
                assert!(
                    check_block(&block(k, 0), 100, incremental).is_err(),
                    "{k} empty"
                );
                assert!(
                    check_block(&block(k, 100), 100, incremental).is_err(),
                    "{k} not smaller"
                );
            }
        }
        assert_eq!(
            check_block(&block(block_kind::UNCHANGED, 0), 100, true),
            Ok(())
        );
        for (stored, incremental) in [(0, false), (40, true), (40, false), (100, true)] {
            assert!(
                check_block(&block(block_kind::UNCHANGED, stored), 100, incremental).is_err(),
                "unchanged with {stored} stored bytes, incremental {incremental}"
            );
        }
        for k in [block_kind::LAST_CODEC + 1, 200, 255] {
            let why = check_block(&block(k, 40), 100, true).unwrap_err();
            assert!(why.contains("unknown block kind"), "{k}: {why}");
        }
    }

    #[test]
    fn format_1_indexes_are_read_as_raw_blocks() {
        // The format-1 index: no base field, one xxh3-64 per chunk instead of block records.
        let data: Vec<u8> = (0..20u8).collect();
        let mut b = Vec::new();
        b.extend_from_slice(INDEX_MAGIC);
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(b"ck");
        b.extend_from_slice(&7i64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&99u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&4i32.to_le_bytes());
        b.extend_from_slice(&[0, 0, 0, 0]);
        b.extend_from_slice(&20u64.to_le_bytes());
        b.extend_from_slice(&HEADER_LEN.to_le_bytes());
        b.extend_from_slice(&20u64.to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        for c in data.chunks(8) {
            b.extend_from_slice(&checksum(c).to_le_bytes());
        }
        let ix = RankIndex::decode_format(&b, 1).unwrap();
        assert_eq!((ix.format, ix.base, ix.hashed()), (1, None, false));
        let r = &ix.regions[0];
        assert_eq!(r.stored_bytes(), 20);
        assert!(r.blocks.iter().all(|k| k.kind == block_kind::RAW));
        assert_eq!(r.blocks[2].sum, checksum(&data[16..]));
        assert_eq!(r.blocks[2].stored, 4);
        assert!(RankIndex::decode_format(&b, 3).is_err());
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
            headerless: false,
        };
        assert_eq!(Trailer::decode(&t.encode(), 182).unwrap(), t);
        assert!(Trailer::decode(&t.encode(), 183).is_err());
        let mut bytes = t.encode();
        bytes[31] ^= 1;
        assert!(Trailer::decode(&bytes, 182).is_err());
    }

    #[test]
    fn a_headerless_trailer_says_so_and_may_point_at_offset_zero() {
        let t = Trailer {
            index_offset: 0,
            index_len: 50,
            index_sum: 9,
            headerless: true,
        };
        let back = Trailer::decode(&t.encode(), 82).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.data_start(), 0);
        // The same numbers with the ordinary magic point into the header: refused.
        let plain = Trailer {
            headerless: false,
            ..t
        };
        assert!(Trailer::decode(&plain.encode(), 82).is_err());
        let mut ix = sample();
        ix.regions[0].offset = 0;
        ix.regions[1].offset = 20;
        assert!(ix.check_extents_in(0, 36).is_ok());
        assert!(
            ix.check_extents(36).is_err(),
            "offset 0 accepted with a header"
        );
    }

    #[test]
    fn header_checks_magic_and_version() {
        let h = encode_header();
        assert_eq!(check_header(&h).unwrap(), FORMAT_VERSION);
        let mut bad = h;
        bad[0] = b'X';
        assert_eq!(check_header(&bad), Err(FormatError::Magic));
        let mut newer = h;
        newer[8] = 99;
        assert_eq!(check_header(&newer), Err(FormatError::Version(99)));
    }
}
