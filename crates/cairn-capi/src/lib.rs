//! libcairn: the C ABI over [`cairn_core::Engine`].
//!
//! The header `cairn.h` is generated from this file by cbindgen; `cairn_mpi.h` (hand-written,
//! it needs `mpi.h`) declares [`cairn_init`] and [`cairn_init_f`], the entry point of the
//! Fortran module (`native/fortran/cairn.f90`). One engine per process lives behind a lock,
//! with the table of regions the application protected. Every entry point:
//!
//! - catches panics, so none unwinds across the C boundary (it returns `CAIRN_ERR_PANIC`);
//! - returns `CAIRN_OK` or a negative `CAIRN_ERR_*` code and records the message for
//!   [`cairn_last_error`] on the calling thread;
//! - never aborts, exits or calls `MPI_Abort`.
//!
//! ```c
//! cairn_init(MPI_COMM_WORLD, NULL);
//! cairn_protect(0, &step, 1, CAIRN_INT64);
//! cairn_protect(1, field, n, CAIRN_DOUBLE);
//! int64_t v;
//! cairn_resume("heat", &v);                          /* restores if a checkpoint exists */
//! for (; step < nsteps; step++) {
//!     cairn_checkpoint_if_due("heat", step);         /* checkpoints when the policy says so */
//!     compute(field);
//! }
//! cairn_finalize();
//! ```
#![allow(non_camel_case_types)]

mod files;
mod loaded;
pub use files::*;
pub use loaded::*;

use cairn_core::{Config, Dtype, Engine, Error, ErrorKind, Files, RegionMut, RegionRef};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

/// Success.
pub const CAIRN_OK: c_int = 0;
/// A configuration file, variable or override is unknown or has a bad value.
pub const CAIRN_ERR_CONFIG: c_int = -1;
/// An argument is invalid (name, version, pointer, dtype, region id).
pub const CAIRN_ERR_INVALID: c_int = -2;
/// The call does not fit the library's state (not initialised, initialised twice, ...).
pub const CAIRN_ERR_STATE: c_int = -3;
/// Storage failed (full disk, missing or unwritable directory).
pub const CAIRN_ERR_IO: c_int = -4;
/// Stored data is damaged and nothing older could be restored.
pub const CAIRN_ERR_CORRUPT: c_int = -5;
/// A checkpoint does not fit the protected regions or the job (sizes, types, rank count).
pub const CAIRN_ERR_MISMATCH: c_int = -6;
/// No such checkpoint.
pub const CAIRN_ERR_NOT_FOUND: c_int = -7;
/// A collective operation failed.
pub const CAIRN_ERR_COMM: c_int = -8;
/// The call failed on another rank (its own message says why).
pub const CAIRN_ERR_PEER: c_int = -9;
/// An internal error was caught; please report it with the message.
pub const CAIRN_ERR_PANIC: c_int = -10;
/// Another job writes this checkpoint name into the same tiers (the message names it).
pub const CAIRN_ERR_IN_USE: c_int = -11;

/// Lifecycle state of a checkpoint, from [`cairn_test`].
pub type cairn_state = c_int;
/// No tier holds the checkpoint (or not on every rank).
pub const CAIRN_STATE_NONE: cairn_state = 0;
/// Every rank's part is stored with checksums on the node-local tier.
pub const CAIRN_STATE_CAPTURED: cairn_state = 1;
/// Captured, and protected by the redundancy scheme (`[redundancy] scheme`).
pub const CAIRN_STATE_PROTECTED: cairn_state = 2;
/// Stored on the global tier.
pub const CAIRN_STATE_DURABLE: cairn_state = 3;

/// Element type of a protected region: one of the `CAIRN_BYTE` ... `CAIRN_UINT64` values.
pub type cairn_dtype = c_int;
pub const CAIRN_BYTE: cairn_dtype = 0;
pub const CAIRN_INT32: cairn_dtype = 1;
pub const CAIRN_INT64: cairn_dtype = 2;
pub const CAIRN_FLOAT: cairn_dtype = 3;
pub const CAIRN_DOUBLE: cairn_dtype = 4;
pub const CAIRN_INT8: cairn_dtype = 5;
pub const CAIRN_INT16: cairn_dtype = 6;
pub const CAIRN_UINT32: cairn_dtype = 7;
pub const CAIRN_UINT64: cairn_dtype = 8;

struct Protected {
    ptr: *mut u8,
    len: usize,
    dtype: Dtype,
}

struct State {
    engine: Engine,
    regions: BTreeMap<i32, Protected>,
    /// The file API (`files.rs`).
    files: Files,
    /// Whether the output under way stores the protected regions with its files.
    output_regions: bool,
    /// The dataset name of the checkpoint being restarted from through the file API.
    restart_label: CString,
    /// The regions of the checkpoint last loaded (`loaded.rs`).
    loaded: loaded::Store,
}

// SAFETY: the raw pointers are the application's buffers, which it promised (cairn_protect's
// contract) stay valid while protected; they are only dereferenced under the STATE lock.
unsafe impl Send for State {}

static STATE: Mutex<Option<State>> = Mutex::new(None);
static PENDING: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    // A panic while holding the lock was already reported to the caller; the data is still
    // consistent enough to go on (or to finalize).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn code(kind: ErrorKind) -> c_int {
    match kind {
        ErrorKind::Config => CAIRN_ERR_CONFIG,
        ErrorKind::InvalidArgument => CAIRN_ERR_INVALID,
        ErrorKind::State => CAIRN_ERR_STATE,
        ErrorKind::Io => CAIRN_ERR_IO,
        ErrorKind::Corrupt => CAIRN_ERR_CORRUPT,
        ErrorKind::Mismatch => CAIRN_ERR_MISMATCH,
        ErrorKind::NotFound => CAIRN_ERR_NOT_FOUND,
        ErrorKind::Comm => CAIRN_ERR_COMM,
        ErrorKind::Peer => CAIRN_ERR_PEER,
        ErrorKind::InUse => CAIRN_ERR_IN_USE,
        _ => CAIRN_ERR_PANIC,
    }
}

fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Run an entry point: catch panics, map errors to codes, record the message.
fn guard(what: &str, f: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CAIRN_OK,
        Ok(Err(e)) => {
            set_last_error(&e.msg);
            code(e.kind)
        }
        Err(p) => {
            let m = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("internal error in {what}: {m}"));
            CAIRN_ERR_PANIC
        }
    }
}

fn state_err(msg: &str) -> Error {
    Error::new(ErrorKind::State, msg)
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, msg)
}

/// Read a C string argument.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated per this function's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| invalid(format!("{what} is not valid UTF-8")))
}

/// # Safety
/// `p` must be NULL or a NUL-terminated string.
unsafe fn opt_path(p: *const c_char) -> Result<Option<PathBuf>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    Ok(Some(PathBuf::from(unsafe { c_str(p, "config_path") }?)))
}

fn with_state<T>(f: impl FnOnce(&mut State) -> Result<T, Error>) -> Result<T, Error> {
    let mut g = lock(&STATE);
    let st = g.as_mut().ok_or_else(|| {
        state_err("Cairn is not initialised: call cairn_init (or cairn_init_solo) first")
    })?;
    f(st)
}

fn start(
    comm: impl FnOnce() -> Result<Box<dyn cairn_comm::Comm + Send>, Error>,
    path: Option<PathBuf>,
) -> Result<(), Error> {
    let mut g = lock(&STATE);
    if g.is_some() {
        return Err(state_err(
            "Cairn is already initialised (call cairn_finalize first)",
        ));
    }
    let overrides = lock(&PENDING).clone();
    let cfg = Config::resolve(path.as_deref(), &overrides);
    let comm = comm()?;
    // Configuration errors are usually the same on every rank, but agree anyway so no rank
    // goes on alone.
    let ok = comm.all_agree(cfg.is_ok())?;
    let cfg = match (cfg, ok) {
        (Ok(c), true) => c,
        (Err(e), _) => return Err(e),
        (Ok(_), false) => {
            return Err(Error::new(
                ErrorKind::Peer,
                "the configuration is invalid on another rank (see its message)",
            ))
        }
    };
    let engine = Engine::new(comm, cfg)?;
    *g = Some(State {
        files: Files::new(&engine),
        engine,
        regions: BTreeMap::new(),
        output_regions: false,
        restart_label: CString::default(),
        loaded: loaded::Store::new(),
    });
    Ok(())
}

/// Start Cairn over an MPI communicator (declared in `cairn_mpi.h`). Collective over `comm`.
///
/// # Safety
/// `comm` must be a valid intra-communicator of the initialised MPI library; `config_path`
/// NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_init(
    comm: cairn_mpi::mpi::ffi::MPI_Comm,
    config_path: *const c_char,
) -> c_int {
    guard("cairn_init", || {
        // SAFETY: forwarded contract.
        let path = unsafe { opt_path(config_path) }?;
        start(
            || {
                // SAFETY: `comm` is valid per this function's contract.
                let c = unsafe { cairn_mpi::MpiComm::from_raw_dup(comm) }?;
                Ok(Box::new(c))
            },
            path,
        )
    })
}

/// Start Cairn over a Fortran MPI communicator handle (declared in `cairn_mpi.h`): the
/// `INTEGER` of `use mpi`, or `comm%MPI_VAL` of `use mpi_f08`. The Fortran module's
/// `cairn_init` calls it. Collective over the communicator.
///
/// # Safety
/// `config_path` must be NULL or a NUL-terminated string. Any `comm` is safe: a handle that
/// names no communicator is reported, never used.
#[no_mangle]
pub unsafe extern "C" fn cairn_init_f(comm: c_int, config_path: *const c_char) -> c_int {
    guard("cairn_init", || {
        // SAFETY: forwarded contract.
        let path = unsafe { opt_path(config_path) }?;
        start(
            || {
                let raw = fortran_comm(comm)?;
                // SAFETY: MPI is initialised and `raw` is a communicator MPI converted from a
                // handle it handed out (fortran_comm checked both).
                let c = unsafe { cairn_mpi::MpiComm::from_raw_dup(raw) }?;
                Ok(Box::new(c))
            },
            path,
        )
    })
}

/// The C communicator of Fortran handle `handle`, checked: MPI must be running (Open MPI's
/// `MPI_Comm_f2c` aborts the job when called before `MPI_Init` or after `MPI_Finalize`), and
/// the handle must name a communicator (Open MPI converts an unknown one to a NULL pointer).
fn fortran_comm(handle: c_int) -> Result<cairn_mpi::mpi::ffi::MPI_Comm, Error> {
    use cairn_mpi::mpi::ffi;
    let (mut initialized, mut finalized) = (0, 0);
    // SAFETY: MPI_Initialized and MPI_Finalized may be called at any time.
    unsafe {
        ffi::MPI_Initialized(&mut initialized);
        ffi::MPI_Finalized(&mut finalized);
    }
    if initialized == 0 || finalized != 0 {
        return Err(Error::new(
            ErrorKind::Comm,
            "MPI is not running: call cairn_init after MPI_Init and before MPI_Finalize",
        ));
    }
    // SAFETY: MPI is running; MPI_Comm_f2c accepts any integer and returns an invalid handle
    // (never raising an error) for one it did not hand out.
    let raw = unsafe { ffi::MPI_Comm_f2c(handle) };
    // SAFETY: reading an MPI-provided constant handle; an all-zero MPI_Comm is a NULL pointer
    // in Open MPI and no valid handle in MPICH, so zeroed() is a valid value to compare with.
    let (null, zero) = unsafe { (ffi::RSMPI_COMM_NULL, std::mem::zeroed()) };
    if raw == null || raw == zero {
        return Err(invalid(format!(
            "cairn_init: Fortran handle {handle} is not a communicator (MPI_COMM_NULL or unknown)"
        )));
    }
    Ok(raw)
}

/// Start Cairn in a single process, without MPI.
///
/// `config_path` [IN]: a TOML configuration file, or NULL to use `$CAIRN_CONFIG` or defaults.
///
/// # Safety
/// `config_path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_init_solo(config_path: *const c_char) -> c_int {
    guard("cairn_init_solo", || {
        // SAFETY: forwarded contract.
        let path = unsafe { opt_path(config_path) }?;
        start(|| Ok(Box::new(cairn_comm::Solo)), path)
    })
}

/// Override one configuration key before `cairn_init`, e.g. `("cache.keep", "3")`. Overrides
/// beat the file and `CAIRN_*` variables. The key is checked at once.
///
/// # Safety
/// `key` and `value` must be NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn cairn_config_set(key: *const c_char, value: *const c_char) -> c_int {
    guard("cairn_config_set", || {
        // SAFETY: forwarded contract.
        let (k, v) = unsafe { (c_str(key, "key")?, c_str(value, "value")?) };
        if lock(&STATE).is_some() {
            return Err(state_err(
                "cairn_config_set must be called before cairn_init",
            ));
        }
        Config::default().set_dotted(k, v, "cairn_config_set")?;
        lock(&PENDING).push((k.to_string(), v.to_string()));
        Ok(())
    })
}

/// Finish: make the newest checkpoint of each name durable (unless `[checkpoint] finalize =
/// false`), wait for background work and release everything. Collective. Protected regions
/// are forgotten; configuration overrides are kept for a later `cairn_init`. A failed final
/// flush is reported after everything is released.
#[no_mangle]
pub extern "C" fn cairn_finalize() -> c_int {
    guard("cairn_finalize", || {
        let st = lock(&STATE)
            .take()
            .ok_or_else(|| state_err("Cairn is not initialised"))?;
        st.engine.finalize()
    })
}

/// Protect `count` elements of type `dtype` at `ptr` under `id`. Protecting an id again
/// replaces its region. A region may be empty (`count` 0, `ptr` may then be NULL).
///
/// # Safety
/// `ptr` must point to `count` elements of `dtype` that stay valid and unmoved until the
/// region is unprotected or Cairn is finalised.
#[no_mangle]
pub unsafe extern "C" fn cairn_protect(
    id: c_int,
    ptr: *mut c_void,
    count: usize,
    dtype: cairn_dtype,
) -> c_int {
    guard("cairn_protect", || {
        let dt = u32::try_from(dtype)
            .ok()
            .and_then(Dtype::from_code)
            .ok_or_else(|| invalid(format!("cairn_protect(id {id}): unknown dtype {dtype} (use CAIRN_BYTE ... CAIRN_UINT64)")))?;
        let len = count
            .checked_mul(dt.size())
            .filter(|l| *l <= isize::MAX as usize)
            .ok_or_else(|| {
                invalid(format!(
                    "cairn_protect(id {id}): {count} elements of {dt} is too large"
                ))
            })?;
        if ptr.is_null() && count > 0 {
            return Err(invalid(format!(
                "cairn_protect(id {id}): pointer is NULL but count is {count}"
            )));
        }
        with_state(|st| {
            st.regions.insert(
                id,
                Protected {
                    ptr: ptr.cast(),
                    len,
                    dtype: dt,
                },
            );
            Ok(())
        })
    })
}

/// Stop protecting region `id`.
#[no_mangle]
pub extern "C" fn cairn_unprotect(id: c_int) -> c_int {
    guard("cairn_unprotect", || {
        with_state(|st| {
            st.regions
                .remove(&id)
                .map(|_| ())
                .ok_or_else(|| invalid(format!("cairn_unprotect: region {id} is not protected")))
        })
    })
}

/// The protected regions, to save.
fn refs(regions: &BTreeMap<i32, Protected>) -> Vec<RegionRef<'_>> {
    regions
        .iter()
        .map(|(id, p)| RegionRef {
            id: *id,
            dtype: p.dtype,
            bytes: if p.len == 0 {
                &[]
            } else {
                // SAFETY: cairn_protect's contract keeps `ptr` valid for `len` bytes.
                unsafe { std::slice::from_raw_parts(p.ptr, p.len) }
            },
        })
        .collect()
}

/// The protected regions, to restore in place.
fn muts(regions: &mut BTreeMap<i32, Protected>) -> Vec<RegionMut<'_>> {
    regions
        .iter_mut()
        .map(|(id, p)| RegionMut {
            id: *id,
            dtype: p.dtype,
            bytes: if p.len == 0 {
                &mut []
            } else {
                // SAFETY: cairn_protect's contract keeps `ptr` valid for `len` bytes, and the
                // application does not touch the region during this call.
                unsafe { std::slice::from_raw_parts_mut(p.ptr, p.len) }
            },
        })
        .collect()
}

fn checkpoint(st: &mut State, name: &str, version: i64) -> Result<(), Error> {
    let regions = refs(&st.regions);
    st.engine.checkpoint(name, version, &regions)
}

fn restart(st: &mut State, name: &str, version: i64) -> Result<i64, Error> {
    let mut regions = muts(&mut st.regions);
    st.engine.restart(name, version, &mut regions)
}

/// Write checkpoint `version` of `name` from all protected regions. Collective; returns once
/// the checkpoint is captured on every rank. Versions of a name must increase within a run.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_checkpoint(name: *const c_char, version: i64) -> c_int {
    guard("cairn_checkpoint", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        with_state(|st| checkpoint(st, name, version))
    })
}

/// `cairn_checkpoint` with the redundancy scheme (`redundant` 1) or without it (0), whatever
/// `[redundancy] every` schedules: for libraries whose levels choose per checkpoint (FTI's
/// level 1 versus 2 and 3). Every rank must pass the same. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_checkpoint_redundant(
    name: *const c_char,
    version: i64,
    redundant: c_int,
) -> c_int {
    guard("cairn_checkpoint_redundant", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        with_state(|st| {
            st.engine.set_next_redundancy(Some(redundant != 0));
            let res = checkpoint(st, name, version);
            st.engine.set_next_redundancy(None);
            res
        })
    })
}

/// Set `*version` to the newest version of `name` every rank can restore, or -1. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string and `version` a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_restart_test(name: *const c_char, version: *mut i64) -> c_int {
    guard("cairn_restart_test", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        if version.is_null() {
            return Err(invalid(
                "cairn_restart_test: version pointer is NULL".into(),
            ));
        }
        let v = with_state(|st| st.engine.restart_test(name))?;
        // SAFETY: non-NULL, and valid per this function's contract.
        unsafe { *version = v.unwrap_or(-1) };
        Ok(())
    })
}

/// Set `*version` to the newest version of `name` no newer than `upto` that every rank can
/// restore, or -1. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string and `version` a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_restart_test_upto(
    name: *const c_char,
    upto: i64,
    version: *mut i64,
) -> c_int {
    guard("cairn_restart_test_upto", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        if version.is_null() {
            return Err(invalid(
                "cairn_restart_test_upto: version pointer is NULL".into(),
            ));
        }
        let v = with_state(|st| st.engine.restart_test_below(name, upto.saturating_add(1)))?;
        // SAFETY: non-NULL, and valid per this function's contract.
        unsafe { *version = v.unwrap_or(-1) };
        Ok(())
    })
}

/// Delete version `version` of checkpoint `name` from every tier. A version that a newer
/// incremental checkpoint is based on is refused (`CAIRN_ERR_INVALID`); a version that does
/// not exist is no error. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_delete(name: *const c_char, version: i64) -> c_int {
    guard("cairn_delete", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        with_state(|st| st.engine.delete(name, version))
    })
}

/// Fill the protected regions from checkpoint `version` of `name`. Collective. If it is
/// damaged on any rank, the newest older checkpoint every rank can restore is used instead
/// (a message names the damage); `cairn_restart_version` tells which version was restored.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_restart(name: *const c_char, version: i64) -> c_int {
    guard("cairn_restart", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        with_state(|st| restart(st, name, version).map(|_| ()))
    })
}

/// Remove from the node-local tier every version of `name` that is durable on the global
/// tier, after waiting for the flushes under way; a version stored nowhere else is kept.
/// `*removed` (may be NULL) is set to the number of versions removed. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string; `removed` NULL or a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_evict(name: *const c_char, removed: *mut c_int) -> c_int {
    guard("cairn_evict", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        let (gone, _) = with_state(|st| st.engine.evict_local(name))?;
        if !removed.is_null() {
            // SAFETY: non-NULL, valid per this function's contract.
            unsafe { *removed = gone.len().min(c_int::MAX as usize) as c_int };
        }
        Ok(())
    })
}

/// Set `*busy` to 1 while this rank still copies a checkpoint to the global tier, else 0.
/// Local: never blocks, never waits for another rank.
///
/// # Safety
/// `busy` must be a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_flushing(busy: *mut c_int) -> c_int {
    guard("cairn_flushing", || {
        if busy.is_null() {
            return Err(invalid("cairn_flushing: busy pointer is NULL".into()));
        }
        let b = with_state(|st| Ok(st.engine.flushing()))?;
        // SAFETY: non-NULL, valid per this function's contract.
        unsafe { *busy = b as c_int };
        Ok(())
    })
}

/// Set `*version` to the version restored by the last restart in this run, or -1.
///
/// # Safety
/// `version` must be a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_restart_version(version: *mut i64) -> c_int {
    guard("cairn_restart_version", || {
        if version.is_null() {
            return Err(invalid(
                "cairn_restart_version: version pointer is NULL".into(),
            ));
        }
        let v = with_state(|st| Ok(st.engine.stats().restored_version))?;
        // SAFETY: non-NULL, and valid per this function's contract.
        unsafe { *version = v };
        Ok(())
    })
}

/// Set `*flag` to 1 if the configured policy (`[checkpoint] every` / `seconds`) says a
/// checkpoint is due, or if the run must stop (a SIGTERM / SIGUSR1 / SIGUSR2 with `[exit]
/// signals`, the default; the time limit as near as `cairn_should_exit` counts it; or what
/// `cairn_should_exit` already said) and no checkpoint was taken since; else 0. So a program
/// that only calls this (or `cairn_checkpoint_if_due`) still takes a last checkpoint. Each
/// call counts as one step, and the first one takes SIGTERM. Collective when a time policy
/// is set or a stop can come (`[exit] signals`, the default, or a known time limit): all
/// ranks get the same answer.
///
/// # Safety
/// `flag` must be a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_need_checkpoint(flag: *mut c_int) -> c_int {
    guard("cairn_need_checkpoint", || {
        if flag.is_null() {
            return Err(invalid(
                "cairn_need_checkpoint: flag pointer is NULL".into(),
            ));
        }
        let due = with_state(|st| st.engine.need_checkpoint())?;
        // SAFETY: non-NULL, and valid per this function's contract.
        unsafe { *flag = due as c_int };
        Ok(())
    })
}

/// One-line restart: if a checkpoint of `name` exists, restore the newest one every rank can
/// restore and set `*version` to it; otherwise set `*version` to -1 and leave the regions
/// alone. Collective. `version` may be NULL.
///
/// # Safety
/// `name` must be a NUL-terminated string; `version` NULL or a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_resume(name: *const c_char, version: *mut i64) -> c_int {
    guard("cairn_resume", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        let v = with_state(|st| match st.engine.restart_test(name)? {
            Some(v) => restart(st, name, v),
            None => Ok(-1),
        })?;
        if !version.is_null() {
            // SAFETY: non-NULL, and valid per this function's contract.
            unsafe { *version = v };
        }
        Ok(())
    })
}

/// One-line checkpoint: checkpoint `version` of `name` if `cairn_need_checkpoint` says one is
/// due (which includes a last checkpoint once the run must stop). Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_checkpoint_if_due(name: *const c_char, version: i64) -> c_int {
    guard("cairn_checkpoint_if_due", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        with_state(|st| {
            if st.engine.need_checkpoint()? {
                checkpoint(st, name, version)
            } else {
                Ok(())
            }
        })
    })
}

/// Set `*state` to the lifecycle state of checkpoint `version` of `name` (one of the
/// `CAIRN_STATE_*` values), after publishing the background flushes that have finished on
/// every rank. Collective; never waits for a flush.
///
/// # Safety
/// `name` must be a NUL-terminated string; `state` a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_test(name: *const c_char, version: i64, state: *mut c_int) -> c_int {
    guard("cairn_test", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        if state.is_null() {
            return Err(invalid("cairn_test: state pointer is NULL".into()));
        }
        let st = with_state(|st| st.engine.test(name, version))?;
        let code = match st {
            None | Some(cairn_core::CkptState::Writing) => CAIRN_STATE_NONE,
            Some(cairn_core::CkptState::Captured) => CAIRN_STATE_CAPTURED,
            Some(cairn_core::CkptState::Protected) => CAIRN_STATE_PROTECTED,
            Some(cairn_core::CkptState::Durable) => CAIRN_STATE_DURABLE,
        };
        // SAFETY: non-NULL, and valid per this function's contract.
        unsafe { *state = code };
        Ok(())
    })
}

/// Wait until checkpoint `version` of `name` is durable on the global tier, starting its flush
/// if none is under way. Collective. Fails (on every rank) if a rank's copy failed; the
/// checkpoint then stays restart-eligible on the node-local tier.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_wait(name: *const c_char, version: i64) -> c_int {
    guard("cairn_wait", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        with_state(|st| st.engine.flush(name, version))
    })
}

/// Wait until every flush under way has ended, and publish the checkpoints that became
/// durable. Never starts a flush (unlike `cairn_wait`); a flush that failed leaves its
/// checkpoint on the node-local tier, and `cairn_test` / `cairn_wait` report it. Collective.
#[no_mangle]
pub extern "C" fn cairn_wait_flushes() -> c_int {
    guard("cairn_wait_flushes", || {
        with_state(|st| st.engine.wait_flushes())
    })
}

/// Set `*flag` to 1 when the run should stop now: the job's time limit is near enough that
/// only a last checkpoint and its flush fit (`[exit] time_limit`, or the end of the Slurm
/// job, less `[exit] margin`), the halt file exists, or SIGTERM / SIGUSR1 / SIGUSR2 arrived
/// (with `[exit] signals`, the default; the first call takes SIGTERM); else 0. Collective:
/// every rank gets the same answer, and once 1 it stays 1.
///
/// # Safety
/// `flag` must be a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_should_exit(flag: *mut c_int) -> c_int {
    guard("cairn_should_exit", || {
        if flag.is_null() {
            return Err(invalid("cairn_should_exit: flag pointer is NULL".into()));
        }
        let stop = with_state(|st| st.engine.should_exit())?;
        // SAFETY: non-NULL, and valid per this function's contract.
        unsafe { *flag = stop as c_int };
        Ok(())
    })
}

/// A short description of an error code. The string is static.
#[no_mangle]
pub extern "C" fn cairn_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        CAIRN_OK => c"success",
        CAIRN_ERR_CONFIG => c"invalid configuration",
        CAIRN_ERR_INVALID => c"invalid argument",
        CAIRN_ERR_STATE => c"call not valid in the current state",
        CAIRN_ERR_IO => c"storage error",
        CAIRN_ERR_CORRUPT => c"checkpoint data is damaged",
        CAIRN_ERR_MISMATCH => c"checkpoint does not fit the protected regions or the job",
        CAIRN_ERR_NOT_FOUND => c"no such checkpoint",
        CAIRN_ERR_COMM => c"communication error",
        CAIRN_ERR_PEER => c"failed on another rank",
        CAIRN_ERR_PANIC => c"internal error",
        CAIRN_ERR_IN_USE => c"checkpoint name in use by another job",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// This thread's message for the last failed call ("" if none). The pointer stays valid until
/// the next failing Cairn call on this thread.
#[no_mangle]
pub extern "C" fn cairn_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// The user name in Cairn's default paths (`/dev/shm/cairn-<user>`): the login name of the
/// effective user id in the user database, else `uid<N>`; never `$USER`. The string is
/// static.
#[no_mangle]
pub extern "C" fn cairn_user_name() -> *const c_char {
    static NAME: std::sync::OnceLock<CString> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        CString::new(cairn_core::config::user_name()).expect("user_name has no NUL byte")
    })
    .as_ptr()
}

/// The header cbindgen generated from this file when the crate was built; the
/// `header_is_current` test compares it with the committed `include/cairn.h`.
#[doc(hidden)]
pub const GENERATED_HEADER: &str = include_str!(concat!(env!("OUT_DIR"), "/cairn.h"));
