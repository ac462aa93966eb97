//! Writing, reading and verifying one rank's part of a checkpoint (a rank file, see
//! `cairn_format::container`) on any [`Tier`].
//!
//! The writer streams each region from application memory in chunk-sized writes, computing
//! each chunk's checksum just before the chunk is written (while it is still in cache), and
//! appends the index and trailer; small pieces are coalesced so a tiny checkpoint costs a
//! single write. The reader fills regions in place, one chunk at a time, and checks every
//! chunk's checksum.

use crate::error::{Error, ErrorKind, Result};
use cairn_format::{check_header, Dtype};
use cairn_format::{
    checksum, encode_header, RankIndex, RegionEntry, Trailer, HEADER_LEN, TRAILER_LEN,
};
use cairn_tier::{ObjectReader, ObjectWriter, Tier};
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
    pub chunk: u32,
}

/// Write one rank file under `key` and publish it atomically. Returns its index.
pub fn write_part(
    tier: &dyn Tier,
    key: &str,
    meta: PartMeta<'_>,
    regions: &[RegionRef<'_>],
) -> Result<RankIndex> {
    let mut w = tier.create(key)?;
    let index = encode_part(&mut w, meta, regions)?;
    w.commit()?;
    Ok(index)
}

/// The exact length of the rank file `encode_part` writes for these regions.
pub fn part_len(meta: PartMeta<'_>, regions: &[RegionRef<'_>]) -> u64 {
    let data: u64 = regions.iter().map(|r| r.bytes.len() as u64).sum();
    let index: u64 = 42
        + meta.name.len() as u64
        + regions
            .iter()
            .map(|r| 36 + 8 * (r.bytes.len() as u64).div_ceil(meta.chunk as u64))
            .sum::<u64>();
    HEADER_LEN + data + index + TRAILER_LEN
}

/// Stream one rank file into `sink`: header, region data with a checksum per chunk, index,
/// trailer. Returns the index.
pub fn encode_part(
    sink: &mut dyn PartSink,
    meta: PartMeta<'_>,
    regions: &[RegionRef<'_>],
) -> Result<RankIndex> {
    let t0 = Instant::now();
    let mut index = RankIndex::new(
        meta.name,
        meta.version,
        meta.rank,
        meta.world_size,
        meta.chunk,
    );
    let mut out = Coalescing {
        w: sink,
        buf: Vec::with_capacity(COALESCE),
    };
    out.write(&encode_header())?;
    let mut offset = HEADER_LEN;
    for r in regions {
        let mut sums = Vec::with_capacity(r.bytes.len().div_ceil(meta.chunk as usize));
        for c in r.bytes.chunks(meta.chunk as usize) {
            sums.push(checksum(c));
            out.write(c)?;
        }
        index.regions.push(RegionEntry {
            id: r.id,
            dtype: r.dtype,
            count: (r.bytes.len() / r.dtype.size()) as u64,
            offset,
            nbytes: r.bytes.len() as u64,
            chunk_sums: sums,
        });
        offset += r.bytes.len() as u64;
    }
    index.write_ns = t0.elapsed().as_nanos() as u64;
    let ib = index.encode();
    let trailer = Trailer {
        index_offset: offset,
        index_len: ib.len() as u64,
        index_sum: checksum(&ib),
    };
    out.write(&ib)?;
    out.write(&trailer.encode())?;
    out.flush()?;
    Ok(index)
}

/// Read and check the header, trailer and index of a rank file.
pub fn read_index(r: &dyn ObjectReader) -> Result<RankIndex> {
    let len = r.len();
    if len < HEADER_LEN + TRAILER_LEN {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!("file of {len} bytes is too short"),
        ));
    }
    let mut h = [0u8; HEADER_LEN as usize];
    r.read_exact_at(&mut h, 0)?;
    check_header(&h)?;
    let mut t = [0u8; TRAILER_LEN as usize];
    r.read_exact_at(&mut t, len - TRAILER_LEN)?;
    let tr = Trailer::decode(&t, len)?;
    let mut ib = vec![0u8; tr.index_len as usize];
    r.read_exact_at(&mut ib, tr.index_offset)?;
    if checksum(&ib) != tr.index_sum {
        return Err(Error::new(ErrorKind::Corrupt, "index fails its checksum"));
    }
    let index = RankIndex::decode(&ib)?;
    index.check_extents(tr.index_offset)?;
    Ok(index)
}

/// Check that a stored part has exactly the regions now protected, with the same types and
/// sizes. Errors name the region and both shapes.
pub fn check_fits(index: &RankIndex, regions: &[RegionMut<'_>]) -> Result<()> {
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
        .find(|e| !regions.iter().any(|r| r.id == e.id))
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

fn read_chunks(
    r: &dyn ObjectReader,
    index: &RankIndex,
    e: &RegionEntry,
    dest: &mut [u8],
) -> Result<()> {
    let chunk = index.chunk_size as usize;
    for (i, (piece, want)) in dest.chunks_mut(chunk).zip(&e.chunk_sums).enumerate() {
        r.read_exact_at(piece, e.offset + (i * chunk) as u64)?;
        if checksum(piece) != *want {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!("chunk {i} of region {} fails its checksum", e.id),
            ));
        }
    }
    Ok(())
}

/// Fill `regions` from a part whose index was read with [`read_index`] and checked with
/// [`check_fits`], verifying every chunk.
pub fn restore(
    r: &dyn ObjectReader,
    index: &RankIndex,
    regions: &mut [RegionMut<'_>],
) -> Result<()> {
    for reg in regions.iter_mut() {
        let e = index
            .regions
            .iter()
            .find(|e| e.id == reg.id)
            .expect("check_fits ran first");
        read_chunks(r, index, e, reg.bytes)?;
    }
    Ok(())
}

/// Re-check every checksum of a part. Returns the number of data bytes verified.
pub fn verify(r: &dyn ObjectReader) -> Result<u64> {
    let index = read_index(r)?;
    let mut scratch = vec![0u8; index.chunk_size as usize];
    for e in &index.regions {
        for (i, want) in e.chunk_sums.iter().enumerate() {
            let (s, t) = e.chunk_range(i, index.chunk_size);
            let piece = &mut scratch[..(t - s) as usize];
            r.read_exact_at(piece, e.offset + s)?;
            if checksum(piece) != *want {
                return Err(Error::new(
                    ErrorKind::Corrupt,
                    format!("chunk {i} of region {} fails its checksum", e.id),
                ));
            }
        }
    }
    Ok(index.data_bytes())
}

/// A rank file held in memory (received from a partner or rebuilt), readable like a stored one.
pub struct MemObject(pub Vec<u8>);

impl ObjectReader for MemObject {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> cairn_tier::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|e| *e <= self.0.len() as u64);
        match end {
            Some(end) => {
                buf.copy_from_slice(&self.0[offset as usize..end as usize]);
                Ok(())
            }
            None => Err(cairn_tier::TierError {
                tier: "memory".into(),
                what: "short object",
                path: std::path::PathBuf::new(),
                source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            }),
        }
    }
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

    fn meta() -> PartMeta<'static> {
        PartMeta {
            name: "t",
            version: 1,
            rank: 0,
            world_size: 1,
            chunk: 4096,
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
        write_part(&tier, "k", meta(), &regs).unwrap();
        let r = tier.open("k").unwrap();
        let ix = read_index(&*r).unwrap();
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
            check_fits(&ix, &out).unwrap();
            restore(&*r, &ix, &mut out).unwrap();
        }
        assert_eq!((a2, b2), (a.clone(), b.clone()));
        assert_eq!(verify(&*r).unwrap(), 10_024);

        let path = d.path().join("t/k");
        let good = std::fs::read(&path).unwrap();
        for pos in (0..good.len()).step_by(97).chain([good.len() - 1]) {
            let mut bad = good.clone();
            bad[pos] ^= 0x40;
            std::fs::write(&path, &bad).unwrap();
            let r = tier.open("k").unwrap();
            assert!(
                verify(&*r).is_err(),
                "flip at byte {pos} of {} not detected",
                good.len()
            );
        }
    }

    #[test]
    fn part_len_is_exact() {
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
            write_part(&tier, "k", meta(), &regs).unwrap();
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
            "k",
            meta(),
            &[RegionRef::new(0, &step), RegionRef::new(1, &field)],
        )
        .unwrap();
        let r = tier.open("k").unwrap();
        let ix = read_index(&*r).unwrap();
        assert_eq!(
            (ix.regions[1].dtype, ix.regions[1].count),
            (Dtype::Double, 5000)
        );
        let (mut f2, mut s2) = (vec![0f64; 5000], [0i64]);
        let mut out = [RegionMut::new(0, &mut s2), RegionMut::new(1, &mut f2)];
        restore(&*r, &ix, &mut out).unwrap();
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
}
