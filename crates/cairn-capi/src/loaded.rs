//! Regions read from a checkpoint into memory Cairn holds, for libraries whose applications
//! learn a region's stored size before they register it, or restore one region at a time
//! (VeloC's `VELOC_Recover_size`, FTI's `FTI_GetStoredSize`, `FTI_RecoverVar`, `FTI_Realloc`).
//!
//! ```c
//! int64_t v;
//! cairn_restart_test("sim", &v);
//! cairn_load("sim", v);                    /* a restart that restores nothing in place */
//! uint64_t n;
//! cairn_loaded_size(7, &n);                /* region 7's stored size */
//! double *a = malloc(n);
//! cairn_loaded_copy(7, a, n);              /* its bytes */
//! cairn_unload();
//! ```
//!
//! A file-API restart with `CAIRN_FLAG_HOLD` fills the same store with the stored regions
//! that were not protected when it began, and records the sizes of those it restored in
//! place; `cairn_complete_restart` empties it.

use crate::{c_str, guard, invalid, with_state, State};
use cairn_core::{Error, ErrorKind, OwnedRegion};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};

/// One region of the checkpoint last loaded or restarted with `CAIRN_FLAG_HOLD`.
pub(crate) enum Loaded {
    /// Read into a buffer Cairn holds.
    Held(OwnedRegion),
    /// Restored into the application's protected region of this many bytes.
    InPlace(u64),
}

impl Loaded {
    fn bytes(&mut self) -> u64 {
        match self {
            Loaded::Held(b) => b.bytes().len() as u64,
            Loaded::InPlace(n) => *n,
        }
    }
}

pub(crate) type Store = BTreeMap<i32, Loaded>;

/// The store after a restart: `held` as read, and the regions restored in place.
pub(crate) fn fill(st: &mut State, held: BTreeMap<i32, OwnedRegion>, in_place: &[(i32, u64)]) {
    st.loaded = held
        .into_iter()
        .map(|(id, b)| (id, Loaded::Held(b)))
        .collect();
    for (id, n) in in_place {
        st.loaded.insert(*id, Loaded::InPlace(*n));
    }
}

fn not_loaded(id: c_int) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!(
            "region {id} is not in the checkpoint last loaded (cairn_load, or a restart with \
             CAIRN_FLAG_HOLD), or nothing is loaded"
        ),
    )
}

/// Read checkpoint `version` of `name` (on damage, the newest older one every rank can
/// restore; `cairn_restart_version` tells which) into memory Cairn holds, restoring no
/// protected region: its regions need not be protected. It is a restart in every other way
/// (newer versions are passed over). Replaces what was loaded before. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_load(name: *const c_char, version: i64) -> c_int {
    guard("cairn_load", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        with_state(|st| {
            st.loaded.clear();
            let mut sized = |_: i64, shapes: &[cairn_core::Shape]| {
                shapes.iter().map(OwnedRegion::zeroed).collect()
            };
            let (_, bufs) = st
                .engine
                .restart_sized(name, version, &mut [], &mut sized)?;
            fill(st, bufs.into_iter().map(|b| (b.id, b)).collect(), &[]);
            Ok(())
        })
    })
}

/// Set `*bytes` to the stored size of region `id` in the checkpoint last loaded
/// (`CAIRN_ERR_NOT_FOUND` if it holds no such region). Local.
///
/// # Safety
/// `bytes` must be a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_loaded_size(id: c_int, bytes: *mut u64) -> c_int {
    guard("cairn_loaded_size", || {
        if bytes.is_null() {
            return Err(invalid("cairn_loaded_size: bytes pointer is NULL".into()));
        }
        let n = with_state(|st| {
            st.loaded
                .get_mut(&id)
                .map(Loaded::bytes)
                .ok_or_else(|| not_loaded(id))
        })?;
        // SAFETY: non-NULL, valid per this function's contract.
        unsafe { *bytes = n };
        Ok(())
    })
}

/// Copy region `id` of the checkpoint last loaded into `ptr`, a buffer of `len` bytes, at
/// least the stored size (`cairn_loaded_size`); bytes past it are left alone. A region a
/// restart restored in place already is an error. Local.
///
/// # Safety
/// `ptr` must be valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn cairn_loaded_copy(id: c_int, ptr: *mut c_void, len: u64) -> c_int {
    guard("cairn_loaded_copy", || {
        with_state(|st| match st.loaded.get_mut(&id) {
            None => Err(not_loaded(id)),
            Some(Loaded::InPlace(_)) => Err(Error::new(
                ErrorKind::State,
                format!(
                    "cairn_loaded_copy: region {id} was protected when the restart began and \
                     was restored in place already"
                ),
            )),
            Some(Loaded::Held(b)) => {
                let src = b.bytes();
                if (len as u128) < src.len() as u128 {
                    return Err(invalid(format!(
                        "cairn_loaded_copy: region {id} is {} bytes; the buffer is {len}",
                        src.len()
                    )));
                }
                if src.is_empty() {
                    return Ok(());
                }
                if ptr.is_null() {
                    return Err(invalid("cairn_loaded_copy: ptr is NULL".into()));
                }
                // SAFETY: `ptr` is valid for `len` >= src.len() bytes (this function's
                // contract) and cannot overlap a buffer Cairn owns.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr.cast::<u8>(), src.len()) };
                Ok(())
            }
        })
    })
}

/// Set `*bytes` to the stored size of region `id` in this rank's part of checkpoint
/// `version` of `name`, read from the part's index without restoring anything
/// (`CAIRN_ERR_NOT_FOUND` when the part or the region is not there). Local.
///
/// # Safety
/// `name` must be a NUL-terminated string and `bytes` a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_stored_size(
    name: *const c_char,
    version: i64,
    id: c_int,
    bytes: *mut u64,
) -> c_int {
    guard("cairn_stored_size", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        if bytes.is_null() {
            return Err(invalid("cairn_stored_size: bytes pointer is NULL".into()));
        }
        let shapes = with_state(|st| st.engine.stored_shapes(name, version))?;
        let s = shapes.iter().find(|s| s.id == id).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("checkpoint {name} v{version} holds no region {id} on this rank"),
            )
        })?;
        // SAFETY: non-NULL, valid per this function's contract.
        unsafe { *bytes = s.bytes() };
        Ok(())
    })
}

/// Release what was loaded. Local.
#[no_mangle]
pub extern "C" fn cairn_unload() -> c_int {
    guard("cairn_unload", || {
        with_state(|st| {
            st.loaded.clear();
            Ok(())
        })
    })
}
