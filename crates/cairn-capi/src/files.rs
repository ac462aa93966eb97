//! The file API in C (SCR style; `docs/files.md`): datasets of files the application writes
//! itself, routed by Cairn, stored as the rank's part of a checkpoint
//! ([`cairn_core::files`]).
//!
//! ```c
//! cairn_start_output("sim", step, CAIRN_FLAG_CHECKPOINT, NULL);
//! char path[4096];
//! cairn_route_file("out/field.h5", path, sizeof path);   /* write the file at path */
//! write_my_file(path);
//! int kept;
//! cairn_complete_output(1, &kept);
//!
//! int64_t v;
//! cairn_start_restart("sim", 0, &v);                     /* v = -1: nothing to restart */
//! cairn_route_file("out/field.h5", path, sizeof path);   /* read the file at path */
//! cairn_complete_restart(read_my_file(path) == 0, NULL); /* 0 anywhere: every rank falls
//!                                                           back to an older checkpoint */
//! ```

use crate::{c_str, guard, invalid, muts, refs, with_state};
use cairn_core::files::{FLAG_CHECKPOINT, FLAG_OUTPUT};
use std::ffi::{c_char, c_int, CString};

// The C flags are the engine's (`cairn_core::files`), plus CAIRN_FLAG_REGIONS.
const _: () = assert!(
    CAIRN_FLAG_CHECKPOINT as u32 == FLAG_CHECKPOINT && CAIRN_FLAG_OUTPUT as u32 == FLAG_OUTPUT
);

/// `cairn_start_output` flag: the dataset is a checkpoint that a restart may use.
pub const CAIRN_FLAG_CHECKPOINT: c_int = 1;
/// `cairn_start_output` flag: the dataset is output: its files are copied to the paths the
/// application routed and kept there.
pub const CAIRN_FLAG_OUTPUT: c_int = 2;
/// `cairn_start_output` / `cairn_start_restart` flag: the protected regions are stored with
/// the files (and restored with them).
pub const CAIRN_FLAG_REGIONS: c_int = 4;
/// `cairn_start_restart` flag, with `CAIRN_FLAG_REGIONS`: a stored region that is not
/// protected when the restart begins is held in memory for `cairn_loaded_size` and
/// `cairn_loaded_copy` (until `cairn_complete_restart`) instead of failing the restart.
pub const CAIRN_FLAG_HOLD: c_int = 8;

/// Write `*out = v` if `out` is not NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write.
unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: non-NULL and valid per this function's contract.
        unsafe { *out = v };
    }
}

/// Copy `s` with its NUL into `buf` of `len` bytes; too small a buffer is an error that says
/// the size needed.
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes.
unsafe fn copy_out(
    what: &str,
    s: &[u8],
    buf: *mut c_char,
    len: usize,
) -> Result<(), cairn_core::Error> {
    if buf.is_null() {
        return Err(invalid(format!("{what}: the buffer is NULL")));
    }
    if s.len() + 1 > len {
        return Err(invalid(format!(
            "{what}: the buffer holds {len} bytes, {} are needed",
            s.len() + 1
        )));
    }
    // SAFETY: `buf` holds `len` > s.len() bytes per this function's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

/// Begin dataset `version` of `name`: files routed until `cairn_complete_output` belong to
/// it. `flags`: `CAIRN_FLAG_CHECKPOINT` and/or `CAIRN_FLAG_OUTPUT`, plus `CAIRN_FLAG_REGIONS`
/// to store the protected regions with the files. `label` (may be NULL) is the application's
/// own name for the dataset, given back by `cairn_restart_label`. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string; `label` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_start_output(
    name: *const c_char,
    version: i64,
    flags: c_int,
    label: *const c_char,
) -> c_int {
    guard("cairn_start_output", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        let label = if label.is_null() {
            None
        } else {
            // SAFETY: forwarded contract.
            Some(unsafe { c_str(label, "label") }?)
        };
        // The engine's flags are the C ones without CAIRN_FLAG_REGIONS; unknown bits go on to
        // it, so every rank refuses them alike in the collective step.
        let core = (flags & !CAIRN_FLAG_REGIONS) as u32;
        with_state(|st| {
            st.files
                .start_output(&mut st.engine, name, version, core, label)?;
            st.output_regions = flags & CAIRN_FLAG_REGIONS != 0;
            Ok(())
        })
    })
}

/// Put into `path` (a buffer of `len` bytes) where this rank must write `file` during an
/// output, or read it during a restart; outside both, `file` itself. An output's files are
/// staged privately under the node-local tier; a restart's are restored there. Fails with
/// `CAIRN_ERR_NOT_FOUND` during a restart for a file the checkpoint does not hold, and with
/// `CAIRN_ERR_INVALID` if `path` is too small (the message says how large it must be; 4096
/// bytes is always enough for a name that fits PATH_MAX). Local: no other rank takes part.
///
/// # Safety
/// `file` must be a NUL-terminated string; `path` valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn cairn_route_file(
    file: *const c_char,
    path: *mut c_char,
    len: usize,
) -> c_int {
    guard("cairn_route_file", || {
        // SAFETY: forwarded contract.
        let file = unsafe { c_str(file, "file") }?;
        let routed = with_state(|st| st.files.route_file(file))?;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: forwarded contract.
        unsafe { copy_out("cairn_route_file", routed.as_os_str().as_bytes(), path, len) }
    })
}

/// End the output begun by `cairn_start_output`. `valid` is this rank's verdict on its files;
/// a routed file that was never written counts as invalid. When every rank's files are valid
/// the dataset is stored (checkpoint) and/or copied to its paths (output) and `*kept` is set
/// to 1; otherwise nothing is kept and `*kept` is 0. `kept` may be NULL. Collective.
///
/// # Safety
/// `kept` must be NULL or a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_complete_output(valid: c_int, kept: *mut c_int) -> c_int {
    guard("cairn_complete_output", || {
        let k = with_state(|st| {
            let memory = if st.output_regions {
                refs(&st.regions)
            } else {
                Vec::new()
            };
            st.files
                .complete_output(&mut st.engine, valid != 0, &memory)
        })?;
        // SAFETY: forwarded contract.
        unsafe { put(kept, k as c_int) };
        Ok(())
    })
}

/// Set `*version` to the newest version of checkpoint `name` that every rank can restore
/// and no rank has found invalid in this run (`cairn_complete_restart`), or -1. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string; `version` a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_have_restart(name: *const c_char, version: *mut i64) -> c_int {
    guard("cairn_have_restart", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        if version.is_null() {
            return Err(invalid(
                "cairn_have_restart: version pointer is NULL".into(),
            ));
        }
        let v = with_state(|st| st.files.have_restart(&mut st.engine, name))?;
        // SAFETY: checked non-NULL; valid per this function's contract.
        unsafe { *version = v.unwrap_or(-1) };
        Ok(())
    })
}

/// Restore the checkpoint of `name` that `cairn_have_restart` offers: its files (found with
/// `cairn_route_file` until `cairn_complete_restart`), and with `CAIRN_FLAG_REGIONS` in
/// `flags` the protected regions too. A damaged version falls back to an older one. Sets
/// `*version` to the version restored, or -1 when there is none (then nothing changes).
/// `version` may be NULL. Collective.
///
/// # Safety
/// `name` must be a NUL-terminated string; `version` NULL or a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_start_restart(
    name: *const c_char,
    flags: c_int,
    version: *mut i64,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { start_restart("cairn_start_restart", name, i64::MAX, flags, version) }
}

/// `cairn_start_restart` from the newest version no newer than `upto` (and not passed over).
/// Collective.
///
/// # Safety
/// As `cairn_start_restart`.
#[no_mangle]
pub unsafe extern "C" fn cairn_start_restart_upto(
    name: *const c_char,
    upto: i64,
    flags: c_int,
    version: *mut i64,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { start_restart("cairn_start_restart_upto", name, upto, flags, version) }
}

/// # Safety
/// As `cairn_start_restart`.
unsafe fn start_restart(
    what: &str,
    name: *const c_char,
    upto: i64,
    flags: c_int,
    version: *mut i64,
) -> c_int {
    guard(what, || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        if flags & !(CAIRN_FLAG_REGIONS | CAIRN_FLAG_HOLD) != 0 {
            return Err(invalid(format!(
                "{what}: flags {flags:#x}: only CAIRN_FLAG_REGIONS (4) and CAIRN_FLAG_HOLD (8) \
                 are known"
            )));
        }
        let hold = flags & CAIRN_FLAG_HOLD != 0;
        if hold && flags & CAIRN_FLAG_REGIONS == 0 {
            return Err(invalid(format!(
                "{what}: CAIRN_FLAG_HOLD needs CAIRN_FLAG_REGIONS"
            )));
        }
        let got = with_state(|st| {
            st.loaded.clear();
            let mut memory = if flags & CAIRN_FLAG_REGIONS != 0 {
                muts(&mut st.regions)
            } else {
                Vec::new()
            };
            let in_place: Vec<(i32, u64)> = memory
                .iter()
                .map(|r| (r.id, r.bytes.len() as u64))
                .collect();
            let got = st
                .files
                .start_restart_upto(&mut st.engine, name, upto, &mut memory, hold)?;
            drop(memory);
            let got = got.map(|mut r| {
                if hold {
                    crate::loaded::fill(st, std::mem::take(&mut r.held), &in_place);
                }
                r
            });
            let label = got
                .as_ref()
                .and_then(|r| r.label.clone())
                .unwrap_or_default();
            st.restart_label = CString::new(label.replace('\0', " ")).unwrap_or_default();
            Ok(got)
        })?;
        // SAFETY: forwarded contract.
        unsafe { put(version, got.map_or(-1, |r| r.version)) };
        Ok(())
    })
}

/// Put into `label` (a buffer of `len` bytes) the dataset name given to `cairn_start_output`
/// for the checkpoint being restarted from ("" if none was given, or no restart is under
/// way). Local.
///
/// # Safety
/// `label` must be valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn cairn_restart_label(label: *mut c_char, len: usize) -> c_int {
    guard("cairn_restart_label", || {
        let l = with_state(|st| Ok(st.restart_label.clone()))?;
        // SAFETY: forwarded contract.
        unsafe { copy_out("cairn_restart_label", l.as_bytes(), label, len) }
    })
}

/// Set `*count` to the number of files of the restart under way (0 when none is). Local.
///
/// # Safety
/// `count` must be a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_restart_file_count(count: *mut c_int) -> c_int {
    guard("cairn_restart_file_count", || {
        if count.is_null() {
            return Err(invalid(
                "cairn_restart_file_count: count pointer is NULL".into(),
            ));
        }
        let n = with_state(|st| Ok(st.files.restart_files().len()))?;
        // SAFETY: non-NULL, valid per this function's contract.
        unsafe { *count = n.min(c_int::MAX as usize) as c_int };
        Ok(())
    })
}

/// Put into `name` (a buffer of `len` bytes) the name, as it was routed, of file `index`
/// (0 to `cairn_restart_file_count` - 1, in name order) of the restart under way. Local.
///
/// # Safety
/// `name` must be valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn cairn_restart_file_name(
    index: c_int,
    name: *mut c_char,
    len: usize,
) -> c_int {
    guard("cairn_restart_file_name", || {
        let files = with_state(|st| Ok(st.files.restart_files()))?;
        let f = usize::try_from(index)
            .ok()
            .and_then(|i| files.get(i))
            .ok_or_else(|| {
                invalid(format!(
                    "cairn_restart_file_name: index {index}: the restart under way has {} file(s)",
                    files.len()
                ))
            })?;
        // SAFETY: forwarded contract.
        unsafe { copy_out("cairn_restart_file_name", f.as_bytes(), name, len) }
    })
}

/// End the restart begun by `cairn_start_restart`. `valid` is this rank's verdict on the
/// files it read; if any rank says 0, every rank passes over that version, and the next
/// `cairn_have_restart` / `cairn_start_restart` offers the newest one older than it.
/// `*all_valid` (may be NULL) tells whether every rank said 1. Collective.
///
/// # Safety
/// `all_valid` must be NULL or a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn cairn_complete_restart(valid: c_int, all_valid: *mut c_int) -> c_int {
    guard("cairn_complete_restart", || {
        let all = with_state(|st| {
            st.restart_label = CString::default();
            st.loaded.clear();
            st.files.complete_restart(&mut st.engine, valid != 0)
        })?;
        // SAFETY: forwarded contract.
        unsafe { put(all_valid, all as c_int) };
        Ok(())
    })
}

/// Never restart from `version` of `name` in this run (its data stays stored). Local, but
/// to keep every rank's choice the same, call it on every rank.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cairn_drop(name: *const c_char, version: i64) -> c_int {
    guard("cairn_drop", || {
        // SAFETY: forwarded contract.
        let name = unsafe { c_str(name, "name") }?;
        with_state(|st| {
            st.files.drop_version(name, version);
            Ok(())
        })
    })
}
