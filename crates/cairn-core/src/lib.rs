//! Cairn's checkpoint engine.
//!
//! The principal type is [`Engine`]: created collectively over a [`Comm`](cairn_comm::Comm)
//! with a resolved [`Config`], it writes checkpoints of the regions it is given
//! ([`RegionRef`]), finds the newest checkpoint every rank can restore
//! ([`Engine::restart_test`]) and restores it in place ([`Engine::restart`]), falling back to
//! an older one when stored data is damaged. [`catalog`] names where things live in a tier;
//! [`part`] reads and writes one rank's part.
//!
//! ```
//! use cairn_core::{Config, Engine, RegionMut, RegionRef, Dtype};
//! let dir = tempfile::tempdir().unwrap();
//! let mut cfg = Config::default();
//! cfg.local = Some(dir.path().join("local"));
//! cfg.global = dir.path().join("global");
//! let mut engine = Engine::new(Box::new(cairn_comm::Solo), cfg).unwrap();
//!
//! let field = vec![1.5f64; 1000];
//! let bytes: Vec<u8> = field.iter().flat_map(|x| x.to_le_bytes()).collect();
//! engine.checkpoint("demo", 10, &[RegionRef { id: 0, dtype: Dtype::Double, bytes: &bytes }]).unwrap();
//!
//! assert_eq!(engine.restart_test("demo").unwrap(), Some(10));
//! let mut back = vec![0u8; bytes.len()];
//! engine.restart("demo", 10, &mut [RegionMut { id: 0, dtype: Dtype::Double, bytes: &mut back }]).unwrap();
//! assert_eq!(back, bytes);
//! engine.finalize().unwrap();
//! ```

pub mod catalog;
pub mod config;
mod engine;
mod error;
pub mod part;

pub use cairn_format::{CkptState, Dtype};
pub use config::Config;
pub use engine::{Engine, Stats};
pub use error::{Error, ErrorKind, Result};
pub use part::{RegionMut, RegionRef};
