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
/// bytes, and so on. A trailing partial element is copied as it is.
pub fn shuffle(src: &[u8], elem: usize, dst: &mut Vec<u8>) {
    dst.clear();
    dst.resize(src.len(), 0);
    let n = if elem > 1 { src.len() / elem } else { 0 };
    for (j, plane) in dst[..n * elem]
        .chunks_exact_mut(n.max(1))
        .enumerate()
        .take(elem)
    {
        for (i, out) in plane.iter_mut().enumerate() {
            *out = src[i * elem + j];
        }
    }
    dst[n * elem..].copy_from_slice(&src[n * elem..]);
}

/// Undo [`shuffle`].
pub fn unshuffle(src: &[u8], elem: usize, dst: &mut [u8]) {
    let n = if elem > 1 { src.len() / elem } else { 0 };
    let planes = if n > 0 { elem } else { 0 };
    for j in 0..planes {
        let plane = &src[j * n..(j + 1) * n];
        for (i, &b) in plane.iter().enumerate() {
            dst[i * elem + j] = b;
        }
    }
    dst[n * elem..].copy_from_slice(&src[n * elem..]);
}

/// Append the stored form of `block` (elements of `elem` bytes) to `out` and say how it is
/// stored. Zero blocks append nothing; a block that does not compress is stored raw.
pub fn encode_block(block: &[u8], elem: usize, s: &Settings, out: &mut Vec<u8>) -> BlockKind {
    if is_zero(block) {
        return BlockKind::Zero;
    }
    let raw = |out: &mut Vec<u8>| {
        out.extend_from_slice(block);
        BlockKind::Raw
    };
    if s.codec == Codec::None || block.is_empty() {
        return raw(out);
    }
    let shuffled = s.shuffle && elem > 1 && block.len() >= 2 * elem;
    let mut scratch = Vec::new();
    let input = if shuffled {
        shuffle(block, elem, &mut scratch);
        &scratch[..]
    } else {
        block
    };
    let start = out.len();
    let kind = match s.codec {
        Codec::Lz4 => {
            out.resize(
                start + lz4_flex::block::get_maximum_output_size(input.len()),
                0,
            );
            match lz4_flex::block::compress_into(input, &mut out[start..]) {
                Ok(n) => {
                    out.truncate(start + n);
                    if shuffled {
                        BlockKind::Lz4Shuffled
                    } else {
                        BlockKind::Lz4
                    }
                }
                Err(_) => {
                    out.truncate(start);
                    return raw(out);
                }
            }
        }
        Codec::Zstd => match zstd::bulk::compress(input, s.level) {
            Ok(c) => {
                out.extend_from_slice(&c);
                if shuffled {
                    BlockKind::ZstdShuffled
                } else {
                    BlockKind::Zstd
                }
            }
            Err(_) => return raw(out),
        },
        Codec::None => unreachable!("handled above"),
    };
    if out.len() - start >= block.len() {
        out.truncate(start);
        return raw(out);
    }
    kind
}

/// Decode a block stored as `kind` into `out`, which must have the block's raw length.
pub fn decode_block(
    kind: BlockKind,
    stored: &[u8],
    elem: usize,
    out: &mut [u8],
) -> Result<(), DecodeError> {
    let want = out.len();
    let length = |got: usize| DecodeError::Length { kind, got, want };
    let mut scratch = if kind.shuffled() {
        vec![0u8; want]
    } else {
        Vec::new()
    };
    let target: &mut [u8] = if kind.shuffled() { &mut scratch } else { out };
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
            let n = zstd::bulk::decompress_to_buffer(stored, target)
                .map_err(|e| DecodeError::Codec(kind, e.to_string()))?;
            if n != want {
                return Err(length(n));
            }
        }
    }
    if kind.shuffled() {
        unshuffle(&scratch, elem, out);
    }
    Ok(())
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
}
