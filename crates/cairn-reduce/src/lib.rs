//! Checkpoint size reduction, one block at a time: pure functions, no I/O.
//!
//! A protected region is cut into blocks. For each block the engine asks:
//! - is it all zeros? Then only a [`BlockKind::Zero`] marker is stored ([`is_zero`]);
//! - did it change since the last checkpoint? Its 128-bit [`block_hash`] (xxh3-128) is
//!   compared with the one kept in memory, and an incremental checkpoint stores only the
//!   blocks whose hash differs;
//! - how is it stored? [`encode_block`] optionally byte-shuffles it by element size (so the
//!   exponent bytes of float64 values sit together and compress) and compresses it with LZ4
//!   or Zstandard (Zstandard one byte plane at a time), and stores it raw whenever compression
//!   would not make it smaller, so a block never costs more than its raw size plus the
//!   caller's per-block record. A shuffled block with many zero words is also compressed
//!   unshuffled, and the smaller of the two is kept.
//!
//! The [`BlockKind`] of every block is recorded in the checkpoint, with its stored length, so
//! any build can decode any block with [`decode_block`].
//!
//! A loop over many blocks should hold an [`Encoder`] or a [`Decoder`]: they write and read
//! exactly what [`encode_block`] and [`decode_block`] do, but keep their buffers and their
//! Zstandard context from one block to the next instead of making new ones for every block.
//!
//! ```
//! use cairn_reduce::{decode_block, encode_block, Codec, Settings};
//! let values: Vec<f64> = (0..4096).map(|i| 300.0 + (i as f64 * 0.001).sin()).collect();
//! let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
//! let s = Settings { codec: Codec::Lz4, level: 0, shuffle: true };
//! let mut stored = Vec::new();
//! let kind = encode_block(&bytes, 8, &s, &mut stored);
//! assert!(stored.len() < bytes.len());
//! let mut back = vec![0u8; bytes.len()];
//! decode_block(kind, &stored, 8, &mut back).unwrap();
//! assert_eq!(back, bytes);
//! ```

#![forbid(unsafe_code)]

mod shuffle;

use shuffle::{shuffle_slice, unshuffle_slice};
use xxhash_rust::xxh3::xxh3_128;

/// A compression codec for stored blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn parse(s: &str) -> Result<Codec, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Codec::None),
            "lz4" => Ok(Codec::Lz4),
            "zstd" => Ok(Codec::Zstd),
            other => Err(format!(
                "unknown codec {other:?} (expected none, lz4 or zstd)"
            )),
        }
    }
}

/// How blocks are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub codec: Codec,
    /// Zstandard level (1..=22; 0 means its default); ignored by the other codecs.
    pub level: i32,
    /// Byte-shuffle blocks of multi-byte elements before compressing.
    pub shuffle: bool,
}

/// How one block is stored. The codes are part of the checkpoint format and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    /// All zeros: nothing stored.
    Zero = 0,
    /// The bytes as they are.
    Raw = 1,
    Lz4 = 2,
    Zstd = 3,
    /// Byte-shuffled by element size, then LZ4.
    Lz4Shuffled = 4,
    /// Byte-shuffled by element size, then Zstandard.
    ZstdShuffled = 5,
    // 6 is the format's "unchanged since the base checkpoint", which is not a block encoding.
    /// Byte-shuffled by element size, then every byte plane compressed as its own LZ4 block
    /// (see [`encode_block`] for the layout).
    Lz4Split = 7,
    /// Byte-shuffled by element size, then every byte plane compressed as its own Zstandard
    /// frame, laid out as [`BlockKind::Lz4Split`].
    ZstdSplit = 8,
}

impl BlockKind {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(c: u8) -> Option<BlockKind> {
        Some(match c {
            0 => BlockKind::Zero,
            1 => BlockKind::Raw,
            2 => BlockKind::Lz4,
            3 => BlockKind::Zstd,
            4 => BlockKind::Lz4Shuffled,
            5 => BlockKind::ZstdShuffled,
            7 => BlockKind::Lz4Split,
            8 => BlockKind::ZstdSplit,
            _ => return None,
        })
    }

    /// Stored shuffled: decoded into a buffer, then unshuffled into place.
    fn shuffled(self) -> bool {
        matches!(
            self,
            BlockKind::Lz4Shuffled
                | BlockKind::ZstdShuffled
                | BlockKind::Lz4Split
                | BlockKind::ZstdSplit
        )
    }
}

/// Why a stored block cannot be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("a {kind:?} block decodes to {got} bytes, expected {want}")]
    Length {
        kind: BlockKind,
        got: usize,
        want: usize,
    },
    #[error("a {0:?} block does not decompress: {1}")]
    Codec(BlockKind, String),
}

/// Whether every byte of `b` is zero.
pub fn is_zero(b: &[u8]) -> bool {
    let (words, rest) = b.split_at(b.len() / 8 * 8);
    words
        .chunks_exact(8)
        .all(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) == 0)
        && rest.iter().all(|&x| x == 0)
}

/// The 128-bit hash that identifies a block's content between checkpoints.
pub fn block_hash(b: &[u8]) -> u128 {
    xxh3_128(b)
}

/// Byte-shuffle `src` by `elem` bytes per element into `dst`: all first bytes, then all second
/// bytes, and so on. A trailing partial element is copied as it is. `dst` is resized to the
/// length of `src` (its capacity is reused).
///
/// With `n = src.len() / elem`, shuffled byte `j * n + i` is byte `j` of element `i`; an
/// element size of 0 or 1 copies the bytes. Element sizes that are even (2, 4 and 8 above
/// all) go 8 elements at a time through word-sized byte transposes.
pub fn shuffle(src: &[u8], elem: usize, dst: &mut Vec<u8>) {
    // Every byte is overwritten: only bytes the vector did not have yet are zeroed first.
    dst.resize(src.len(), 0);
    shuffle_slice(src, elem, dst);
}

/// [`shuffle`] into a slice, which must have the length of `src`.
pub fn shuffle_into(src: &[u8], elem: usize, dst: &mut [u8]) {
    shuffle_slice(src, elem, dst);
}

/// Undo [`shuffle`]: `dst` must have the length of `src`.
pub fn unshuffle(src: &[u8], elem: usize, dst: &mut [u8]) {
    unshuffle_slice(src, elem, dst);
}

/// Make `buf` at least `len` bytes long. When it must grow, its old bytes are dropped rather
/// than copied; a buffer that is long enough is left as it is (no zero-filling per block).
fn at_least(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len {
        *buf = vec![0; len];
    }
    &mut buf[..len]
}

/// Encodes blocks as [`encode_block`] does, byte for byte, keeping its scratch buffers and
/// its Zstandard context from one block to the next. A loop over many blocks (the engine's,
/// a benchmark's) holds one per thread and calls [`Encoder::encode`] for every block.
///
/// Nothing of one block is carried into the next one's output: every block is an independent
/// LZ4 block or Zstandard frame, exactly as [`encode_block`] writes it. An encoder keeps
/// about 2.1 x the largest block it has seen, plus a Zstandard context once it has compressed
/// with Zstandard (its size depends on the level and the block size).
pub struct Encoder {
    settings: Settings,
    /// The shuffled block (grown to the largest block seen, never zero-filled again).
    shuffled: Vec<u8>,
    /// LZ4's output, at least its maximum output size for the largest block seen.
    lz4: Vec<u8>,
    /// Made at the first Zstandard block; a context that could not be made is tried again.
    zstd: Option<zstd::bulk::Compressor<'static>>,
    /// Made for one block by [`encode_block`]: LZ4 writes into `out` rather than into a buffer
    /// of its own that would be allocated for the one block.
    one_shot: bool,
    /// Shuffled blocks of elements up to [`MAX_SPLIT_ELEM`] bytes are stored as byte planes
    /// compressed one by one (kinds 7 and 8) rather than compressed whole (kinds 4 and 5).
    /// See [`Encoder::split_planes`].
    split: bool,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// An encoder for `settings`. Cheap: buffers and contexts are made by the first block.
    pub fn new(settings: Settings) -> Encoder {
        Encoder {
            settings,
            shuffled: Vec::new(),
            lz4: Vec::new(),
            zstd: None,
            one_shot: false,
            split: settings.codec == Codec::Zstd,
        }
    }

    /// The same encoder, storing shuffled blocks (of elements up to [`MAX_SPLIT_ELEM`] bytes)
    /// as separately compressed byte planes ([`BlockKind::Lz4Split`],
    /// [`BlockKind::ZstdSplit`]) with `true`, or compressing the shuffled block whole
    /// ([`BlockKind::Lz4Shuffled`], [`BlockKind::ZstdShuffled`]) with `false`. Decoders read
    /// all four.
    ///
    /// By default Zstandard splits and LZ4 does not: on the float data of
    /// `cairn-bench-reduce` (64 KiB blocks), Zstandard stores about 5% less split (each plane
    /// gets its own entropy tables) at the same speed, while LZ4 gains under 1% on some data,
    /// loses as much on other data and is slower.
    pub fn split_planes(mut self, split: bool) -> Encoder {
        self.split = split;
        self
    }

    /// The settings this encoder applies.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// Append the stored form of `block` (elements of `elem` bytes) to `out` and say how it is
    /// stored: the same bytes and kind as [`encode_block`] with this encoder's settings.
    pub fn encode(&mut self, block: &[u8], elem: usize, out: &mut Vec<u8>) -> BlockKind {
        if is_zero(block) {
            return BlockKind::Zero;
        }
        let s = self.settings;
        if s.codec == Codec::None || block.is_empty() {
            out.extend_from_slice(block);
            return BlockKind::Raw;
        }
        let form = if !(s.shuffle && elem > 1 && block.len() >= 2 * elem) {
            Form::Plain
        } else if self.split && splits(block.len(), elem) {
            Form::Split
        } else {
            Form::Shuffled
        };
        let start = out.len();
        let mut kind = self.encode_as(block, elem, form, out);
        if form != Form::Plain && zero_heavy(block) {
            // Long zero runs can compress better as they are than shuffled: try both.
            let mid = out.len();
            if let Some(plain) = self.encode_as(block, elem, Form::Plain, out) {
                let first = if kind.is_some() {
                    mid - start
                } else {
                    block.len()
                };
                if out.len() - mid < first {
                    out.copy_within(mid.., start);
                    out.truncate(out.len() - (mid - start));
                    kind = Some(plain);
                } else {
                    out.truncate(mid);
                }
            }
        }
        match kind {
            Some(kind) => kind,
            None => {
                out.extend_from_slice(block);
                BlockKind::Raw
            }
        }
    }

    /// Append `block` compressed in the given form to `out` and say its kind, if that is
    /// smaller than the block; otherwise leave `out` as it was and say `None`.
    fn encode_as(
        &mut self,
        block: &[u8],
        elem: usize,
        form: Form,
        out: &mut Vec<u8>,
    ) -> Option<BlockKind> {
        let s = self.settings;
        let input: &[u8] = if form == Form::Plain {
            block
        } else {
            let buf = at_least(&mut self.shuffled, block.len());
            shuffle_slice(block, elem, buf);
            buf
        };
        let start = out.len();
        let stored = match (s.codec, form) {
            (_, Form::Split) => encode_planes(
                input,
                elem,
                s.codec,
                s.level,
                &mut self.lz4,
                &mut self.zstd,
                out,
            ),
            (Codec::Lz4, _) if self.one_shot => {
                // No buffer to keep: compress into room at the end of `out` (zero-filled, as
                // safe code must), which the caller's `out` usually has the capacity for.
                out.resize(start + lz4_bound(input.len()), 0);
                match lz4_flex::block::compress_into(input, &mut out[start..]) {
                    Ok(n) if n < block.len() => {
                        out.truncate(start + n);
                        true
                    }
                    _ => false,
                }
            }
            (Codec::Lz4, _) => {
                let buf = at_least(&mut self.lz4, lz4_bound(input.len()));
                match lz4_flex::block::compress_into(input, buf) {
                    // Copied only when it is kept: it must be smaller than the block.
                    Ok(n) if n < block.len() => {
                        out.extend_from_slice(&buf[..n]);
                        true
                    }
                    _ => false,
                }
            }
            (Codec::Zstd, _) => {
                if self.zstd.is_none() {
                    self.zstd = zstd::bulk::Compressor::new(s.level).ok();
                }
                match &mut self.zstd {
                    Some(z) => {
                        // Straight into `out` after its current bytes: room for the worst case
                        // is reserved (not zeroed), and the frame is written where it stays.
                        out.reserve(zstd::zstd_safe::compress_bound(input.len()));
                        let mut at = std::io::Cursor::new(&mut *out);
                        at.set_position(start as u64);
                        matches!(z.compress_to_buffer(input, &mut at), Ok(n) if n < block.len())
                    }
                    None => false,
                }
            }
            (Codec::None, _) => unreachable!("not compressed"),
        };
        if !stored {
            out.truncate(start);
            return None;
        }
        Some(match (s.codec, form) {
            (Codec::Lz4, Form::Plain) => BlockKind::Lz4,
            (Codec::Lz4, Form::Shuffled) => BlockKind::Lz4Shuffled,
            (Codec::Lz4, Form::Split) => BlockKind::Lz4Split,
            (_, Form::Plain) => BlockKind::Zstd,
            (_, Form::Shuffled) => BlockKind::ZstdShuffled,
            (_, Form::Split) => BlockKind::ZstdSplit,
        })
    }
}

/// How a block is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// As it is (kinds 2 and 3).
    Plain,
    /// Shuffled, then compressed whole (kinds 4 and 5).
    Shuffled,
    /// Shuffled, then each byte plane compressed on its own (kinds 7 and 8).
    Split,
}

/// A block of which at least this share of its 8-byte words are zero is compressed both
/// shuffled and as it is, and stored the smaller way: long runs of zeros can compress better
/// unshuffled (one run) than shuffled (a run in every byte plane).
const ZERO_HEAVY: (usize, usize) = (1, 8);

/// Whether a block is [`ZERO_HEAVY`].
fn zero_heavy(block: &[u8]) -> bool {
    let words = block.chunks_exact(8);
    let total = words.len();
    let zeros = words
        .filter(|w| u64::from_ne_bytes((*w).try_into().expect("8 bytes")) == 0)
        .count();
    total > 0 && zeros * ZERO_HEAVY.1 >= total * ZERO_HEAVY.0
}

/// The largest element size whose shuffled blocks are stored as separately compressed byte
/// planes ([`BlockKind::Lz4Split`], [`BlockKind::ZstdSplit`]); blocks of larger elements are
/// compressed whole after the shuffle (kinds 4 and 5), as their planes would be short.
pub const MAX_SPLIT_ELEM: usize = 16;

/// Whether a shuffled block of `len` bytes and `elem`-byte elements is stored as planes.
fn splits(len: usize, elem: usize) -> bool {
    elem <= MAX_SPLIT_ELEM && u32::try_from(len / elem).is_ok()
}

/// LZ4's worst-case output for `len` bytes of input.
fn lz4_bound(len: usize) -> usize {
    lz4_flex::block::get_maximum_output_size(len)
}

/// Append the byte planes of the shuffled block `sh` to `out`, each compressed on its own
/// (`level` for Zstandard), and say whether the whole is smaller than the block: when it is
/// not, what was appended is to be dropped (it may stop early).
///
/// With `n = sh.len() / elem`, plane `j` is `sh[j n .. (j + 1) n]`. For each plane in order:
/// its stored length `c` (u32 little-endian), then `c` bytes: the plane compressed (an LZ4
/// block or a Zstandard frame) if that is shorter than `n` bytes, else the plane itself
/// (`c = n`). Then the `sh.len() % elem` trailing bytes as they are.
fn encode_planes(
    sh: &[u8],
    elem: usize,
    codec: Codec,
    level: i32,
    lz4: &mut Vec<u8>,
    zstd: &mut Option<zstd::bulk::Compressor<'static>>,
    out: &mut Vec<u8>,
) -> bool {
    let len = sh.len();
    let n = len / elem;
    let (body, tail) = sh.split_at(n * elem);
    let start = out.len();
    if codec == Codec::Zstd && zstd.is_none() {
        *zstd = zstd::bulk::Compressor::new(level).ok();
    }
    for plane in body.chunks_exact(n) {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        let packed = match codec {
            Codec::Lz4 => {
                let buf = at_least(lz4, lz4_bound(n));
                match lz4_flex::block::compress_into(plane, buf) {
                    Ok(c) if c < n => {
                        out.extend_from_slice(&buf[..c]);
                        Some(c)
                    }
                    _ => None,
                }
            }
            Codec::Zstd => match zstd {
                Some(z) => {
                    out.reserve(zstd::zstd_safe::compress_bound(n));
                    let mut to = std::io::Cursor::new(&mut *out);
                    to.set_position((at + 4) as u64);
                    match z.compress_to_buffer(plane, &mut to) {
                        Ok(c) if c < n => Some(c),
                        _ => None,
                    }
                }
                None => return false,
            },
            Codec::None => unreachable!("not compressed"),
        };
        let c = match packed {
            Some(c) => c,
            None => {
                out.truncate(at + 4);
                out.extend_from_slice(plane);
                n
            }
        };
        out[at..at + 4].copy_from_slice(&(c as u32).to_le_bytes());
        if out.len() - start >= len {
            return false;
        }
    }
    out.extend_from_slice(tail);
    out.len() - start < len
}

/// Read the byte planes [`encode_planes`] wrote into `target` (the shuffled block), checking
/// every stored length against the bytes there are and against the plane's length.
fn decode_planes(
    kind: BlockKind,
    stored: &[u8],
    elem: usize,
    target: &mut [u8],
    zstd: &mut Option<zstd::bulk::Decompressor<'static>>,
) -> Result<(), DecodeError> {
    let bad = |why: String| DecodeError::Codec(kind, why);
    if elem == 0 {
        return Err(bad("element size 0".into()));
    }
    let len = target.len();
    let n = len / elem;
    let (body, tail) = target.split_at_mut(n * elem);
    let mut rest = stored;
    for j in 0..elem {
        let plane = &mut body[j * n..(j + 1) * n];
        let Some((head, after)) = rest.split_first_chunk::<4>() else {
            return Err(bad(format!("plane {j}: its length is cut off")));
        };
        let c = u32::from_le_bytes(*head) as usize;
        if c > n {
            return Err(bad(format!(
                "plane {j}: {c} stored bytes for {n} raw bytes"
            )));
        }
        if c > after.len() {
            return Err(bad(format!(
                "plane {j}: {c} stored bytes, only {} left",
                after.len()
            )));
        }
        let (packed, after) = after.split_at(c);
        rest = after;
        if c == n {
            plane.copy_from_slice(packed);
            continue;
        }
        let got = match kind {
            BlockKind::Lz4Split => lz4_flex::block::decompress_into(packed, plane)
                .map_err(|e| bad(format!("plane {j}: {e}")))?,
            _ => {
                if zstd.is_none() {
                    let d = zstd::bulk::Decompressor::new().map_err(|e| bad(e.to_string()))?;
                    *zstd = Some(d);
                }
                let z = zstd.as_mut().expect("made above");
                z.decompress_to_buffer(packed, plane)
                    .map_err(|e| bad(format!("plane {j}: {e}")))?
            }
        };
        if got != n {
            return Err(bad(format!(
                "plane {j} decodes to {got} bytes, expected {n}"
            )));
        }
    }
    if rest.len() != tail.len() {
        return Err(bad(format!(
            "{} trailing bytes after the planes, expected {}",
            rest.len(),
            tail.len()
        )));
    }
    tail.copy_from_slice(rest);
    Ok(())
}

/// Decodes blocks as [`decode_block`] does, keeping its scratch buffer and its Zstandard
/// context from one block to the next: one per thread for a loop over many blocks. It keeps
/// the largest shuffled block it has seen, plus a Zstandard context once it has needed one.
#[derive(Default)]
pub struct Decoder {
    /// The decompressed, still shuffled block (grown to the largest block seen).
    shuffled: Vec<u8>,
    /// Made at the first Zstandard block.
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder").finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder. Cheap: its buffer and context are made by the first block that needs them.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decode a block stored as `kind` into `out`, which must have the block's raw length:
    /// the same result as [`decode_block`].
    pub fn decode(
        &mut self,
        kind: BlockKind,
        stored: &[u8],
        elem: usize,
        out: &mut [u8],
    ) -> Result<(), DecodeError> {
        let want = out.len();
        let length = |got: usize| DecodeError::Length { kind, got, want };
        let target: &mut [u8] = if kind.shuffled() {
            at_least(&mut self.shuffled, want)
        } else {
            &mut *out
        };
        match kind {
            BlockKind::Zero => {
                if !stored.is_empty() {
                    return Err(length(stored.len()));
                }
                target.fill(0);
            }
            BlockKind::Raw => {
                if stored.len() != want {
                    return Err(length(stored.len()));
                }
                target.copy_from_slice(stored);
            }
            BlockKind::Lz4Split | BlockKind::ZstdSplit => {
                decode_planes(kind, stored, elem, target, &mut self.zstd)?;
            }
            BlockKind::Lz4 | BlockKind::Lz4Shuffled => {
                let n = lz4_flex::block::decompress_into(stored, target)
                    .map_err(|e| DecodeError::Codec(kind, e.to_string()))?;
                if n != want {
                    return Err(length(n));
                }
            }
            BlockKind::Zstd | BlockKind::ZstdShuffled => {
                if self.zstd.is_none() {
                    let d = zstd::bulk::Decompressor::new()
                        .map_err(|e| DecodeError::Codec(kind, e.to_string()))?;
                    self.zstd = Some(d);
                }
                let z = self.zstd.as_mut().expect("made above");
                let n = z
                    .decompress_to_buffer(stored, target)
                    .map_err(|e| DecodeError::Codec(kind, e.to_string()))?;
                if n != want {
                    return Err(length(n));
                }
            }
        }
        if kind.shuffled() {
            unshuffle_slice(&self.shuffled[..want], elem, out);
        }
        Ok(())
    }
}

/// Append the stored form of `block` (elements of `elem` bytes) to `out` and say how it is
/// stored. Zero blocks append nothing; a block that does not compress is stored raw.
///
/// With shuffling on, a block of at least two elements of 2 to [`MAX_SPLIT_ELEM`] bytes is
/// stored, with Zstandard, as [`BlockKind::ZstdSplit`]; with LZ4, as
/// [`BlockKind::Lz4Shuffled`] (an [`Encoder`] can be told otherwise: [`Encoder::split_planes`]).
/// The split kinds store, with `n = len / elem`, every byte plane `j` of the shuffled block
/// (its bytes `j n .. (j + 1) n`) in order as a u32 little-endian length `c` and `c` bytes:
/// the plane compressed on its own (an LZ4 block, a Zstandard frame) when that is shorter than
/// `n`, else the plane as it is (`c = n`); then the `len % elem` trailing bytes. A block of
/// which at least an eighth of the 8-byte words are zero is also compressed unshuffled
/// ([`BlockKind::Lz4`], [`BlockKind::Zstd`]), and stored that way if it is smaller.
///
/// This makes a new [`Encoder`] (buffers, Zstandard context) for the one block; a loop over
/// many blocks should keep one [`Encoder`] instead, which writes the same bytes.
pub fn encode_block(block: &[u8], elem: usize, s: &Settings, out: &mut Vec<u8>) -> BlockKind {
    let mut one = Encoder::new(*s);
    one.one_shot = true;
    one.encode(block, elem, out)
}

/// Decode a block stored as `kind` into `out`, which must have the block's raw length.
///
/// This makes a new [`Decoder`] for the one block; a loop over many blocks should keep one
/// [`Decoder`] instead.
pub fn decode_block(
    kind: BlockKind,
    stored: &[u8],
    elem: usize,
    out: &mut [u8],
) -> Result<(), DecodeError> {
    Decoder::new().decode(kind, stored, elem, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    const ALL: [Settings; 5] = [
        Settings {
            codec: Codec::None,
            level: 0,
            shuffle: false,
        },
        Settings {
            codec: Codec::Lz4,
            level: 0,
            shuffle: false,
        },
        Settings {
            codec: Codec::Lz4,
            level: 0,
            shuffle: true,
        },
        Settings {
            codec: Codec::Zstd,
            level: 1,
            shuffle: false,
        },
        Settings {
            codec: Codec::Zstd,
            level: 3,
            shuffle: true,
        },
    ];

    /// Smooth doubles with stretches of 0.0 (a third of the elements), as around MG's blobs.
    fn zero_stretches(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| {
                let e = i / 8;
                let v = if (e / 300) % 3 == 1 {
                    0.0
                } else {
                    1e-3 * (e as f64 * 0.02).cos()
                };
                v.to_le_bytes()[i % 8]
            })
            .collect()
    }

    /// Data of one of several shapes: random, smooth doubles, small integers, constant, zero,
    /// smooth doubles with zero stretches.
    fn sample(rng: &mut Rng, len: usize) -> Vec<u8> {
        match rng.below(6) {
            0 => (0..len).map(|_| rng.next() as u8).collect(),
            1 => (0..len)
                .map(|i| ((i / 8) as f64 * 0.01).sin().to_le_bytes()[i % 8])
                .collect(),
            2 => (0..len)
                .map(|i| if i % 4 == 0 { (i % 7) as u8 } else { 0 })
                .collect(),
            3 => vec![0xA5; len],
            4 => vec![0; len],
            _ => zero_stretches(len),
        }
    }

    #[test]
    fn every_block_round_trips_and_never_grows() {
        let mut rng = Rng(7);
        for case in 0..600 {
            let len = match case % 4 {
                0 => rng.below(64) as usize,
                1 => rng.below(70_000) as usize,
                _ => 8192 * 8 + rng.below(9) as usize,
            };
            let elem = [1usize, 2, 4, 8][rng.below(4) as usize];
            let data = sample(&mut rng, len);
            for s in ALL {
                let mut stored = vec![0xEE; 3];
                let kind = encode_block(&data, elem, &s, &mut stored);
                let body = &stored[3..];
                assert!(body.len() <= data.len(), "case {case} {s:?}: grew");
                if is_zero(&data) {
                    assert_eq!(kind, BlockKind::Zero);
                }
                let mut back = vec![0x11; data.len()];
                decode_block(kind, body, elem, &mut back)
                    .unwrap_or_else(|e| panic!("case {case} {s:?} {kind:?}: {e}"));
                assert_eq!(
                    back, data,
                    "case {case} {s:?} {kind:?}, elem {elem}, len {len}"
                );
                assert_eq!(BlockKind::from_code(kind.code()), Some(kind));
            }
        }
    }

    #[test]
    fn shuffle_round_trips_and_helps_doubles() {
        let mut rng = Rng(3);
        for len in [0usize, 1, 7, 8, 9, 63, 64, 1000, 4099] {
            for elem in [1usize, 2, 4, 8, 16] {
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let mut sh = Vec::new();
                shuffle(&data, elem, &mut sh);
                let mut back = vec![0u8; len];
                unshuffle(&sh, elem, &mut back);
                assert_eq!(back, data, "len {len} elem {elem}");
            }
        }
        // A temperature-like field: the shuffled form must compress better.
        let field: Vec<u8> = (0..8192)
            .flat_map(|i| (290.0 + (i as f64 * 0.003).sin() * 5.0).to_le_bytes())
            .collect();
        let size = |shuffle| {
            let mut out = Vec::new();
            let s = Settings {
                codec: Codec::Lz4,
                level: 0,
                shuffle,
            };
            encode_block(&field, 8, &s, &mut out);
            out.len()
        };
        assert!(
            size(true) < size(false),
            "{} vs {}",
            size(true),
            size(false)
        );
    }

    #[test]
    fn damaged_blocks_are_errors_not_garbage() {
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8 / 3).collect();
        for s in &ALL[1..] {
            let mut stored = Vec::new();
            let kind = encode_block(&data, 4, s, &mut stored);
            assert_ne!(kind, BlockKind::Raw, "{s:?} should compress this");
            let mut back = vec![0u8; data.len()];
            let short = decode_block(kind, &stored[..stored.len() / 2], 4, &mut back);
            assert!(short.is_err(), "{s:?}: a truncated block decoded");
            let mut wrong = vec![0u8; data.len() + 1];
            assert!(decode_block(kind, &stored, 4, &mut wrong).is_err());
        }
        let mut out = vec![0u8; 4];
        assert!(decode_block(BlockKind::Raw, &[1, 2, 3], 1, &mut out).is_err());
        assert!(decode_block(BlockKind::Zero, &[1], 1, &mut out).is_err());
        assert_eq!(BlockKind::from_code(6), None);
    }

    #[test]
    fn hashes_tell_blocks_apart() {
        let a = vec![1u8; 65536];
        let mut b = a.clone();
        b[40_000] ^= 1;
        assert_ne!(block_hash(&a), block_hash(&b));
        assert_eq!(block_hash(&a), block_hash(&a.clone()));
        assert!(is_zero(&[0u8; 13]) && !is_zero(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]));
        assert!(is_zero(&[]));
    }

    /// The shuffle as docs/format.md defines it, one byte at a time.
    fn reference_shuffle(src: &[u8], elem: usize) -> Vec<u8> {
        let mut dst = src.to_vec();
        let n = if elem > 1 { src.len() / elem } else { 0 };
        for i in 0..n {
            for j in 0..elem {
                dst[j * n + i] = src[i * elem + j];
            }
        }
        dst
    }

    fn reference_unshuffle(src: &[u8], elem: usize) -> Vec<u8> {
        let mut dst = src.to_vec();
        let n = if elem > 1 { src.len() / elem } else { 0 };
        for i in 0..n {
            for j in 0..elem {
                dst[i * elem + j] = src[j * n + i];
            }
        }
        dst
    }

    /// One codec's output for `input`, with a fresh Zstandard context.
    fn reference_compress(input: &[u8], s: &Settings) -> Vec<u8> {
        match s.codec {
            Codec::Lz4 => {
                let mut c = vec![0u8; lz4_flex::block::get_maximum_output_size(input.len())];
                let n = lz4_flex::block::compress_into(input, &mut c).unwrap();
                c.truncate(n);
                c
            }
            Codec::Zstd => zstd::bulk::compress(input, s.level).unwrap(),
            Codec::None => unreachable!(),
        }
    }

    /// The split layout of docs/format.md, written out plainly.
    fn reference_planes(sh: &[u8], elem: usize, s: &Settings) -> Vec<u8> {
        let n = sh.len() / elem;
        let mut out = Vec::new();
        for j in 0..elem {
            let plane = &sh[j * n..(j + 1) * n];
            let c = reference_compress(plane, s);
            let body = if c.len() < n { &c[..] } else { plane };
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(body);
        }
        out.extend_from_slice(&sh[n * elem..]);
        out
    }

    /// What an encoder writes, written out plainly: byte-loop shuffle, a fresh Zstandard
    /// context per compression, every candidate compressed in full. The stored bytes are the
    /// checkpoint format, so the encoder must match this exactly; `split` says how shuffled
    /// blocks are stored (see `Encoder::split_planes`).
    fn reference_encode_with(
        block: &[u8],
        elem: usize,
        s: &Settings,
        split: bool,
        out: &mut Vec<u8>,
    ) -> BlockKind {
        if is_zero(block) {
            return BlockKind::Zero;
        }
        if s.codec == Codec::None || block.is_empty() {
            out.extend_from_slice(block);
            return BlockKind::Raw;
        }
        let lz4 = s.codec == Codec::Lz4;
        let plain = || {
            let kind = [BlockKind::Zstd, BlockKind::Lz4][lz4 as usize];
            (reference_compress(block, s), kind)
        };
        let mut best = Some(plain());
        if s.shuffle && elem > 1 && block.len() >= 2 * elem {
            let sh = reference_shuffle(block, elem);
            best = Some(if split && elem <= 16 {
                let kind = [BlockKind::ZstdSplit, BlockKind::Lz4Split][lz4 as usize];
                (reference_planes(&sh, elem, s), kind)
            } else {
                let kind = [BlockKind::ZstdShuffled, BlockKind::Lz4Shuffled][lz4 as usize];
                (reference_compress(&sh, s), kind)
            });
            let words = block.len() / 8;
            let zeros = (0..words)
                .filter(|w| block[w * 8..w * 8 + 8] == [0; 8])
                .count();
            let shuffled_fits = best.as_ref().is_some_and(|b| b.0.len() < block.len());
            if words > 0 && zeros * 8 >= words {
                let p = plain();
                if p.0.len() < block.len()
                    && (!shuffled_fits || p.0.len() < best.as_ref().unwrap().0.len())
                {
                    best = Some(p);
                }
            }
        }
        match best {
            Some((body, kind)) if body.len() < block.len() => {
                out.extend_from_slice(&body);
                kind
            }
            _ => {
                out.extend_from_slice(block);
                BlockKind::Raw
            }
        }
    }

    #[test]
    fn coders_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<Encoder>();
        send::<Decoder>();
    }

    #[test]
    fn fast_shuffle_matches_the_byte_loop() {
        let mut rng = Rng(11);
        let lens = (0..200usize).chain([4096, 65_536, 65_536 + 13, 100_003, 1 << 20]);
        for len in lens {
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            for elem in 0..=16usize {
                let want = reference_shuffle(&data, elem);
                // A destination holding other bytes, longer or shorter than the source.
                let mut sh = vec![0x5Au8; (rng.below(2 * len as u64 + 2)) as usize];
                shuffle(&data, elem, &mut sh);
                assert!(sh == want, "shuffle: len {len} elem {elem}");
                let mut into = vec![0xC3u8; len];
                shuffle_into(&data, elem, &mut into);
                assert!(into == want, "shuffle_into: len {len} elem {elem}");
                let mut back = vec![0x3Cu8; len];
                unshuffle(&want, elem, &mut back);
                assert!(back == data, "unshuffle: len {len} elem {elem}");
                // Unshuffle of arbitrary bytes (not only of a shuffle) against the byte loop.
                unshuffle(&data, elem, &mut back);
                assert!(
                    back == reference_unshuffle(&data, elem),
                    "unshuffle of random bytes: len {len} elem {elem}"
                );
            }
        }
    }

    /// Every combination of codec, shuffle and Zstandard level the tests use.
    fn all_settings() -> Vec<Settings> {
        let mut all = Vec::new();
        for shuffle in [false, true] {
            all.push(Settings {
                codec: Codec::None,
                level: 0,
                shuffle,
            });
            all.push(Settings {
                codec: Codec::Lz4,
                level: 0,
                shuffle,
            });
            for level in [0, 1, 9] {
                all.push(Settings {
                    codec: Codec::Zstd,
                    level,
                    shuffle,
                });
            }
        }
        all
    }

    /// Blocks of many sizes (a large one, then small ones, then large again) and shapes.
    fn block_sequence(rng: &mut Rng, count: usize) -> Vec<Vec<u8>> {
        (0..count)
            .map(|i| {
                let len = match i % 6 {
                    0 => 65_536,
                    1 => rng.below(40) as usize,
                    2 => rng.below(5000) as usize,
                    3 => 65_536 + rng.below(300) as usize,
                    4 => 16_384 + rng.below(3) as usize,
                    _ => rng.below(140_000) as usize,
                };
                sample(rng, len)
            })
            .collect()
    }

    #[test]
    fn one_encoder_writes_what_encode_block_and_the_plain_rules_write() {
        let mut rng = Rng(21);
        let blocks = block_sequence(&mut rng, 24);
        for s in all_settings() {
            for (elem, split) in (0..=16usize).flat_map(|e| [(e, None), (e, Some(e % 2 == 0))]) {
                let mut enc = match split {
                    None => Encoder::new(s),
                    Some(split) => Encoder::new(s).split_planes(split),
                };
                let split = split.unwrap_or(s.codec == Codec::Zstd);
                assert_eq!(enc.settings(), s);
                let mut out = vec![0xEEu8; 5];
                for b in 0..blocks.len() {
                    // Blocks in a varying order, so each size follows several others.
                    let block = &blocks[(b * 7 + elem) % blocks.len()];
                    let mut free = vec![0xEEu8; 5];
                    let free_kind = encode_block(block, elem, &s, &mut free);
                    let mut old = vec![0xEEu8; 5];
                    let old_kind = reference_encode_with(block, elem, &s, split, &mut old);
                    let start = out.len();
                    let kind = enc.encode(block, elem, &mut out);
                    let what = format!(
                        "{s:?} split {split} elem {elem} block {b} len {}",
                        block.len()
                    );
                    assert_eq!(kind, old_kind, "{what}");
                    assert!(
                        out[start..] == old[5..],
                        "{what}: differs from the plain rules"
                    );
                    if split == (s.codec == Codec::Zstd) {
                        assert_eq!(kind, free_kind, "{what}");
                        assert!(
                            out[start..] == free[5..],
                            "{what}: differs from encode_block"
                        );
                    }
                    assert_eq!(out[..5], [0xEE; 5], "{what}: prefix");
                    if b % 5 == 4 {
                        out.truncate(5);
                    }
                }
            }
        }
    }

    #[test]
    fn one_decoder_reads_what_decode_block_reads() {
        let mut rng = Rng(22);
        let blocks = block_sequence(&mut rng, 30);
        // One decoder for every block of every setting, kinds and sizes interleaved.
        let mut stored = Vec::new();
        for s in all_settings() {
            for (b, block) in blocks.iter().enumerate() {
                let elem = [1usize, 2, 3, 4, 6, 8, 12, 16][b % 8];
                let mut st = Vec::new();
                let kind = encode_block(block, elem, &s, &mut st);
                stored.push((kind, st, elem, block));
            }
        }
        let mut order: Vec<usize> = (0..stored.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut dec = Decoder::new();
        for (step, &i) in order.iter().enumerate() {
            let (kind, st, elem, block) = &stored[i];
            let mut free = vec![0x77u8; block.len()];
            decode_block(*kind, st, *elem, &mut free).unwrap();
            let mut back = vec![0x99u8; block.len()];
            dec.decode(*kind, st, *elem, &mut back)
                .unwrap_or_else(|e| panic!("step {step} {kind:?}: {e}"));
            assert!(
                back == free && back == **block,
                "step {step} {kind:?} elem {elem}"
            );
            // A damaged block now and then must fail the same way, and not upset the next.
            if step % 3 == 0 && !st.is_empty() && *kind != BlockKind::Raw {
                let short = &st[..st.len() / 2];
                let want = decode_block(*kind, short, *elem, &mut free);
                assert!(
                    want.is_err(),
                    "step {step} {kind:?}: truncated block decoded"
                );
                assert_eq!(dec.decode(*kind, short, *elem, &mut back), want);
                let mut wrong = vec![0u8; block.len() + 1];
                let want = decode_block(*kind, st, *elem, &mut wrong);
                assert!(want.is_err());
                assert_eq!(dec.decode(*kind, st, *elem, &mut wrong), want);
            }
        }
    }

    /// Walk a split block's planes: (stored length, raw) of each, or None if it is malformed.
    fn planes_of(stored: &[u8], len: usize, elem: usize) -> Option<Vec<(usize, bool)>> {
        let n = len / elem;
        let mut at = 0;
        let mut planes = Vec::new();
        for _ in 0..elem {
            let c = u32::from_le_bytes(stored.get(at..at + 4)?.try_into().ok()?) as usize;
            at += 4 + c;
            planes.push((c, c == n));
        }
        (stored.len() == at + len % elem).then_some(planes)
    }

    /// Shapes the split kinds must handle: random bytes, smooth doubles, all equal, smooth
    /// doubles with zero stretches, and small integers.
    fn split_shapes(rng: &mut Rng, len: usize) -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("random", (0..len).map(|_| rng.next() as u8).collect()),
            (
                "smooth",
                (0..len)
                    .map(|i| (290.0 + ((i / 8) as f64 * 0.003).sin()).to_le_bytes()[i % 8])
                    .collect(),
            ),
            ("equal", vec![0x3C; len]),
            ("zero runs", zero_stretches(len)),
            (
                "counters",
                (0..len)
                    .map(|i| ((i / 4) as u32 * 3).to_le_bytes()[i % 4])
                    .collect(),
            ),
        ]
    }

    #[test]
    fn split_blocks_round_trip_for_every_element_size() {
        let mut rng = Rng(31);
        let mut kinds = std::collections::BTreeSet::new();
        let (mut raw_planes, mut packed_planes) = (0, 0);
        let mut dec = Decoder::new();
        for codec in [Codec::Lz4, Codec::Zstd] {
            let s = Settings {
                codec,
                level: 1,
                shuffle: true,
            };
            let mut enc = Encoder::new(s).split_planes(true);
            for elem in 1..=16usize {
                let lens = [2 * elem, 2 * elem + 1, 999 + elem, 4099, 20_000 + elem / 2];
                for len in lens {
                    for (shape, data) in split_shapes(&mut rng, len) {
                        let what = format!("{codec:?} elem {elem} len {len} {shape}");
                        let mut stored = vec![0x77; 2];
                        let kind = enc.encode(&data, elem, &mut stored);
                        let stored = &stored[2..];
                        assert!(stored.len() <= len, "{what}: grew to {}", stored.len());
                        kinds.insert(kind.code());
                        if matches!(kind, BlockKind::Lz4Split | BlockKind::ZstdSplit) {
                            let planes = planes_of(stored, len, elem)
                                .unwrap_or_else(|| panic!("{what}: malformed planes"));
                            assert_eq!(planes.len(), elem, "{what}");
                            for (c, raw) in planes {
                                assert!(c <= len / elem, "{what}");
                                if raw {
                                    raw_planes += 1;
                                } else {
                                    packed_planes += 1;
                                }
                            }
                        }
                        if elem == 1 {
                            assert!(
                                !matches!(kind, BlockKind::Lz4Split | BlockKind::ZstdSplit),
                                "{what}: one-byte elements are not shuffled"
                            );
                        }
                        let mut back = vec![0x11; len];
                        dec.decode(kind, stored, elem, &mut back)
                            .unwrap_or_else(|e| panic!("{what} {kind:?}: {e}"));
                        assert!(back == data, "{what} {kind:?}: decodes differently");
                        let mut free = vec![0x22; len];
                        decode_block(kind, stored, elem, &mut free).unwrap();
                        assert!(free == data, "{what} {kind:?}: decode_block");
                    }
                }
            }
        }
        for k in [BlockKind::Lz4Split, BlockKind::ZstdSplit, BlockKind::Raw] {
            assert!(kinds.contains(&k.code()), "{k:?} never written: {kinds:?}");
        }
        assert!(
            raw_planes > 0 && packed_planes > 0,
            "{raw_planes} {packed_planes}"
        );
        // A plane that does not compress is stored as it is; a one-byte element is one plane.
        let mut block = 4u32.to_le_bytes().to_vec();
        block.extend_from_slice(b"abcd");
        let mut out = [0u8; 4];
        decode_block(BlockKind::Lz4Split, &block, 1, &mut out).unwrap();
        assert_eq!(&out, b"abcd");
        assert_eq!(BlockKind::from_code(7), Some(BlockKind::Lz4Split));
        assert_eq!(BlockKind::from_code(8), Some(BlockKind::ZstdSplit));
        assert_eq!(BlockKind::from_code(9), None);
    }

    #[test]
    fn every_cut_or_damaged_split_block_is_an_error() {
        let mut rng = Rng(41);
        for codec in [Codec::Lz4, Codec::Zstd] {
            let s = Settings {
                codec,
                level: 3,
                shuffle: true,
            };
            for elem in [2usize, 3, 4, 8, 16] {
                let len = 3000 + elem / 2;
                // Counters in the low bytes of each element, a constant in the others.
                let data: Vec<u8> = (0..len)
                    .map(|i| {
                        ((i / elem) as u64 * 3 + (1 << 40))
                            .to_le_bytes()
                            .get(i % elem)
                            .copied()
                            .unwrap_or(0x5A)
                    })
                    .collect();
                let mut stored = Vec::new();
                let kind = Encoder::new(s)
                    .split_planes(true)
                    .encode(&data, elem, &mut stored);
                let what = format!("{codec:?} elem {elem}");
                assert!(
                    matches!(kind, BlockKind::Lz4Split | BlockKind::ZstdSplit),
                    "{what}: {kind:?}"
                );
                let mut dec = Decoder::new();
                let mut out = vec![0u8; len];
                for cut in 0..stored.len() {
                    assert!(
                        dec.decode(kind, &stored[..cut], elem, &mut out).is_err(),
                        "{what}: cut at {cut} of {} decoded",
                        stored.len()
                    );
                }
                let mut longer = stored.clone();
                longer.push(0);
                assert!(dec.decode(kind, &longer, elem, &mut out).is_err(), "{what}");
                let mut wrong = vec![0u8; len + 1];
                assert!(
                    dec.decode(kind, &stored, elem, &mut wrong).is_err(),
                    "{what}"
                );
                assert!(dec.decode(kind, &stored, 0, &mut out).is_err(), "{what}");
                // Plane lengths beyond the plane, beyond the bytes stored, or short of them.
                let n = len / elem;
                for c in [n + 1, stored.len(), u32::MAX as usize, 0, 1] {
                    let mut bad = stored.clone();
                    bad[..4].copy_from_slice(&(c as u32).to_le_bytes());
                    assert!(
                        dec.decode(kind, &bad, elem, &mut out).is_err(),
                        "{what}: first length {c}"
                    );
                }
                // Damage anywhere: an error or some bytes, never a panic.
                for _ in 0..300 {
                    let mut bad = stored.clone();
                    let at = rng.below(bad.len() as u64) as usize;
                    bad[at] ^= 1 << rng.below(8);
                    let _ = dec.decode(kind, &bad, elem, &mut out);
                    let other = 1 + rng.below(16) as usize;
                    let _ = dec.decode(kind, &stored, other, &mut out);
                }
                // The decoder is still fine after all that.
                dec.decode(kind, &stored, elem, &mut out).unwrap();
                assert!(out == data, "{what}");
            }
        }
    }

    #[test]
    fn zero_heavy_blocks_keep_the_smaller_of_shuffled_and_plain() {
        let data = zero_stretches(65_536);
        for codec in [Codec::Lz4, Codec::Zstd] {
            let s = Settings {
                codec,
                level: 1,
                shuffle: true,
            };
            let mut stored = Vec::new();
            let kind = encode_block(&data, 8, &s, &mut stored);
            for split in [false, true] {
                let sh = reference_shuffle(&data, 8);
                let whole = if split {
                    reference_planes(&sh, 8, &s)
                } else {
                    reference_compress(&sh, &s)
                };
                let plain = reference_compress(&data, &s);
                let mut enc = Encoder::new(s).split_planes(split);
                let mut out = Vec::new();
                enc.encode(&data, 8, &mut out);
                assert_eq!(out.len(), whole.len().min(plain.len()), "{codec:?} {split}");
            }
            let mut back = vec![0u8; data.len()];
            decode_block(kind, &stored, 8, &mut back).unwrap();
            assert!(back == data);
        }
    }
}
