//! Cairn's on-disk formats, the only place that defines bytes which cross a file.
//!
//! Two records make up a stored checkpoint (see `docs/format.md` for the byte layout):
//!
//! - the **rank file** ([`container`]): one per rank and checkpoint, holding the protected
//!   regions' stored blocks followed by an index ([`RankIndex`]) with a record for every
//!   block (how it is stored, a checksum of its stored bytes, a hash of its contents);
//! - the **manifest** ([`Manifest`]): a small JSON record written last and published by atomic
//!   rename, whose presence makes a checkpoint restart-eligible on that tier.
//!
//! ```
//! use cairn_format::{Dtype, RankIndex, RegionEntry};
//! let data = vec![7u8; 100];
//! let mut index = RankIndex::new("demo", 3, 0, 1, 64);
//! index.regions.push(RegionEntry::describe(1, Dtype::Byte, 100, 0, &data, 64));
//! let bytes = index.encode();
//! let back = RankIndex::decode(&bytes).unwrap();
//! assert_eq!(back, index);
//! assert_eq!(back.regions[0].blocks[0].sum, back.block_sum(&data[..64]));
//! ```
#![forbid(unsafe_code)]

pub mod auth;
pub mod container;
mod dtype;
mod manifest;
pub mod parity;

pub use auth::{AuthKey, AUTH_LEN, AUTH_MAGIC};
pub use container::{
    block_kind, block_sum, check_header, checksum, encode_header, BlockEntry, BlockSumStream,
    ChecksumStream, RankIndex, RegionEntry, StoredBlock, Trailer, HEADERLESS_MAGIC, HEADER_LEN,
    INDEX_MAGIC, KIND_COUNT, RANK_MAGIC, TRAILER_LEN,
};
pub use dtype::Dtype;
pub use manifest::{
    check_name, is_node_dir, node_index, shown, CkptState, Manifest, MANIFEST_FORMAT,
};
pub use parity::{Binding, ParityCodec, ParityHeader, PARITY_FORMAT, PARITY_MAGIC};

/// The version of the rank-file container this build writes. It also reads version 1 (the
/// format before block records: every block raw, no content hashes, no bases) and rejects
/// others with [`FormatError::Version`].
pub const FORMAT_VERSION: u32 = 2;

/// What can be wrong with stored bytes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    #[error("not a Cairn checkpoint file (bad magic)")]
    Magic,
    #[error("checkpoint format version {0} is not supported by this build (it reads versions 1 to {FORMAT_VERSION})")]
    Version(u32),
    #[error("truncated record: {0}")]
    Truncated(&'static str),
    #[error("checksum mismatch in {0}")]
    Checksum(String),
    #[error("invalid field {field}: {value}")]
    Invalid { field: &'static str, value: String },
    #[error("manifest is not valid: {0}")]
    Manifest(String),
}
