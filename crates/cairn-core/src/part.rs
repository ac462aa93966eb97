//! Writing, reading and verifying one rank's part of a checkpoint (a rank file, see
//! `cairn_format::container`) on any [`Tier`].
//!
//! The writer streams each region from application memory in chunk-sized writes, computing
//! each chunk's checksum just before the chunk is written (while it is still in cache), and
//! appends the index and trailer; small pieces are coalesced so a tiny checkpoint costs a
//! single write. The reader fills regions in place, one chunk at a time, and checks every
//! chunk's checksum.

use crate::error::{Error, ErrorKind, Result};
use crate::mapped::Mapped;
use cairn_format::{
    block_kind, block_sum, check_header, AuthKey, BlockEntry, Dtype, FORMAT_VERSION,
};
use cairn_format::{
    checksum, encode_header, RankIndex, RegionEntry, Trailer, HEADER_LEN, TRAILER_LEN,
};
/// The hash of one block's raw bytes (xxh3-128), as block records hold it.
pub use cairn_reduce::block_hash;
use cairn_reduce::{is_zero, BlockKind, Decoder, Encoder};
pub use cairn_reduce::{Codec, Settings as Codecs};
use cairn_tier::{ObjectReader, ObjectWriter, Tier};
use std::collections::HashMap;
use std::time::Instant;

/// A protected region to be saved.
#[derive(Debug, Clone, Copy)]
pub struct RegionRef<'a> {
    pub id: i32,
    pub dtype: Dtype,
    pub bytes: &'a [u8],
}

/// A protected region to be restored in place.
#[derive(Debug)]
pub struct RegionMut<'a> {
    pub id: i32,
    pub dtype: Dtype,
    pub bytes: &'a mut [u8],
}

/// Element types a typed region can hold: plain numbers whose every bit pattern is valid.
///
/// # Safety
/// Implementors must have no padding and no invalid bit patterns, and `DTYPE.size()` must be
/// their size.
pub unsafe trait Element: Copy + 'static {
    const DTYPE: Dtype;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        // SAFETY: a primitive number type: no padding, every bit pattern valid, size matches.
        unsafe impl Element for $t { const DTYPE: Dtype = Dtype::$d; }
    )*};
}
element!(u8 => Byte, i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64, u32 => Uint32, u64 => Uint64, f32 => Float, f64 => Double);

impl<'a> RegionRef<'a> {
    /// A typed region to save, e.g. `RegionRef::new(1, &field[..])` for a `Vec<f64>`.
    pub fn new<T: Element>(id: i32, data: &'a [T]) -> Self {
        // SAFETY: `T: Element` has no padding, so its memory is `size_of_val(data)`
        // initialised bytes, borrowed for the same lifetime.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        RegionRef {
            id,
            dtype: T::DTYPE,
            bytes,
        }
    }
}

impl<'a> RegionMut<'a> {
    /// A typed region to restore in place, e.g. `RegionMut::new(1, &mut field[..])`.
    pub fn new<T: Element>(id: i32, data: &'a mut [T]) -> Self {
        // SAFETY: as in `RegionRef::new`; any bytes written are a valid `T` because every bit
        // pattern of an `Element` is valid, and the borrow is exclusive.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                data.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(data),
            )
        };
        RegionMut {
            id,
            dtype: T::DTYPE,
            bytes,
        }
    }
}

/// Writes smaller than this are gathered into one buffer; larger ones go straight from the
/// caller's memory.
const COALESCE: usize = 64 * 1024;

/// Where the bytes of a rank file go, in order: a tier object, or a stream that also feeds a
/// partner (see `protect.rs`).
pub trait PartSink {
    fn write(&mut self, bytes: &[u8]) -> Result<()>;
}

impl PartSink for Box<dyn ObjectWriter> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        Ok(self.write_all(bytes)?)
    }
}

struct Coalescing<'s> {
    w: &'s mut dyn PartSink,
    buf: Vec<u8>,
}

impl Coalescing<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() >= COALESCE {
            self.flush()?;
            self.w.write(bytes)?;
        } else {
            self.buf.extend_from_slice(bytes);
            if self.buf.len() >= COALESCE {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.w.write(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Identity of the part being written.
#[derive(Debug, Clone, Copy)]
pub struct PartMeta<'a> {
    pub name: &'a str,
    pub version: i64,
    pub rank: u32,
    pub world_size: u32,
    /// Raw bytes per block (`[reduction] block`).
    pub block: u32,
}

/// The block hashes of one checkpoint's regions on this rank, kept in memory so the next
/// incremental checkpoint can tell which blocks changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hashes {
    block: u32,
    regions: HashMap<i32, (Dtype, u64, Vec<u128>)>,
}

impl Hashes {
    /// The hashes recorded in a part's index (`None` for format-1 parts, which have none).
    /// For an incremental part the records of unchanged blocks carry the hashes too, so the
    /// index alone describes the whole contents.
    pub fn from_index(ix: &RankIndex) -> Option<Hashes> {
        ix.hashed().then(|| Hashes {
            block: ix.block_size,
            regions: ix
                .regions
                .iter()
                .map(|r| {
                    let h = r.blocks.iter().map(|b| b.hash).collect();
                    (r.id, (r.dtype, r.nbytes, h))
                })
                .collect(),
        })
    }

    /// The size and block hashes of region `id` if it had this type and block size. Its size
    /// may differ from the region's now: block `i` is compared when both have a block `i` of
    /// the same length (a region that grew or shrank keeps its unchanged blocks).
    fn region(&self, id: i32, dtype: Dtype, block: u32) -> Option<(u64, &[u128])> {
        match self.regions.get(&id) {
            Some((d, n, h)) if *d == dtype && self.block == block => Some((*n, h)),
            _ => None,
        }
    }
}

/// How a part's block contents are hashed (the `hash` of each block record): XXH3-128, or
/// keyed with the user's key in an authenticated part (`crate::auth`).
#[derive(Clone)]
enum ContentHash {
    Plain,
    Keyed(AuthKey),
}

impl ContentHash {
    /// For a part this process writes: keyed when it authenticates.
    fn for_writing() -> ContentHash {
        crate::auth::key().map_or(ContentHash::Plain, ContentHash::Keyed)
    }

    /// For the part of `index` (which [`read_index`] has authenticated, if keyed).
    fn of(index: &RankIndex) -> Result<ContentHash> {
        if !index.keyed {
            return Ok(ContentHash::Plain);
        }
        crate::auth::key()
            .map(ContentHash::Keyed)
            .ok_or_else(not_authenticating)
    }

    fn keyed(&self) -> bool {
        matches!(self, ContentHash::Keyed(_))
    }

    fn hash(&self, raw: &[u8]) -> u128 {
        match self {
            ContentHash::Plain => block_hash(raw),
            ContentHash::Keyed(k) => k.block_hash(raw),
        }
    }

    /// The checksum of a block stored raw, whose hash is `hash`: the hash's low half when
    /// that is XXH3-128 (format 2's checksum), else computed.
    fn raw_sum(&self, raw: &[u8], hash: u128) -> u64 {
        match self {
            ContentHash::Plain => hash as u64,
            ContentHash::Keyed(_) => block_sum(FORMAT_VERSION, raw),
        }
    }
}

/// The error for an authenticated part read by a process that does not authenticate.
fn not_authenticating() -> Error {
    Error::new(
        ErrorKind::Config,
        "it is an authenticated checkpoint (written with [security] authenticate = true): \
         turn authentication on, with the key it was written with, to read it",
    )
}

/// How a part is reduced as it is written.
#[derive(Debug, Clone, Copy)]
pub struct Reduction<'a> {
    /// Codec, level and shuffle for changed, non-zero blocks.
    pub codecs: Codecs,
    /// Write an incremental checkpoint against this version, whose block hashes are given:
    /// blocks with the same hash are recorded as unchanged and not stored.
    pub base: Option<(i64, &'a Hashes)>,
}

impl Reduction<'_> {
    /// Full checkpoints, every changed block stored raw (zero blocks are still left out).
    pub const RAW: Reduction<'static> = Reduction {
        codecs: Codecs {
            codec: Codec::None,
            level: 0,
            shuffle: false,
        },
        base: None,
    };
}

/// Decides how each block is stored, reusing one scratch buffer for encoded bytes.
struct BlockCoder {
    codecs: Codecs,
    content: ContentHash,
    /// Keeps its buffers and Zstandard context from block to block.
    encoder: Encoder,
    scratch: Vec<u8>,
}

impl BlockCoder {
    fn new(codecs: Codecs, content: ContentHash) -> BlockCoder {
        BlockCoder {
            codecs,
            content,
            encoder: Encoder::new(codecs),
            scratch: Vec::new(),
        }
    }

    /// Classify one block; for a codec kind the stored bytes are in `self.scratch`.
    fn code(&mut self, raw: &[u8], elem: usize, base: Option<u128>) -> BlockEntry {
        let hash = self.content.hash(raw);
        let mut e = BlockEntry {
            kind: block_kind::UNCHANGED,
            stored: 0,
            sum: 0,
            hash,
        };
        if base == Some(hash) {
            return e;
        }
        self.scratch.clear();
        e.kind = match self.codecs.codec {
            Codec::None if is_zero(raw) => block_kind::ZERO,
            Codec::None => block_kind::RAW,
            _ => self.encoder.encode(raw, elem, &mut self.scratch).code(),
        };
        match e.kind {
            block_kind::ZERO => {}
            block_kind::RAW => {
                e.stored = raw.len() as u32;
                e.sum = self.content.raw_sum(raw, hash);
            }
            _ => {
                e.stored = self.scratch.len() as u32;
                e.sum = block_sum(FORMAT_VERSION, &self.scratch);
            }
        }
        e
    }
}

/// Raw blocks are written straight from the caller's memory in runs of up to this many bytes
/// (one write per run rather than per block, while the run is still in cache).
const RAW_RUN: usize = 1 << 20;

/// A file to store as a region of a part, which the tier may adopt in place.
#[derive(Debug, Clone, Copy)]
pub struct FileRegion<'a> {
    pub id: i32,
    pub path: &'a std::path::Path,
    /// The hash of each of the file's blocks (of the part's block size), computed by
    /// whoever wrote it while writing it: taken as they are when the tier adopts the file,
    /// which is then not read at all. The caller vouches for them (a wrong hash makes the
    /// checkpoint fail its checks at restart); ignored unless there is one per block.
    pub hashes: Option<&'a [u128]>,
}

/// [`write_part`] with files as regions too (after `regions` in the index). Where the tier
/// can take them over (a directory tier on the files' file system), nothing is compressed
/// and the part is full (not incremental), the files become the head of the part as they
/// are: their bytes are read once, to hash them, and never copied. Files it cannot take, and
/// every file of an incremental part, are read and written like memory, so only the blocks
/// that changed are stored. The files are gone from their paths afterwards when they were
/// adopted, even if the write fails; otherwise they stay.
pub fn write_part_files(
    tier: &dyn Tier,
    key: &str,
    meta: PartMeta<'_>,
    regions: &[RegionRef<'_>],
    files: &[FileRegion<'_>],
    red: Reduction<'_>,
) -> Result<RankIndex> {
    let mut w = tier.create(key)?;
    let mut adopted = Vec::with_capacity(files.len());
    if red.codecs.codec == Codec::None && red.base.is_none() {
        for f in files {
            match w.adopt(f.path)? {
                Some(file) => {
                    let m = match f.hashes {
                        Some(_) => Mapped::read_file_lazily(file, f.path)?,
                        None => Mapped::read_file(file, f.path)?,
                    };
                    adopted.push((f.id, m, f.hashes))
                }
                None => break,
            }
        }
    }
    let copied = files[adopted.len()..]
        .iter()
        .map(|f| Ok((f.id, Mapped::read(f.path)?)))
        .collect::<Result<Vec<_>>>()?;
    fn as_region((id, m): &(i32, Mapped)) -> RegionRef<'_> {
        RegionRef {
            id: *id,
            dtype: Dtype::Byte,
            bytes: m.bytes(),
        }
    }
    let block = meta.block.max(1) as u64;
    let head: Vec<Adopted<'_>> = adopted
        .iter()
        .map(|(id, m, hashes)| Adopted {
            region: RegionRef {
                id: *id,
                dtype: Dtype::Byte,
                bytes: m.bytes(),
            },
            hashes: hashes.filter(|h| h.len() as u64 == (m.bytes().len() as u64).div_ceil(block)),
        })
        .collect();
    let mut rest = regions.to_vec();
    rest.extend(copied.iter().map(as_region));
    let index = encode_after(&mut w, meta, &head, &rest, red)?;
    w.commit()?;
    Ok(index)
}

/// The stored file among `files` (a reader's [`ObjectReader::files`]) that holds exactly
/// region `e`'s bytes, every block of it raw.
pub fn stored_file(
    e: &RegionEntry,
    files: &[(u64, u64, std::path::PathBuf)],
) -> Option<std::path::PathBuf> {
    let raw = e.blocks.iter().all(|b| b.kind == block_kind::RAW);
    files
        .iter()
        .find(|(at, len, _)| raw && *at == e.offset && *len == e.nbytes)
        .map(|f| f.2.clone())
}

/// Check a file said to hold region `e` of `index` as it is (a stored file the tier kept, or
/// a copy the caller kept): it is a regular file of exactly the region's length, and every
/// block matches the hash of raw contents the index records for it, however the block was
/// stored (raw, zero, compressed or unchanged since a base). Read through a mapping, so no
/// copy is made. Format-1 indexes record no such hashes, so nothing is taken from a file
/// against them.
pub fn check_in_place(index: &RankIndex, e: &RegionEntry, path: &std::path::Path) -> Result<()> {
    if index.format < 2 {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "region {} cannot be checked against {}: its format-1 index records no block \
                 hashes",
                e.id,
                path.display()
            ),
        ));
    }
    let m = Mapped::read_regular(path)?;
    if m.bytes().len() as u64 != e.nbytes {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "{} holds {} bytes, region {} has {}",
                path.display(),
                m.bytes().len(),
                e.id,
                e.nbytes
            ),
        ));
    }
    let block = index.block_size.max(1) as usize;
    let content = ContentHash::of(index)?;
    for (i, (raw, b)) in m.bytes().chunks(block).zip(&e.blocks).enumerate() {
        if content.hash(raw) != b.hash {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "block {i} of region {} in {} differs from the checkpoint",
                    e.id,
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Write one rank file under `key` and publish it atomically. Returns its index.
pub fn write_part(
    tier: &dyn Tier,
    key: &str,
    meta: PartMeta<'_>,
    regions: &[RegionRef<'_>],
    red: Reduction<'_>,
) -> Result<RankIndex> {
    let mut w = tier.create(key)?;
    let index = encode_part(&mut w, meta, regions, red)?;
    w.commit()?;
    Ok(index)
}

/// The length of the rank file `encode_part` writes for these regions when every block is
/// stored raw: an upper bound for any reduction.
pub fn part_len(meta: PartMeta<'_>, regions: &[RegionRef<'_>]) -> u64 {
    let data: u64 = regions.iter().map(|r| r.bytes.len() as u64).sum();
    let index: u64 = 50
        + meta.name.len() as u64
        + regions
            .iter()
            .map(|r| {
                36 + BlockEntry::LEN as u64 * (r.bytes.len() as u64).div_ceil(meta.block as u64)
            })
            .sum::<u64>();
    HEADER_LEN + data + index + TRAILER_LEN
}

/// Stream one rank file into `sink`: header, each region's stored blocks, index, trailer.
/// Each block is hashed, compared with the base's hash (incremental), checked for zeros and
/// encoded, while it is still in cache. Returns the index.
pub fn encode_part(
    sink: &mut dyn PartSink,
    meta: PartMeta<'_>,
    regions: &[RegionRef<'_>],
    red: Reduction<'_>,
) -> Result<RankIndex> {
    encode_after(sink, meta, &[], regions, red)
}

/// The checksum and hash of every block of `bytes` stored raw (blocks of `block` bytes, the
/// last maybe shorter), on up to `threads` threads when there are enough bytes: a process
/// tree's images are one rank's regions, and hashing them on one thread left the other cores
/// idle.
fn block_hashes(
    bytes: &[u8],
    block: usize,
    threads: usize,
    content: &ContentHash,
) -> Vec<(u64, u128)> {
    let threads = threads_for(bytes.len(), threads);
    let both = |b: &[u8]| {
        let h = content.hash(b);
        (content.raw_sum(b, h), h)
    };
    if threads == 1 {
        return bytes.chunks(block).map(both).collect();
    }
    // Whole blocks per thread, so the blocks are the same as on one thread.
    let per = (bytes.len().div_ceil(threads) / block + 1) * block;
    std::thread::scope(|s| {
        let parts: Vec<_> = bytes
            .chunks(per)
            .map(|part| s.spawn(move || part.chunks(block).map(both).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// A region whose bytes are already in the part (a file the tier adopted), with its blocks'
/// hashes when its writer computed them.
struct Adopted<'a> {
    region: RegionRef<'a>,
    hashes: Option<&'a [u128]>,
}

/// [`encode_part`] after `adopted`: regions whose bytes are already the first bytes of the
/// part, in order (files the tier adopted). Each of their blocks is recorded raw, its hash
/// (which is also its checksum) the one given, else computed in one read; the part then has
/// no header.
fn encode_after(
    sink: &mut dyn PartSink,
    meta: PartMeta<'_>,
    adopted: &[Adopted<'_>],
    regions: &[RegionRef<'_>],
    red: Reduction<'_>,
) -> Result<RankIndex> {
    let t0 = Instant::now();
    let block = meta.block.max(1) as usize;
    let mut index = RankIndex::new(
        meta.name,
        meta.version,
        meta.rank,
        meta.world_size,
        block as u32,
    );
    index.base = red.base.map(|(v, _)| v);
    let content = ContentHash::for_writing();
    index.keyed = content.keyed();
    let mut out = Coalescing {
        w: sink,
        buf: Vec::with_capacity(COALESCE),
    };
    let mut coder = BlockCoder::new(red.codecs, content.clone());
    let mut offset = 0;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for a in adopted {
        let r = &a.region;
        let nbytes = r.bytes.len() as u64;
        let mut entry = empty_entry(r, offset, block);
        // Hashes the writer computed are XXH3-128: of no use to an authenticated part.
        let hashes = match a.hashes.filter(|_| !content.keyed()) {
            Some(h) => h.iter().map(|h| (*h as u64, *h)).collect(),
            None => block_hashes(r.bytes, block, cores, &content),
        };
        // The last block's length, from the region's (a given hash reads nothing).
        let lens = (0..hashes.len()).map(|i| (nbytes - (i * block) as u64).min(block as u64));
        for (len, (sum, hash)) in lens.zip(hashes) {
            entry.blocks.push(BlockEntry {
                kind: block_kind::RAW,
                stored: len as u32,
                sum,
                hash,
            });
        }
        offset += nbytes;
        index.regions.push(entry);
    }
    let headerless = !adopted.is_empty();
    if !headerless {
        out.write(&encode_header())?;
        offset = HEADER_LEN;
    }
    for r in regions {
        let base = red
            .base
            .and_then(|(_, h)| h.region(r.id, r.dtype, block as u32));
        let mut entry = empty_entry(r, offset, block);
        // A run of raw blocks not yet written: [run, at) of the region.
        let mut run = 0;
        for (i, raw) in r.bytes.chunks(block).enumerate() {
            let at = i * block;
            let base_hash =
                base.and_then(|(n, h)| (block_len(n, block, i) == Some(raw.len())).then(|| h[i]));
            let e = coder.code(raw, r.dtype.size(), base_hash);
            if e.kind != block_kind::RAW || at - run >= RAW_RUN {
                out.write(&r.bytes[run..at])?;
                run = at;
            }
            match e.kind {
                block_kind::RAW => {}
                block_kind::ZERO | block_kind::UNCHANGED => run = at + raw.len(),
                _ => {
                    out.write(&coder.scratch)?;
                    run = at + raw.len();
                }
            }
            offset += e.stored as u64;
            entry.blocks.push(e);
        }
        out.write(&r.bytes[run..])?;
        index.regions.push(entry);
    }
    index.write_ns = t0.elapsed().as_nanos() as u64;
    finish_part(&mut out, &index, offset, headerless)?;
    Ok(index)
}

/// The index entry of region `r`, stored from `offset`, before its block records.
fn empty_entry(r: &RegionRef<'_>, offset: u64, block: usize) -> RegionEntry {
    let nbytes = r.bytes.len() as u64;
    RegionEntry {
        id: r.id,
        dtype: r.dtype,
        count: nbytes / r.dtype.size() as u64,
        offset,
        nbytes,
        blocks: Vec::with_capacity(r.bytes.len().div_ceil(block)),
    }
}

fn finish_part(
    out: &mut Coalescing<'_>,
    index: &RankIndex,
    offset: u64,
    headerless: bool,
) -> Result<()> {
    let key = crate::auth::key().filter(|_| index.keyed);
    let ib = index.encode_with(key.as_ref());
    let trailer = Trailer {
        index_offset: offset,
        index_len: ib.len() as u64,
        index_sum: checksum(&ib),
        headerless,
    };
    out.write(&ib)?;
    out.write(&trailer.encode())?;
    out.flush()
}

/// Whether a rank file's index is what its key promises: checkpoint `name` version `v`,
/// rank `rank` of a job of `world` ranks when that is known (the manifest's, or the
/// restoring job's). Restart and `verify` judge every rank file and partner copy by this one
/// check, so neither accepts what the other refuses.
pub fn index_is(
    index: &RankIndex,
    (name, v): (&str, i64),
    rank: usize,
    world: Option<usize>,
) -> Result<()> {
    if index.name != name
        || index.version != v
        || index.rank as usize != rank
        || world.is_some_and(|w| w != index.world_size as usize)
    {
        let of = world.map_or(String::new(), |w| format!("/{w}"));
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "holds {} v{} of rank {}/{}, not {name} v{v} of rank {rank}{of}",
                cairn_format::shown(&index.name),
                index.version,
                index.rank,
                index.world_size
            ),
        ));
    }
    Ok(())
}

/// Read and check a rank file's trailer.
fn read_trailer(r: &dyn ObjectReader) -> Result<Trailer> {
    let len = r.len();
    if len < TRAILER_LEN {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!("file of {len} bytes is too short"),
        ));
    }
    let mut t = [0u8; TRAILER_LEN as usize];
    r.read_exact_at(&mut t, len - TRAILER_LEN)?;
    Ok(Trailer::decode(&t, len)?)
}

/// The index checksum a rank file's trailer records: what names its contents (every stored
/// block's checksum is in the index), recorded by the parity that protects it.
pub fn index_sum(r: &dyn ObjectReader) -> Result<u64> {
    Ok(read_trailer(r)?.index_sum)
}

/// Read and check the header, trailer and index of a rank file.
pub fn read_index(r: &dyn ObjectReader) -> Result<RankIndex> {
    let tr = read_trailer(r)?;
    let format = if tr.headerless {
        FORMAT_VERSION
    } else {
        let mut h = [0u8; HEADER_LEN as usize];
        r.read_exact_at(&mut h, 0)?;
        check_header(&h)?
    };
    let mut ib = vec![0u8; tr.index_len as usize];
    r.read_exact_at(&mut ib, tr.index_offset)?;
    if checksum(&ib) != tr.index_sum {
        return Err(Error::new(ErrorKind::Corrupt, "index fails its checksum"));
    }
    let index = RankIndex::decode_format(&ib, format)?;
    index.check_extents_in(tr.data_start(), tr.index_offset)?;
    match (index.keyed, crate::auth::key()) {
        (true, Some(k)) if !k.index_mac_ok(&ib) => Err(crate::auth::refused(
            "its index",
            "the index's MAC does not match",
        )),
        (true, None) => Err(not_authenticating()),
        (false, Some(_)) => Err(crate::auth::refused(
            "its index",
            "the index carries no MAC",
        )),
        _ => Ok(index),
    }
}

/// Check that a stored part has exactly the regions now protected, with the same types and
/// sizes. Errors name the region and both shapes.
pub fn check_fits(index: &RankIndex, regions: &[RegionMut<'_>]) -> Result<()> {
    check_fits_except(index, regions, &[])
}

/// [`check_fits`], but the stored regions `skip` need not be among `regions` (they are
/// taken in place, see [`check_in_place`]).
pub fn check_fits_except(index: &RankIndex, regions: &[RegionMut<'_>], skip: &[i32]) -> Result<()> {
    for r in regions {
        let count = (r.bytes.len() / r.dtype.size()) as u64;
        match index.regions.iter().find(|e| e.id == r.id) {
            None => {
                return Err(Error::new(
                    ErrorKind::Mismatch,
                    format!("region {} is protected now but is not in the checkpoint (it holds regions {:?})", r.id, ids(index)),
                ))
            }
            Some(e) if e.dtype != r.dtype || e.count != count => {
                return Err(Error::new(
                    ErrorKind::Mismatch,
                    format!(
                        "region {} was checkpointed as {} x {} but is protected now as {} x {}",
                        r.id, e.count, e.dtype, count, r.dtype
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(e) = index
        .regions
        .iter()
        .find(|e| !regions.iter().any(|r| r.id == e.id) && !skip.contains(&e.id))
    {
        return Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "region {} ({} x {}) is in the checkpoint but is not protected now",
                e.id, e.count, e.dtype
            ),
        ));
    }
    Ok(())
}

fn ids(index: &RankIndex) -> Vec<i32> {
    index.regions.iter().map(|e| e.id).collect()
}

/// One part of a chain: an opened rank file and its checked index.
pub struct Link {
    pub reader: Box<dyn ObjectReader>,
    pub index: RankIndex,
}

/// Longest chain a reader follows (a guard against damaged bases; `[reduction] full_every`
/// keeps real chains far shorter).
const MAX_CHAIN: usize = 1000;

/// Open rank `rank`'s part of `name` v`version` on `tier` and, when it is incremental, the
/// parts it is based on, newest first, down to a full one. Every index must name the
/// expected checkpoint, version and rank (and world size, when given).
pub fn open_chain(
    tier: &dyn Tier,
    name: &str,
    version: i64,
    rank: usize,
    world_size: Option<usize>,
) -> Result<Vec<Link>> {
    let mut chain: Vec<Link> = Vec::new();
    let mut v = version;
    loop {
        let key = crate::catalog::rank_key(name, v, rank);
        let reader = tier.open(&key).map_err(|e| {
            let e = Error::from(e);
            match chain.first() {
                Some(_) => e.context(format!("{name} v{version} is based on v{v}")),
                None => e,
            }
        })?;
        let index = read_index(&*reader).map_err(|e| e.context(key.clone()))?;
        // Each link of the chain is of the same job as the newest.
        let world = world_size.or(chain.first().map(|l| l.index.world_size as usize));
        index_is(&index, (name, v), rank, world).map_err(|e| e.context(key.clone()))?;
        let base = index.base;
        chain.push(Link { reader, index });
        match base {
            None => return Ok(chain),
            Some(_) if chain.len() >= MAX_CHAIN => {
                return Err(Error::new(
                    ErrorKind::Corrupt,
                    format!("{name} v{version}: chain of more than {MAX_CHAIN} parts"),
                ))
            }
            Some(b) => v = b,
        }
    }
}

/// Where each stored block of one region of one link starts in its file.
struct Located<'c> {
    entry: &'c RegionEntry,
    starts: Vec<u64>,
}

/// The raw length of block `i` of a region of `nbytes` bytes cut into `block`-byte blocks, or
/// `None` past its end.
fn block_len(nbytes: u64, block: usize, i: usize) -> Option<usize> {
    let start = (i as u64).checked_mul(block as u64)?;
    (start < nbytes).then(|| (nbytes - start).min(block as u64) as usize)
}

/// Finds, for any block of the newest part of a chain, the part that stores it.
struct Resolver<'c> {
    chain: &'c [Link],
    /// The newest part's content hash: every block restored is checked against it when it
    /// is keyed, encoded blocks always.
    content: ContentHash,
    regions: Vec<HashMap<i32, Located<'c>>>,
    scratch: Vec<u8>,
    decoder: Decoder,
}

impl<'c> Resolver<'c> {
    fn new(chain: &'c [Link], content: ContentHash) -> Resolver<'c> {
        let regions = chain
            .iter()
            .map(|l| {
                l.index
                    .regions
                    .iter()
                    .map(|e| {
                        let mut at = e.offset;
                        let starts = e
                            .blocks
                            .iter()
                            .map(|b| {
                                let s = at;
                                at += b.stored as u64;
                                s
                            })
                            .collect();
                        (e.id, Located { entry: e, starts })
                    })
                    .collect()
            })
            .collect();
        Resolver {
            chain,
            content,
            regions,
            scratch: Vec::new(),
            decoder: Decoder::new(),
        }
    }

    /// How many blocks from block `i` of region `id` (at most `max`) the newest part stores
    /// raw, one after the other: they are read in one piece. 0 when block `i` is not raw there.
    fn raw_run(&self, id: i32, i: usize, max: usize) -> usize {
        let Some(loc) = self.regions[0].get(&id) else {
            return 0;
        };
        loc.entry.blocks[i.min(loc.entry.blocks.len())..]
            .iter()
            .take(max)
            .take_while(|b| b.kind == block_kind::RAW)
            .count()
    }

    /// Fill `dest`, blocks `i..` of region `id` that [`Resolver::raw_run`] found raw in the
    /// newest part, with one read, then check each block's checksum.
    fn fill_raw_run(&mut self, id: i32, i: usize, block: usize, dest: &mut [u8]) -> Result<()> {
        let link = &self.chain[0];
        let loc = &self.regions[0][&id];
        link.reader.read_exact_at(dest, loc.starts[i])?;
        for (j, got) in dest.chunks(block).enumerate() {
            let b = loc.entry.blocks[i + j];
            let what = if b.stored as usize != got.len() || link.index.block_sum(got) != b.sum {
                "fails its checksum"
            } else if self.content.keyed() && self.content.hash(got) != b.hash {
                "does not match its keyed hash"
            } else {
                continue;
            };
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "block {} of region {id} {what} (v{})",
                    i + j,
                    link.index.version
                ),
            ));
        }
        Ok(())
    }

    /// Fill `dest` (block `i` of region `id` of the newest part) from whichever part of the
    /// chain stores it, checking the stored bytes' checksum and, for encoded blocks, the
    /// decoded bytes' hash.
    fn fill(&mut self, id: i32, i: usize, dest: &mut [u8]) -> Result<()> {
        let newest = &self.regions[0][&id];
        let want = newest.entry.blocks[i];
        let dtype = newest.entry.dtype;
        let hashed = self.chain[0].index.hashed();
        for (j, link) in self.chain.iter().enumerate() {
            let v = link.index.version;
            let bad = |what: String| {
                Error::new(
                    ErrorKind::Corrupt,
                    format!("block {i} of region {id} {what} (v{v})"),
                )
            };
            let Some(loc) = self.regions[j].get(&id) else {
                return Err(bad("is missing from the base it is taken from".into()));
            };
            let e = loc.entry;
            // The base region may be longer or shorter: what matters is that it has a block i
            // of this length (and the same element type).
            if e.dtype != dtype
                || block_len(e.nbytes, self.chain[0].index.block_size as usize, i)
                    != Some(dest.len())
                || i >= e.blocks.len()
            {
                return Err(bad("has another shape in the base it is taken from".into()));
            }
            let b = e.blocks[i];
            if hashed && link.index.hashed() && b.hash != want.hash {
                return Err(bad(
                    "does not match its hash in the base it is taken from".into()
                ));
            }
            if b.kind == block_kind::UNCHANGED {
                continue;
            }
            let at = loc.starts[i];
            match b.kind {
                block_kind::ZERO => dest.fill(0),
                block_kind::RAW => {
                    link.reader.read_exact_at(dest, at)?;
                    if link.index.block_sum(dest) != b.sum {
                        return Err(bad("fails its checksum".into()));
                    }
                    if self.content.keyed() && self.content.hash(dest) != want.hash {
                        return Err(bad("does not match its keyed hash".into()));
                    }
                }
                code => {
                    let Some(kind) = BlockKind::from_code(code) else {
                        return Err(bad(format!("has block kind {code}, which no codec has")));
                    };
                    self.scratch.resize(b.stored as usize, 0);
                    link.reader.read_exact_at(&mut self.scratch, at)?;
                    if link.index.block_sum(&self.scratch) != b.sum {
                        return Err(bad("fails its checksum".into()));
                    }
                    self.decoder
                        .decode(kind, &self.scratch, dtype.size(), dest)
                        .map_err(|e| bad(format!("cannot be decoded: {e}")))?;
                    if hashed && self.content.hash(dest) != want.hash {
                        return Err(bad("does not match its hash after decoding".into()));
                    }
                }
            }
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Corrupt,
            format!("block {i} of region {id} is unchanged in every part of the chain"),
        ))
    }
}

/// Fill `regions` from a chain opened with [`open_chain`] whose newest index was checked
/// with [`check_fits`], verifying every block.
pub fn restore(chain: &[Link], regions: &mut [RegionMut<'_>]) -> Result<()> {
    restore_with(chain, regions, 1)
}

/// Below this many bytes a restore, or the hashing of adopted files, is not split between
/// threads.
const PARALLEL_MIN: usize = 32 << 20;

/// The threads, of at most `threads`, that `total` bytes are split between: at least 8 MiB
/// each, and one below [`PARALLEL_MIN`].
fn threads_for(total: usize, threads: usize) -> usize {
    if total < PARALLEL_MIN {
        1
    } else {
        threads.min(total >> 23).max(1)
    }
}

/// [`restore`] on up to `threads` threads (the cores this rank may use): the regions are cut
/// into runs of whole blocks, each read and checked by one thread into its own part of the
/// caller's memory.
pub fn restore_with(chain: &[Link], regions: &mut [RegionMut<'_>], threads: usize) -> Result<()> {
    let block = chain[0].index.block_size.max(1) as usize;
    let content = ContentHash::of(&chain[0].index)?;
    let total: usize = regions.iter().map(|r| r.bytes.len()).sum();
    let threads = threads_for(total, threads);
    // (region id, first block, bytes) of every run, in order.
    let mut runs: Vec<(i32, usize, &mut [u8])> = Vec::new();
    let piece = (total.div_ceil(threads * 4) / block + 1) * block;
    for reg in regions.iter_mut() {
        let mut first = 0;
        let mut rest: &mut [u8] = &mut *reg.bytes;
        while !rest.is_empty() {
            let n = piece.min(rest.len());
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(n);
            runs.push((reg.id, first, head));
            first += n / block;
            rest = tail;
        }
    }
    if threads == 1 {
        let mut res = Resolver::new(chain, content);
        return runs
            .into_iter()
            .try_for_each(|(id, first, dest)| fill_blocks(&mut res, id, first, block, dest));
    }
    let mut shares: Vec<Vec<(i32, usize, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, run) in runs.into_iter().enumerate() {
        shares[i % threads].push(run);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .into_iter()
            .map(|share| {
                let content = content.clone();
                s.spawn(move || {
                    let mut res = Resolver::new(chain, content);
                    share.into_iter().try_for_each(|(id, first, dest)| {
                        fill_blocks(&mut res, id, first, block, dest)
                    })
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Error::new(ErrorKind::Io, "a restore thread panicked")))
        })
    })
}

/// Restore blocks `first..` of region `id` into `dest` (whole blocks, the last one of the
/// region possibly short): runs of raw blocks in one read each, others one by one.
fn fill_blocks(
    res: &mut Resolver<'_>,
    id: i32,
    first: usize,
    block: usize,
    dest: &mut [u8],
) -> Result<()> {
    let nblocks = dest.len().div_ceil(block);
    let mut i = 0;
    while i < nblocks {
        let run = res
            .raw_run(id, first + i, (RAW_RUN / block).max(1))
            .min(nblocks - i);
        let end = ((i + run.max(1)) * block).min(dest.len());
        let d = &mut dest[i * block..end];
        if run > 0 {
            res.fill_raw_run(id, first + i, block, d)?;
            i += run;
        } else {
            res.fill(id, first + i, d)?;
            i += 1;
        }
    }
    Ok(())
}

/// Write the full checkpoint a chain describes into `sink`, re-encoded with `codecs`: the
/// merge of a full part and its incrementals (or a change of codec), one block in memory at a
/// time. `progress(bytes)` is called after each block with the raw bytes done so far; when it
/// returns false the rewrite stops with an error. Returns the new index.
pub fn rewrite(
    chain: &[Link],
    sink: &mut dyn PartSink,
    codecs: Codecs,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<RankIndex> {
    let newest = &chain[0].index;
    let block = newest.block_size as usize;
    let mut index = RankIndex::new(
        &newest.name,
        newest.version,
        newest.rank,
        newest.world_size,
        newest.block_size,
    );
    index.write_ns = newest.write_ns;
    let content = ContentHash::for_writing();
    index.keyed = content.keyed();
    let mut out = Coalescing {
        w: sink,
        buf: Vec::with_capacity(COALESCE),
    };
    let mut coder = BlockCoder::new(codecs, content);
    let mut res = Resolver::new(chain, ContentHash::of(&chain[0].index)?);
    let mut raw = vec![0u8; block];
    out.write(&encode_header())?;
    let mut offset = HEADER_LEN;
    let mut done = 0u64;
    for r in &newest.regions {
        let mut entry = RegionEntry {
            id: r.id,
            dtype: r.dtype,
            count: r.count,
            offset,
            nbytes: r.nbytes,
            blocks: Vec::with_capacity(r.blocks.len()),
        };
        for i in 0..r.blocks.len() {
            let (s, t) = r.block_range(i, newest.block_size);
            let buf = &mut raw[..(t - s) as usize];
            res.fill(r.id, i, buf)?;
            let e = coder.code(buf, r.dtype.size(), None);
            match e.kind {
                block_kind::RAW => out.write(buf)?,
                block_kind::ZERO => {}
                _ => out.write(&coder.scratch)?,
            }
            offset += e.stored as u64;
            entry.blocks.push(e);
            done += t - s;
            if !progress(done) {
                return Err(Error::new(ErrorKind::State, "the copy was cancelled"));
            }
        }
        index.regions.push(entry);
    }
    finish_part(&mut out, &index, offset, false)?;
    Ok(index)
}

/// Re-check every stored block of a part: its checksum and, for encoded blocks, that it
/// decodes to bytes with the recorded hash. Blocks an incremental part takes from its base
/// are checked with the base. Returns the number of raw bytes the part describes.
pub fn verify(r: &dyn ObjectReader) -> Result<u64> {
    let index = read_index(r)?;
    let content = ContentHash::of(&index)?;
    let mut stored = Vec::new();
    let mut raw = vec![0u8; index.block_size as usize];
    let mut decoder = Decoder::new();
    for e in &index.regions {
        for b in e.stored_blocks() {
            stored.resize(b.len as usize, 0);
            r.read_exact_at(&mut stored, b.offset)?;
            let bad = |what: &str| {
                Error::new(
                    ErrorKind::Corrupt,
                    format!("block {} of region {} {what}", b.index, e.id),
                )
            };
            if index.block_sum(&stored) != b.sum {
                return Err(bad("fails its checksum"));
            }
            let rec = e.blocks[b.index];
            if rec.kind == block_kind::RAW {
                if content.keyed() && content.hash(&stored) != rec.hash {
                    return Err(bad("does not match its keyed hash"));
                }
                continue;
            }
            let (s, t) = e.block_range(b.index, index.block_size);
            let out = &mut raw[..(t - s) as usize];
            let Some(kind) = BlockKind::from_code(rec.kind) else {
                return Err(bad(&format!(
                    "has block kind {}, which no codec has",
                    rec.kind
                )));
            };
            decoder
                .decode(kind, &stored, e.dtype.size(), out)
                .map_err(|x| bad(&format!("cannot be decoded: {x}")))?;
            if index.hashed() && content.hash(out) != rec.hash {
                return Err(bad("does not match its hash after decoding"));
            }
        }
    }
    Ok(index.data_bytes())
}

/// Copy one object between tiers in large pieces, publishing it atomically at the destination.
pub fn copy_object(src: &dyn Tier, dst: &dyn Tier, key: &str) -> Result<u64> {
    const PIECE: u64 = 8 << 20;
    let r = src.open(key)?;
    let mut w = dst.create(key)?;
    let mut buf = vec![0u8; PIECE.min(r.len()) as usize];
    let mut off = 0;
    while off < r.len() {
        let n = PIECE.min(r.len() - off) as usize;
        r.read_exact_at(&mut buf[..n], off)?;
        w.write_all(&buf[..n])?;
        off += n as u64;
    }
    w.commit()?;
    Ok(off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_tier::DirTier;

    /// The format's block-kind codes and the codecs' agree: every code up to the last codec
    /// but "unchanged" is an encoding with that code, and no other code is one.
    #[test]
    fn block_kind_codes_agree_with_the_codecs() {
        for c in 0..=u8::MAX {
            let kind = BlockKind::from_code(c);
            let encoding = c <= block_kind::LAST_CODEC && c != block_kind::UNCHANGED;
            assert_eq!(kind.is_some(), encoding, "code {c}");
            if let Some(k) = kind {
                assert_eq!(k.code(), c);
            }
        }
        assert_eq!(
            BlockKind::from_code(block_kind::ZERO),
            Some(BlockKind::Zero)
        );
        assert_eq!(BlockKind::from_code(block_kind::RAW), Some(BlockKind::Raw));
    }

    fn meta() -> PartMeta<'static> {
        PartMeta {
            name: "t",
            version: 1,
            rank: 0,
            world_size: 1,
            block: 4096,
        }
    }

    #[test]
    fn round_trip_and_every_flipped_byte_is_caught() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let a: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let b: Vec<u8> = (0..24u8).collect();
        let regs = [
            RegionRef {
                id: 1,
                dtype: Dtype::Byte,
                bytes: &a,
            },
            RegionRef {
                id: 2,
                dtype: Dtype::Double,
                bytes: &b,
            },
        ];
        write_part(&tier, "t/v1/rank0.ckpt", meta(), &regs, Reduction::RAW).unwrap();
        let chain = open_chain(&tier, "t", 1, 0, Some(1)).unwrap();
        let ix = &chain[0].index;
        let (mut a2, mut b2) = (vec![0u8; a.len()], vec![0u8; b.len()]);
        {
            let mut out = [
                RegionMut {
                    id: 2,
                    dtype: Dtype::Double,
                    bytes: &mut b2,
                },
                RegionMut {
                    id: 1,
                    dtype: Dtype::Byte,
                    bytes: &mut a2,
                },
            ];
            check_fits(ix, &out).unwrap();
            restore(&chain, &mut out).unwrap();
        }
        assert_eq!((a2, b2), (a.clone(), b.clone()));
        assert_eq!(verify(&*chain[0].reader).unwrap(), 10_024);

        let path = d.path().join("t/t/v1/rank0.ckpt");
        let good = std::fs::read(&path).unwrap();
        for pos in (0..good.len()).step_by(97).chain([good.len() - 1]) {
            let mut bad = good.clone();
            bad[pos] ^= 0x40;
            std::fs::write(&path, &bad).unwrap();
            let r = tier.open("t/v1/rank0.ckpt").unwrap();
            assert!(
                verify(&*r).is_err(),
                "flip at byte {pos} of {} not detected",
                good.len()
            );
        }
    }

    #[test]
    fn a_restore_split_between_threads_is_exact_and_still_checks_every_block() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        // Two regions past the threshold together, with zero, compressible and random
        // blocks, and a short last block.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let a: Vec<u8> = (0..(20 << 20) + 100)
            .map(|i: usize| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match (i >> 16) % 3 {
                    0 => 0,
                    1 => (i >> 8) as u8,
                    _ => x as u8,
                }
            })
            .collect();
        let b: Vec<u8> = (0..(16 << 20) as u32).map(|i| (i % 251) as u8).collect();
        let regs = [RegionRef::new(1, &a[..]), RegionRef::new(2, &b[..])];
        let red = Reduction {
            codecs: Codecs {
                codec: Codec::Lz4,
                level: 0,
                shuffle: false,
            },
            base: None,
        };
        write_part(&tier, "t/v1/rank0.ckpt", meta(), &regs, red).unwrap();
        let chain = open_chain(&tier, "t", 1, 0, Some(1)).unwrap();
        for threads in [1, 2, 3, 8] {
            let (mut a2, mut b2) = (vec![1u8; a.len()], vec![1u8; b.len()]);
            let mut out = [
                RegionMut::new(1, &mut a2[..]),
                RegionMut::new(2, &mut b2[..]),
            ];
            restore_with(&chain, &mut out, threads).unwrap();
            assert!(a2 == a && b2 == b, "{threads} threads restored other bytes");
        }
        // A damaged block in the last run of the second region is still caught.
        let path = d.path().join("t/t/v1/rank0.ckpt");
        let ix = &chain[0].index;
        let last = ix.regions[1].stored_blocks().last().unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[last.offset as usize] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let chain = open_chain(&tier, "t", 1, 0, Some(1)).unwrap();
        let (mut a2, mut b2) = (vec![0u8; a.len()], vec![0u8; b.len()]);
        let mut out = [
            RegionMut::new(1, &mut a2[..]),
            RegionMut::new(2, &mut b2[..]),
        ];
        assert!(restore_with(&chain, &mut out, 4).is_err());
    }

    #[test]
    fn block_hashes_are_the_same_on_several_threads() {
        let bytes: Vec<u8> = (0..(40usize << 20) + 777)
            .map(|i| (i * 31 + (i >> 13)) as u8)
            .collect();
        let third = &bytes[3 << 16..4 << 16];
        let keyed = ContentHash::Keyed(AuthKey::new(&[9; 32]));
        for content in [ContentHash::Plain, keyed] {
            let one = block_hashes(&bytes, 1 << 16, 1, &content);
            assert_eq!(one.len(), bytes.len().div_ceil(1 << 16));
            assert_eq!(one[3].1, content.hash(third));
            assert_eq!(one[3].0, block_sum(FORMAT_VERSION, third));
            for threads in [2, 3, 5] {
                assert_eq!(
                    block_hashes(&bytes, 1 << 16, threads, &content),
                    one,
                    "{threads} threads"
                );
            }
        }
        assert_eq!(
            block_hashes(third, 1 << 16, 1, &ContentHash::Plain)[0].1,
            block_hash(third)
        );
    }

    #[test]
    fn part_len_is_exact_for_raw_parts() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        for sizes in [vec![], vec![0], vec![1, 4096, 4097], vec![10_000, 3, 8192]] {
            let bufs: Vec<Vec<u8>> = sizes.iter().map(|n| vec![5u8; *n]).collect();
            let regs: Vec<RegionRef> = bufs
                .iter()
                .enumerate()
                .map(|(i, b)| RegionRef {
                    id: i as i32,
                    dtype: Dtype::Byte,
                    bytes: b,
                })
                .collect();
            write_part(&tier, "k", meta(), &regs, Reduction::RAW).unwrap();
            assert_eq!(
                tier.open("k").unwrap().len(),
                part_len(meta(), &regs),
                "{sizes:?}"
            );
        }
    }

    #[test]
    fn typed_regions_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let field: Vec<f64> = (0..5000).map(|i| i as f64 * 0.25 - 7.0).collect();
        let step = [42i64];
        write_part(
            &tier,
            "t/v1/rank0.ckpt",
            meta(),
            &[RegionRef::new(0, &step), RegionRef::new(1, &field)],
            Reduction::RAW,
        )
        .unwrap();
        let chain = open_chain(&tier, "t", 1, 0, None).unwrap();
        let ix = &chain[0].index;
        assert_eq!(
            (ix.regions[1].dtype, ix.regions[1].count),
            (Dtype::Double, 5000)
        );
        let (mut f2, mut s2) = (vec![0f64; 5000], [0i64]);
        let mut out = [RegionMut::new(0, &mut s2), RegionMut::new(1, &mut f2)];
        restore(&chain, &mut out).unwrap();
        assert_eq!((f2, s2), (field, step));
    }

    #[test]
    fn shape_changes_are_named() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let a = [0u8; 80];
        write_part(
            &tier,
            "k",
            meta(),
            &[RegionRef {
                id: 3,
                dtype: Dtype::Double,
                bytes: &a,
            }],
            Reduction::RAW,
        )
        .unwrap();
        let ix = read_index(&*tier.open("k").unwrap()).unwrap();
        let mut big = [0u8; 160];
        let e = check_fits(
            &ix,
            &[RegionMut {
                id: 3,
                dtype: Dtype::Double,
                bytes: &mut big,
            }],
        )
        .unwrap_err();
        assert!(
            e.msg.contains(
                "region 3 was checkpointed as 10 x double but is protected now as 20 x double"
            ),
            "{}",
            e.msg
        );
        let e = check_fits(&ix, &[]).unwrap_err();
        assert!(
            e.msg
                .contains("region 3 (10 x double) is in the checkpoint but is not protected now"),
            "{}",
            e.msg
        );
        let mut x = [0u8; 80];
        let e = check_fits(
            &ix,
            &[
                RegionMut {
                    id: 3,
                    dtype: Dtype::Double,
                    bytes: &mut big,
                },
                RegionMut {
                    id: 4,
                    dtype: Dtype::Byte,
                    bytes: &mut x,
                },
            ],
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch);
    }

    /// A small deterministic generator (xorshift64*), so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    const DTYPES: [Dtype; 9] = [
        Dtype::Byte,
        Dtype::Int8,
        Dtype::Int16,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Float,
        Dtype::Int64,
        Dtype::Uint64,
        Dtype::Double,
    ];

    fn all_codecs() -> Vec<Codecs> {
        let c = |codec, level, shuffle| Codecs {
            codec,
            level,
            shuffle,
        };
        vec![
            c(Codec::None, 0, false),
            c(Codec::Lz4, 0, false),
            c(Codec::Lz4, 0, true),
            c(Codec::Zstd, 1, false),
            c(Codec::Zstd, 3, true),
        ]
    }

    /// Region contents of one of several shapes: random, all zero, all equal, smooth
    /// floating point, or mostly zero with random islands.
    fn contents(rng: &mut Rng, dtype: Dtype, count: usize) -> Vec<u8> {
        let n = count * dtype.size();
        match rng.below(5) {
            0 => (0..n).map(|_| rng.next() as u8).collect(),
            1 => vec![0u8; n],
            2 => vec![0xA5; n],
            3 => {
                let mut v = vec![0u8; n];
                for (i, e) in v.chunks_exact_mut(8).enumerate() {
                    e.copy_from_slice(&(300.0 + (i as f64 * 0.001).sin()).to_le_bytes());
                }
                v
            }
            _ => {
                let mut v = vec![0u8; n];
                for _ in 0..4 {
                    let at = rng.below(n as u64) as usize;
                    let len = (rng.below(9000) as usize).min(n - at);
                    for b in &mut v[at..at + len] {
                        *b = rng.next() as u8;
                    }
                }
                v
            }
        }
    }

    fn regions_of(data: &[(Dtype, Vec<u8>)]) -> Vec<RegionRef<'_>> {
        data.iter()
            .enumerate()
            .map(|(i, (d, b))| RegionRef {
                id: i as i32 * 3 - 1,
                dtype: *d,
                bytes: b,
            })
            .collect()
    }

    /// Restore the chain of `name` v`v` into regions shaped like `data` and return them.
    fn read_back(tier: &dyn Tier, v: i64, data: &[(Dtype, Vec<u8>)]) -> Result<Vec<Vec<u8>>> {
        let chain = open_chain(tier, "t", v, 0, Some(1))?;
        let mut out: Vec<Vec<u8>> = data.iter().map(|(_, b)| vec![0x11; b.len()]).collect();
        let mut regs: Vec<RegionMut> = out
            .iter_mut()
            .zip(data)
            .enumerate()
            .map(|(i, (b, (d, _)))| RegionMut {
                id: i as i32 * 3 - 1,
                dtype: *d,
                bytes: b,
            })
            .collect();
        check_fits(&chain[0].index, &regs)?;
        restore(&chain, &mut regs)?;
        Ok(out)
    }

    /// Write version `v` of `data`, incremental against `hashes` (the previous version's) if
    /// any, and make `hashes` this version's.
    fn write_next(
        tier: &dyn Tier,
        v: i64,
        block: usize,
        data: &[(Dtype, Vec<u8>)],
        codecs: Codecs,
        hashes: &mut Option<Hashes>,
    ) -> RankIndex {
        let red = Reduction {
            codecs,
            base: hashes.as_ref().map(|h| (v - 1, h)),
        };
        let ix = write_part(
            tier,
            &key(v),
            meta_v(v, block as u32),
            &regions_of(data),
            red,
        )
        .unwrap();
        *hashes = Hashes::from_index(&ix);
        ix
    }

    /// Every version in `history` (version i + 1 at i) restores exactly, through its chain.
    fn all_restore(tier: &dyn Tier, history: &[Vec<(Dtype, Vec<u8>)>], after: i64) {
        for (u, want) in history.iter().enumerate() {
            let u = u as i64 + 1;
            let got = read_back(tier, u, want).unwrap();
            for (g, (_, w)) in got.iter().zip(want) {
                assert!(g == w, "v{u} read after v{after} differs");
            }
        }
    }

    fn meta_v(v: i64, block: u32) -> PartMeta<'static> {
        PartMeta {
            name: "t",
            version: v,
            rank: 0,
            world_size: 1,
            block,
        }
    }

    fn key(v: i64) -> String {
        crate::catalog::rank_key("t", v, 0)
    }

    #[test]
    fn random_regions_round_trip_with_every_codec() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..60i64 {
            let block = [4096u32, 4100, 8192, 65536][rng.below(4) as usize];
            let data: Vec<(Dtype, Vec<u8>)> = (0..1 + rng.below(3))
                .map(|_| {
                    let dt = DTYPES[rng.below(9) as usize];
                    // Sizes around block multiples, never a multiple on purpose half the time.
                    let count = match rng.below(3) {
                        0 => rng.below(5) as usize,
                        1 => (block as usize * (1 + rng.below(4) as usize)) / dt.size() + 1,
                        _ => rng.below(70_000) as usize,
                    };
                    (dt, contents(&mut rng, dt, count))
                })
                .collect();
            for codecs in all_codecs() {
                let red = Reduction { codecs, base: None };
                let ix = write_part(
                    &tier,
                    &key(case),
                    meta_v(case, block),
                    &regions_of(&data),
                    red,
                )
                .unwrap();
                let raw: u64 = data.iter().map(|(_, b)| b.len() as u64).sum();
                assert!(
                    ix.stored_bytes() <= raw,
                    "case {case} {codecs:?}: stored {} of {raw}",
                    ix.stored_bytes()
                );
                let got = read_back(&tier, case, &data).unwrap();
                for (g, (dt, want)) in got.iter().zip(&data) {
                    assert!(g == want, "case {case} {codecs:?} {dt}: bytes differ");
                }
                assert_eq!(verify(&*tier.open(&key(case)).unwrap()).unwrap(), raw);
            }
        }
    }

    #[test]
    fn zero_and_equal_blocks_cost_nothing_or_little() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let data = vec![
            (Dtype::Double, vec![0u8; 1 << 20]),
            (Dtype::Int32, vec![7u8; 1 << 20]),
        ];
        let raw = write_part(
            &tier,
            &key(1),
            meta_v(1, 65536),
            &regions_of(&data),
            Reduction::RAW,
        )
        .unwrap();
        assert_eq!(
            raw.regions[0].stored_bytes(),
            0,
            "zero blocks are not stored"
        );
        assert_eq!(raw.regions[0].kind_counts()[block_kind::ZERO as usize], 16);
        assert_eq!(raw.regions[1].stored_bytes(), 1 << 20);
        let red = Reduction {
            codecs: all_codecs()[2],
            base: None,
        };
        let lz = write_part(&tier, &key(2), meta_v(2, 65536), &regions_of(&data), red).unwrap();
        assert!(
            lz.regions[1].stored_bytes() < 16 * 1024,
            "{}",
            lz.stored_bytes()
        );
        assert_eq!(read_back(&tier, 2, &data).unwrap()[1], data[1].1);
    }

    /// Change `frac` of the blocks of every region: some rewritten at random, some zeroed.
    fn mutate(rng: &mut Rng, data: &mut [(Dtype, Vec<u8>)], block: usize, frac: f64) {
        for (_, b) in data.iter_mut() {
            let blocks = b.len().div_ceil(block);
            let n = ((blocks as f64) * frac).ceil() as usize;
            for _ in 0..n {
                let i = rng.below(blocks as u64) as usize;
                let end = ((i + 1) * block).min(b.len());
                let zero = rng.below(4) == 0;
                for x in &mut b[i * block..end] {
                    *x = if zero { 0 } else { rng.next() as u8 };
                }
            }
        }
    }

    #[test]
    fn incremental_chains_of_1_to_20_restore_bit_exactly() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let mut rng = Rng(42);
        let block = 4096usize;
        let mut data: Vec<(Dtype, Vec<u8>)> = vec![
            (Dtype::Double, contents(&mut rng, Dtype::Double, 40_001)),
            (Dtype::Int32, contents(&mut rng, Dtype::Int32, 9_000)),
            (Dtype::Byte, vec![3u8; 100]),
        ];
        let codecs = all_codecs()[2];
        let mut history = Vec::new();
        let mut hashes: Option<Hashes> = None;
        for v in 1..=20i64 {
            if v > 1 {
                mutate(&mut rng, &mut data, block, [0.01, 0.1, 0.5][v as usize % 3]);
            }
            let ix = write_next(&tier, v, block, &data, codecs, &mut hashes);
            assert_eq!(ix.base, (v > 1).then_some(v - 1));
            history.push(data.clone());
            // Every version written so far restores exactly, through its whole chain.
            all_restore(&tier, &history, v);
            for u in 1..=v {
                assert_eq!(
                    open_chain(&tier, "t", u, 0, None).unwrap().len(),
                    u as usize
                );
            }
        }
    }

    #[test]
    fn regions_that_grow_and_shrink_keep_their_unchanged_blocks_in_a_chain() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let mut rng = Rng(9);
        let block = 4096usize;
        // An appended log (grows by part of a block), a file rewritten shorter, and one whose
        // tail block changes length but whose first blocks stay.
        let mut data: Vec<(Dtype, Vec<u8>)> = vec![
            (
                Dtype::Byte,
                (0..10 * block + 100).map(|_| rng.next() as u8).collect(),
            ),
            (
                Dtype::Byte,
                (0..8 * block).map(|_| rng.next() as u8).collect(),
            ),
            (Dtype::Double, contents(&mut rng, Dtype::Double, 3000)),
        ];
        let mut history = Vec::new();
        let mut hashes: Option<Hashes> = None;
        for v in 1..=6i64 {
            if v > 1 {
                let more: Vec<u8> = (0..1500).map(|_| rng.next() as u8).collect();
                data[0].1.extend(more);
                let keep = data[1].1.len() - block - 17;
                data[1].1.truncate(keep);
                data[2].1.extend(contents(&mut rng, Dtype::Double, 300));
            }
            let ix = write_next(&tier, v, block, &data, all_codecs()[2], &mut hashes);
            if v > 1 {
                // Only the blocks that changed length or content are stored: every region
                // keeps most of its blocks as unchanged references to the base.
                for r in &ix.regions {
                    let unchanged = r
                        .blocks
                        .iter()
                        .filter(|b| b.kind == block_kind::UNCHANGED)
                        .count();
                    assert!(
                        unchanged + 3 >= r.blocks.len() && unchanged > 0,
                        "v{v} region {}: {unchanged} of {} blocks unchanged",
                        r.id,
                        r.blocks.len()
                    );
                }
            }
            history.push(data.clone());
            all_restore(&tier, &history, v);
        }
    }

    #[test]
    fn an_incremental_stores_only_changed_blocks() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let mut rng = Rng(7);
        let mut data = vec![(
            Dtype::Byte,
            (0..1 << 22).map(|_| rng.next() as u8).collect::<Vec<u8>>(),
        )];
        let full = write_part(
            &tier,
            &key(1),
            meta_v(1, 4096),
            &regions_of(&data),
            Reduction::RAW,
        )
        .unwrap();
        let h = Hashes::from_index(&full).unwrap();
        // Change exactly 10 of the 1024 blocks.
        for i in (0..1024).step_by(103).take(10) {
            data[0].1[i * 4096] ^= 1;
        }
        let red = Reduction {
            codecs: Reduction::RAW.codecs,
            base: Some((1, &h)),
        };
        let inc = write_part(&tier, &key(2), meta_v(2, 4096), &regions_of(&data), red).unwrap();
        assert_eq!(inc.stored_bytes(), 10 * 4096);
        assert_eq!(
            inc.regions[0].kind_counts()[block_kind::UNCHANGED as usize],
            1014
        );
        assert_eq!(read_back(&tier, 2, &data).unwrap()[0], data[0].1);
        // A region whose shape changed is stored whole, without reference to the base.
        let grown = vec![(Dtype::Byte, vec![9u8; 5000])];
        let inc = write_part(&tier, &key(3), meta_v(3, 4096), &regions_of(&grown), red).unwrap();
        assert_eq!(
            inc.regions[0].kind_counts()[block_kind::UNCHANGED as usize],
            0
        );
        assert_eq!(read_back(&tier, 3, &grown).unwrap()[0], grown[0].1);
    }

    /// Write a chain of `n` versions (v1 full), returning each version's data.
    fn chain_of(tier: &dyn Tier, n: i64, codecs: Codecs) -> Vec<Vec<(Dtype, Vec<u8>)>> {
        let mut rng = Rng(99);
        let mut data = vec![
            (Dtype::Double, contents(&mut rng, Dtype::Double, 30_000)),
            (Dtype::Int16, contents(&mut rng, Dtype::Int16, 20_000)),
        ];
        let mut out = Vec::new();
        let mut hashes: Option<Hashes> = None;
        for v in 1..=n {
            if v > 1 {
                mutate(&mut rng, &mut data, 4096, 0.1);
            }
            let red = Reduction {
                codecs,
                base: hashes.as_ref().map(|h| (v - 1, h)),
            };
            let ix = write_part(tier, &key(v), meta_v(v, 4096), &regions_of(&data), red).unwrap();
            hashes = Hashes::from_index(&ix);
            out.push(data.clone());
        }
        out
    }

    #[test]
    fn a_damaged_block_in_the_middle_of_a_chain_is_named() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let versions = chain_of(&tier, 5, all_codecs()[2]);
        // Damage the first stored block of v3 that v5 still takes from v3.
        let ix5 = open_chain(&tier, "t", 5, 0, None).unwrap();
        let ix3 = &ix5[2].index;
        let (region, blk) = ix3
            .regions
            .iter()
            .find_map(|r| {
                let r5 = ix5[0].index.regions.iter().find(|e| e.id == r.id)?;
                let r4 = ix5[1].index.regions.iter().find(|e| e.id == r.id)?;
                r.stored_blocks()
                    .find(|b| {
                        r5.blocks[b.index].kind == block_kind::UNCHANGED
                            && r4.blocks[b.index].kind == block_kind::UNCHANGED
                    })
                    .map(|b| (r.id, b))
            })
            .expect("v5 takes some block from v3");
        let path = d.path().join("t").join(key(3));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[blk.offset as usize + blk.len as usize / 2] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        let e = read_back(&tier, 5, &versions[4]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(
            e.msg
                .contains(&format!("block {} of region {region}", blk.index))
                && e.msg.contains("(v3)"),
            "{}",
            e.msg
        );
        // Versions that do not need the damaged block still restore.
        assert_eq!(
            read_back(&tier, 2, &versions[1]).unwrap()[0],
            versions[1][0].1
        );
        // Losing a part in the middle makes the versions above it unreadable, with a reason.
        std::fs::remove_file(d.path().join("t").join(key(2))).unwrap();
        let e = read_back(&tier, 4, &versions[3]).unwrap_err();
        assert!(e.msg.contains("based on v2"), "{}", e.msg);
    }

    #[test]
    fn merging_a_chain_gives_the_same_bytes() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let merged = DirTier::new("global", d.path().join("g"), false).unwrap();
        let versions = chain_of(&tier, 6, all_codecs()[0]);
        for codecs in all_codecs() {
            let chain = open_chain(&tier, "t", 6, 0, None).unwrap();
            let mut w = merged.create(&key(6)).unwrap();
            let mut seen = 0;
            let ix = rewrite(&chain, &mut w, codecs, &mut |done| {
                seen = done;
                true
            })
            .unwrap();
            w.commit().unwrap();
            assert_eq!(ix.base, None);
            assert_eq!(seen, ix.data_bytes());
            let back = read_index(&*merged.open(&key(6)).unwrap()).unwrap();
            assert_eq!(back, ix);
            // Same contents: every block hash equals the chain's.
            for (a, b) in back.regions.iter().zip(&chain[0].index.regions) {
                let ha: Vec<u128> = a.blocks.iter().map(|x| x.hash).collect();
                let hb: Vec<u128> = b.blocks.iter().map(|x| x.hash).collect();
                assert_eq!(ha, hb);
            }
            let got = read_back(&merged, 6, &versions[5]).unwrap();
            let want = read_back(&tier, 6, &versions[5]).unwrap();
            assert_eq!(got, want);
            assert_eq!(got[1], versions[5][1].1);
        }
    }

    #[test]
    fn format_1_parts_still_restore() {
        // A rank file as format 1 wrote it: raw regions, one xxh3-64 per chunk.
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut file = Vec::new();
        file.extend_from_slice(b"CAIRNCKP");
        file.extend_from_slice(&1u32.to_le_bytes());
        file.extend_from_slice(&16u32.to_le_bytes());
        file.extend_from_slice(&data);
        let mut ib = Vec::new();
        ib.extend_from_slice(b"CAIRNIDX");
        ib.extend_from_slice(&1u16.to_le_bytes());
        ib.extend_from_slice(b"t");
        ib.extend_from_slice(&1i64.to_le_bytes());
        ib.extend_from_slice(&0u32.to_le_bytes());
        ib.extend_from_slice(&1u32.to_le_bytes());
        ib.extend_from_slice(&4096u32.to_le_bytes());
        ib.extend_from_slice(&0u64.to_le_bytes());
        ib.extend_from_slice(&1u32.to_le_bytes());
        ib.extend_from_slice(&(-1i32).to_le_bytes());
        ib.extend_from_slice(&[0, 0, 0, 0]);
        ib.extend_from_slice(&10_000u64.to_le_bytes());
        ib.extend_from_slice(&16u64.to_le_bytes());
        ib.extend_from_slice(&10_000u64.to_le_bytes());
        ib.extend_from_slice(&3u32.to_le_bytes());
        for c in data.chunks(4096) {
            ib.extend_from_slice(&checksum(c).to_le_bytes());
        }
        let trailer = Trailer {
            index_offset: file.len() as u64,
            index_len: ib.len() as u64,
            index_sum: checksum(&ib),
            headerless: false,
        };
        file.extend_from_slice(&ib);
        file.extend_from_slice(&trailer.encode());
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        tier.put(&key(1), &file).unwrap();
        let got = read_back(&tier, 1, &[(Dtype::Byte, data.clone())]).unwrap();
        assert_eq!(got[0], data);
        assert_eq!(verify(&*tier.open(&key(1)).unwrap()).unwrap(), 10_000);
        assert!(Hashes::from_index(&read_index(&*tier.open(&key(1)).unwrap()).unwrap()).is_none());
    }
}
