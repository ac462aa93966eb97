//! Checkpoint size reduction, one block at a time: pure functions, no I/O.
//!
//! A protected region is cut into blocks. For each block the engine asks:
//! - is it all zeros? Then only a [`BlockKind::Zero`] marker is stored ([`is_zero`]);
//! - did it change since the last checkpoint? Its 128-bit [`block_hash`] (xxh3-128) is
//!   compared with the one kept in memory, and an incremental checkpoint stores only the
//!   blocks whose hash differs;
//! - how is it stored? [`encode_block`] optionally byte-shuffles it by element size (so the
//!   exponent bytes of float64 values sit together and compress) and compresses it with LZ4
//!   or Zstandard, and stores it raw whenever compression would not make it smaller, so a
//!   block never costs more than its raw size plus the caller's per-block record.
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
            _ => return None,
        })
    }

    fn shuffled(self) -> bool {
        matches!(self, BlockKind::Lz4Shuffled | BlockKind::ZstdShuffled)
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
        }
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
        let shuffled = s.shuffle && elem > 1 && block.len() >= 2 * elem;
        let input: &[u8] = if shuffled {
            let buf = at_least(&mut self.shuffled, block.len());
            shuffle_slice(block, elem, buf);
            buf
        } else {
            block
        };
        let start = out.len();
        let stored = match s.codec {
            Codec::Lz4 if self.one_shot => {
                // No buffer to keep: compress into room at the end of `out` (zero-filled, as
                // safe code must), which the caller's `out` usually has the capacity for.
                let max = lz4_flex::block::get_maximum_output_size(input.len());
                out.resize(start + max, 0);
                match lz4_flex::block::compress_into(input, &mut out[start..]) {
                    Ok(n) if n < block.len() => {
                        out.truncate(start + n);
                        true
                    }
                    _ => false,
                }
            }
            Codec::Lz4 => {
                let max = lz4_flex::block::get_maximum_output_size(input.len());
                let buf = at_least(&mut self.lz4, max);
                match lz4_flex::block::compress_into(input, buf) {
                    // Copied only when it is kept: it must be smaller than the block.
                    Ok(n) if n < block.len() => {
                        out.extend_from_slice(&buf[..n]);
                        true
                    }
                    _ => false,
                }
            }
            Codec::Zstd => {
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
            Codec::None => unreachable!("handled above"),
        };
        if !stored {
            out.truncate(start);
            out.extend_from_slice(block);
            return BlockKind::Raw;
        }
        match (s.codec, shuffled) {
            (Codec::Lz4, false) => BlockKind::Lz4,
            (Codec::Lz4, true) => BlockKind::Lz4Shuffled,
            (_, false) => BlockKind::Zstd,
            (_, true) => BlockKind::ZstdShuffled,
        }
    }
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

    /// Data of one of several shapes: random, smooth doubles, small integers, constant, zero.
    fn sample(rng: &mut Rng, len: usize) -> Vec<u8> {
        match rng.below(5) {
            0 => (0..len).map(|_| rng.next() as u8).collect(),
            1 => (0..len)
                .map(|i| ((i / 8) as f64 * 0.01).sin().to_le_bytes()[i % 8])
                .collect(),
            2 => (0..len)
                .map(|i| if i % 4 == 0 { (i % 7) as u8 } else { 0 })
                .collect(),
            3 => vec![0xA5; len],
            _ => vec![0; len],
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

    /// `encode_block` as it was before the encoder kept state: byte-loop shuffle, a fresh
    /// Zstandard context per block, LZ4 into zero-filled room. The stored bytes are the
    /// checkpoint format, so the encoder must match this exactly.
    fn reference_encode(block: &[u8], elem: usize, s: &Settings, out: &mut Vec<u8>) -> BlockKind {
        if is_zero(block) {
            return BlockKind::Zero;
        }
        if s.codec == Codec::None || block.is_empty() {
            out.extend_from_slice(block);
            return BlockKind::Raw;
        }
        let shuffled = s.shuffle && elem > 1 && block.len() >= 2 * elem;
        let input = if shuffled {
            reference_shuffle(block, elem)
        } else {
            block.to_vec()
        };
        let (body, kind) = match s.codec {
            Codec::Lz4 => {
                let mut c = vec![0u8; lz4_flex::block::get_maximum_output_size(input.len())];
                let n = lz4_flex::block::compress_into(&input, &mut c).unwrap();
                c.truncate(n);
                let kind = [BlockKind::Lz4, BlockKind::Lz4Shuffled][shuffled as usize];
                (c, kind)
            }
            Codec::Zstd => {
                let c = zstd::bulk::compress(&input, s.level).unwrap();
                let kind = [BlockKind::Zstd, BlockKind::ZstdShuffled][shuffled as usize];
                (c, kind)
            }
            Codec::None => unreachable!(),
        };
        if body.len() >= block.len() {
            out.extend_from_slice(block);
            return BlockKind::Raw;
        }
        out.extend_from_slice(&body);
        kind
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
    fn one_encoder_writes_what_encode_block_and_the_old_encoder_write() {
        let mut rng = Rng(21);
        let blocks = block_sequence(&mut rng, 24);
        for s in all_settings() {
            for elem in 0..=16usize {
                let mut enc = Encoder::new(s);
                assert_eq!(enc.settings(), s);
                let mut out = vec![0xEEu8; 5];
                for b in 0..blocks.len() {
                    // Blocks in a varying order, so each size follows several others.
                    let block = &blocks[(b * 7 + elem) % blocks.len()];
                    let mut free = vec![0xEEu8; 5];
                    let free_kind = encode_block(block, elem, &s, &mut free);
                    let mut old = vec![0xEEu8; 5];
                    let old_kind = reference_encode(block, elem, &s, &mut old);
                    let start = out.len();
                    let kind = enc.encode(block, elem, &mut out);
                    let what = format!("{s:?} elem {elem} block {b} len {}", block.len());
                    assert_eq!(kind, free_kind, "{what}");
                    assert_eq!(kind, old_kind, "{what}");
                    assert!(
                        out[start..] == free[5..],
                        "{what}: differs from encode_block"
                    );
                    assert!(
                        out[start..] == old[5..],
                        "{what}: differs from the old bytes"
                    );
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
}
