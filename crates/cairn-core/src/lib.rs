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
//! use cairn_core::{Config, Engine, RegionMut, RegionRef};
//! let dir = tempfile::tempdir().unwrap();
//! let mut cfg = Config::default();
//! cfg.local = Some(dir.path().join("local"));
//! cfg.global = dir.path().join("global");
//! let mut engine = Engine::new(Box::new(cairn_comm::Solo), cfg).unwrap();
//!
//! let mut step = [10i64];
//! let mut field = vec![1.5f64; 1000];
//! engine.checkpoint("demo", 10, &[RegionRef::new(0, &step), RegionRef::new(1, &field)]).unwrap();
//!
//! step[0] = 0;
//! field.fill(0.0);
//! assert_eq!(engine.restart_test("demo").unwrap(), Some(10));
//! engine.restart("demo", 10, &mut [RegionMut::new(0, &mut step), RegionMut::new(1, &mut field)]).unwrap();
//! assert_eq!((step[0], field[999]), (10, 1.5));
//! engine.finalize().unwrap();
//! ```

mod agree;
pub mod auth;
pub mod catalog;
pub mod clock;
pub mod config;
mod engine;
mod error;
pub mod files;
pub mod flush;
pub mod inventory;
pub mod joblock;
mod mapped;
pub mod memstore;
pub mod model;
pub mod part;
mod policy;
mod protect;
pub mod stage;

pub use cairn_format::{CkptState, Dtype};
pub use config::{Config, MemConfig, NodeLocal};
pub use engine::{Engine, OwnedRegion, Shape, SizedFn, Stats};
pub use error::{Error, ErrorKind, Result};
pub use files::Files;
pub use part::{Element, RegionMut, RegionRef};
