//! The file API (SCR style): checkpoints made of files the application writes itself.
//!
//! An application that writes its own checkpoint files (HDF5, netCDF, its own format) asks
//! Cairn where to write each one, writes it there with ordinary I/O, and says when the set is
//! complete. The files then become the rank's part of a checkpoint, one region per file plus
//! one region describing them, so they get the tiers, redundancy, compression, incremental
//! blocks, flush and restart selection of protected memory. Protected memory regions may be
//! stored in the same checkpoint (VeloC does that).
//!
//! ```text
//!          start_output                    complete_output(valid)
//!   IDLE -----------------> OUTPUT ------------------------------> IDLE
//!     |                    route_file: a path in the staging directory; the ranks agree
//!     |                    on `valid`, then the files are stored (checkpoint) and/or copied
//!     |                    to their own paths (output), and the staging directory removed
//!     |
//!     |   start_restart                     complete_restart(valid)
//!     +-----------------> RESTART ---------------------------------> IDLE
//!                         route_file: the restored file; if any rank says invalid, every
//!                         rank passes over that version, and the next start_restart
//!                         restores the newest one older than it
//! ```
//!
//! [`Files`] performs every transition; each collective one is collective over the engine's
//! communicator and leaves every rank in the same state. In IDLE `route_file` returns the
//! name unchanged, as SCR does.
//!
//! Names given by the application are keys, never trusted as storage paths: a file is staged
//! and restored as `f<index>-<base name>` in a private directory, and the names read back
//! from a checkpoint are only compared with the names the application asks for.

use crate::engine::{Engine, OwnedRegion, Shape};
use crate::error::{Error, ErrorKind, Result};
use crate::mapped::{Mapped, MappedMut};
use crate::part::{FileRegion, RegionMut, RegionRef};
use cairn_format::Dtype;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The dataset is a checkpoint: restart may use it.
pub const FLAG_CHECKPOINT: u32 = 1;
/// The dataset is output: its files are copied to the paths the application named and kept.
pub const FLAG_OUTPUT: u32 = 2;

/// Region id of the description of a checkpoint's files.
pub const META_REGION: i32 = -1;
/// Region id of the `i`-th file of a checkpoint; ids below 0 belong to the file API.
pub fn file_region(i: usize) -> i32 {
    -2 - i as i32
}

/// Most files one rank may route into one dataset.
pub const MAX_FILES: usize = 1 << 20;

/// The description of a checkpoint's files, stored as region [`META_REGION`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Meta {
    /// Format of this record.
    format: u32,
    /// The application's name for the dataset (SCR's dataset name), if it gave one.
    label: Option<String>,
    flags: u32,
    files: Vec<MetaFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct MetaFile {
    /// The name the application routed, as it gave it.
    name: String,
    region: i32,
    bytes: u64,
    mode: u32,
}

const META_FORMAT: u32 = 1;

/// What a dataset being written is.
#[derive(Debug)]
struct Output {
    name: String,
    version: i64,
    flags: u32,
    label: Option<String>,
    dir: PathBuf,
    /// Routed names, in routing order, with their staged paths.
    routed: Vec<(String, PathBuf)>,
}

/// A checkpoint being restarted from.
#[derive(Debug)]
struct Restart {
    name: String,
    version: i64,
    dir: PathBuf,
    files: BTreeMap<String, PathBuf>,
}

#[derive(Debug)]
enum State {
    Idle,
    Output(Output),
    Restart(Restart),
}

/// What [`Files::start_restart`] restored.
#[derive(Debug)]
pub struct Restored {
    pub version: i64,
    /// The dataset name given to `start_output`, if any.
    pub label: Option<String>,
    /// The names of the restored files, as the application routed them.
    pub files: Vec<String>,
    /// With `hold`: the stored memory regions that were not among the regions restored in
    /// place, read into buffers of their stored size, by id.
    pub held: BTreeMap<i32, OwnedRegion>,
}

/// The file API of one rank: its state and its staging directory. See the module docs.
#[derive(Debug)]
pub struct Files {
    root: PathBuf,
    /// `root` as a trusted place and the path below it that must be this user's alone.
    parts: (PathBuf, PathBuf),
    state: State,
    /// Versions (per checkpoint name) some rank found invalid at `complete_restart`: never
    /// restarted from again in this run.
    passed_over: BTreeMap<String, BTreeSet<i64>>,
}

impl Files {
    /// The file API over `engine`, staging under [`Engine::files_dir`].
    pub fn new(engine: &Engine) -> Files {
        let parts = engine.files_dir_parts();
        Files {
            root: parts.0.join(&parts.1),
            parts,
            state: State::Idle,
            passed_over: BTreeMap::new(),
        }
    }

    /// The directory this rank stages files in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Collective: begin dataset `version` of `name` (flags: [`FLAG_CHECKPOINT`] and/or
    /// [`FLAG_OUTPUT`]), optionally with the application's own name for it.
    pub fn start_output(
        &mut self,
        engine: &mut Engine,
        name: &str,
        version: i64,
        flags: u32,
        label: Option<&str>,
    ) -> Result<()> {
        let res = (|| {
            self.idle("start_output")?;
            cairn_format::check_name(name).map_err(|e| Error::invalid(e.to_string()))?;
            if flags & (FLAG_CHECKPOINT | FLAG_OUTPUT) == 0
                || flags & !(FLAG_CHECKPOINT | FLAG_OUTPUT) != 0
            {
                return Err(Error::invalid(format!(
                    "start_output flags {flags:#x}: give checkpoint (1), output (2) or both"
                )));
            }
            if version < 0 {
                return Err(Error::invalid(format!("version {version} is negative")));
            }
            fresh_dir(&self.parts, &format!("out-{name}-v{version}"))
        })();
        let dir = engine.agreed(res, "start the output")?;
        self.state = State::Output(Output {
            name: name.to_string(),
            version,
            flags,
            label: label.map(str::to_string),
            dir,
            routed: Vec::new(),
        });
        Ok(())
    }

    /// Where this rank must write `file` (during an output) or read it (during a restart);
    /// `file` itself outside both. Local: no other rank takes part.
    pub fn route_file(&mut self, file: &str) -> Result<PathBuf> {
        if file.is_empty() || file.contains('\0') {
            return Err(Error::invalid(format!(
                "route_file: {file:?} is not a file name"
            )));
        }
        match &mut self.state {
            State::Idle => Ok(PathBuf::from(file)),
            State::Output(o) => {
                if let Some((_, p)) = o.routed.iter().find(|(n, _)| n == file) {
                    return Ok(p.clone());
                }
                if o.routed.len() >= MAX_FILES {
                    return Err(Error::invalid(format!(
                        "route_file: more than {MAX_FILES} files in one dataset"
                    )));
                }
                let p = o.dir.join(staged_name(o.routed.len(), file));
                o.routed.push((file.to_string(), p.clone()));
                Ok(p)
            }
            State::Restart(r) => {
                if let Some(p) = r.files.get(file) {
                    return Ok(p.clone());
                }
                // A bare name (SCR 1.x looks files up by name alone) finds the one stored
                // file of that name in whatever directory it was routed from.
                let bare = |n: &str| Path::new(n).file_name().map(|b| b.to_owned());
                let mut same = r.files.iter().filter(|(n, _)| {
                    !file.contains('/') && bare(n).is_some_and(|b| b.as_os_str() == file)
                });
                match (same.next(), same.next()) {
                    (Some((_, p)), None) => Ok(p.clone()),
                    _ => Err(Error::new(
                        ErrorKind::NotFound,
                        format!(
                            "route_file: {file:?} is not a file of checkpoint {} v{} (it has {})",
                            r.name,
                            r.version,
                            list(r.files.keys())
                        ),
                    )),
                }
            }
        }
    }

    /// The names of the files of the restart under way, as they were routed (sorted); empty
    /// when no restart is under way.
    pub fn restart_files(&self) -> Vec<String> {
        match &self.state {
            State::Restart(r) => r.files.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Collective: end the output begun by `start_output`. Every rank says whether its files
    /// are `valid`; a rank whose routed file does not exist counts as invalid. When all are
    /// valid, a checkpoint is stored (with `memory`, the protected regions to keep with the
    /// files, if any) and an output's files are copied to their own paths; otherwise nothing
    /// is kept. Returns whether the dataset was kept.
    pub fn complete_output(
        &mut self,
        engine: &mut Engine,
        valid: bool,
        memory: &[RegionRef<'_>],
    ) -> Result<bool> {
        let State::Output(o) = std::mem::replace(&mut self.state, State::Idle) else {
            // Every rank is in the same state, so every rank fails here alike.
            return Err(state_error("complete_output", "no output was started"));
        };
        let res = (|| -> Result<bool> {
            let missing: Vec<&str> = o
                .routed
                .iter()
                .filter(|(_, p)| !p.is_file())
                .map(|(n, _)| n.as_str())
                .collect();
            if valid && !missing.is_empty() {
                tracing::warn!(
                    "cairn: rank {}: {} v{}: routed but not written: {}; the dataset is invalid",
                    engine.rank(),
                    o.name,
                    o.version,
                    missing.join(", ")
                );
            }
            if let Some(r) = memory.iter().find(|r| r.id < 0) {
                return Err(Error::invalid(format!(
                    "region {} is protected with a negative id, which the file API reserves",
                    r.id
                )));
            }
            Ok(valid && missing.is_empty())
        })();
        let kept = match engine.agreed(res, "complete the output") {
            Ok(mine) => engine.all_agree(mine)?,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&o.dir);
                return Err(e);
            }
        };
        let outcome = if kept {
            store(engine, &o, memory)
        } else {
            Ok(())
        };
        match outcome {
            // An output whose files could not all be stored or copied to their paths may have
            // no other copy: its staged files stay, and the error says where.
            Err(e) if o.flags & FLAG_OUTPUT != 0 => Err(e.context(format!(
                "{} v{}: the output files are kept in {}",
                o.name,
                o.version,
                o.dir.display()
            ))),
            outcome => {
                let _ = std::fs::remove_dir_all(&o.dir);
                outcome.map(|()| kept)
            }
        }
    }

    /// Collective: the newest version of checkpoint `name` every rank can restore and no rank
    /// has found invalid in this run, or `None`.
    pub fn have_restart(&mut self, engine: &mut Engine, name: &str) -> Result<Option<i64>> {
        let below = self.below(name);
        engine.restart_test_below(name, below)
    }

    /// Collective: restore the newest version of checkpoint `name` that [`Files::have_restart`]
    /// offers: its files into this rank's restart directory, and `memory` if it holds
    /// protected regions too. A damaged version falls back to an older one, as
    /// [`Engine::restart`] does. `Ok(None)` when there is nothing to restart from.
    pub fn start_restart(
        &mut self,
        engine: &mut Engine,
        name: &str,
        memory: &mut [RegionMut<'_>],
    ) -> Result<Option<Restored>> {
        self.start_restart_upto(engine, name, i64::MAX, memory, false)
    }

    /// Collective: [`Files::start_restart`] from the newest version no newer than `upto`
    /// (VeloC restarts from a version the application names). With `hold`, a stored memory
    /// region that is not in `memory` is read into a buffer of its own, returned in
    /// [`Restored::held`], instead of failing the restart (VeloC registers regions after
    /// asking for their stored size).
    pub fn start_restart_upto(
        &mut self,
        engine: &mut Engine,
        name: &str,
        upto: i64,
        memory: &mut [RegionMut<'_>],
        hold: bool,
    ) -> Result<Option<Restored>> {
        engine.agreed(self.idle("start_restart"), "start the restart")?;
        let below = self.below(name).min(upto.saturating_add(1));
        let Some(v) = engine.restart_test_below(name, below)? else {
            return Ok(None);
        };
        let parts = self.parts.clone();
        let mut dir = PathBuf::new();
        let mut sized = |version: i64, shapes: &[Shape]| -> Result<Vec<OwnedRegion>> {
            dir = fresh_dir(&parts, &format!("restart-{name}-v{version}"))?;
            shapes.iter().map(|s| buffer(&dir, s, hold)).collect()
        };
        let (version, bufs) = engine.restart_sized(name, v, memory, &mut sized)?;
        let (held, bufs): (Vec<_>, Vec<_>) = bufs.into_iter().partition(|b| b.id >= 0);
        let res = restored_files(&dir, name, version, bufs);
        let (meta, files) = match engine.agreed(res, "read the restored files") {
            Ok(x) => x,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let names = meta.files.iter().map(|f| f.name.clone()).collect();
        self.state = State::Restart(Restart {
            name: name.to_string(),
            version,
            dir,
            files,
        });
        Ok(Some(Restored {
            version,
            label: meta.label,
            files: names,
            held: held.into_iter().map(|b| (b.id, b)).collect(),
        }))
    }

    /// Collective: end the restart begun by `start_restart`. If any rank says its files are
    /// not `valid`, every rank passes over that version: the next `have_restart` /
    /// `start_restart` offers the newest one older than it. Returns whether all were valid.
    pub fn complete_restart(&mut self, engine: &mut Engine, valid: bool) -> Result<bool> {
        let State::Restart(r) = std::mem::replace(&mut self.state, State::Idle) else {
            return Err(state_error("complete_restart", "no restart was started"));
        };
        let _ = std::fs::remove_dir_all(&r.dir);
        let all = engine.all_agree(valid)?;
        if !all {
            if engine.rank() == 0 {
                tracing::warn!(
                    "cairn: checkpoint {} v{} was found invalid by the application; \
                     passing over it",
                    r.name,
                    r.version
                );
            }
            self.passed_over
                .entry(r.name)
                .or_default()
                .insert(r.version);
        }
        Ok(all)
    }

    /// Never restart from `version` of `name` in this run (SCR_Drop); the data stays.
    pub fn drop_version(&mut self, name: &str, version: i64) {
        self.passed_over
            .entry(name.to_string())
            .or_default()
            .insert(version);
    }

    fn below(&self, name: &str) -> i64 {
        self.passed_over
            .get(name)
            .and_then(|s| s.first().copied())
            .unwrap_or(i64::MAX)
    }

    fn idle(&self, what: &str) -> Result<()> {
        match &self.state {
            State::Idle => Ok(()),
            State::Output(o) => Err(state_error(
                what,
                &format!("output {} v{} is not complete", o.name, o.version),
            )),
            State::Restart(r) => Err(state_error(
                what,
                &format!("the restart from {} v{} is not complete", r.name, r.version),
            )),
        }
    }
}

impl Drop for Files {
    /// Leave no empty staging directories behind (`rank<r>`, then its parent if the last
    /// rank of the node is gone); anything still in them stays.
    fn drop(&mut self) {
        if std::fs::remove_dir(&self.root).is_ok() {
            if let Some(parent) = self.root.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

fn state_error(what: &str, why: &str) -> Error {
    Error::new(ErrorKind::State, format!("{what}: {why}"))
}

fn list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = names.map(String::as_str).collect();
    if v.is_empty() {
        "no files".into()
    } else {
        v.join(", ")
    }
}

/// `f<index>-<base name>`, the base name reduced to safe characters.
fn staged_name(i: usize, file: &str) -> String {
    let base = file.rsplit('/').next().unwrap_or("");
    let safe: String = base
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("f{i}-{safe}")
}

/// An empty private directory `leaf` in the staging directory `(base, rel)` (whatever was
/// there removed; a symbolic link is removed, not followed), every directory on the way this
/// user's: returns its path.
fn fresh_dir((base, rel): &(PathBuf, PathBuf), leaf: &str) -> Result<PathBuf> {
    let root = cairn_tier::private_dirs("staging", base, rel)?;
    let dir = root.join(leaf);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e, "remove", &dir)),
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| io(e, "create", &dir))?;
    Ok(dir)
}

fn io(e: std::io::Error, what: &str, path: &Path) -> Error {
    Error::new(ErrorKind::Io, format!("{what} {}: {e}", path.display()))
}

/// Store a complete dataset: the checkpoint, then the output copies. A checkpoint that is
/// not also output hands its files to the tier, which keeps them where they are when it can
/// (see [`Engine::checkpoint_files`]); an output's files stay staged until they are copied
/// to their paths.
fn store(engine: &mut Engine, o: &Output, memory: &[RegionRef<'_>]) -> Result<()> {
    let res = (|| {
        let mut meta = Meta {
            format: META_FORMAT,
            label: o.label.clone(),
            flags: o.flags,
            files: Vec::with_capacity(o.routed.len()),
        };
        for (i, (name, path)) in o.routed.iter().enumerate() {
            let md = std::fs::metadata(path).map_err(|e| io(e, "stat", path))?;
            meta.files.push(MetaFile {
                name: name.clone(),
                region: file_region(i),
                bytes: md.len(),
                mode: md.permissions().mode(),
            });
        }
        Ok(serde_json::to_vec(&meta).expect("a plain record serialises"))
    })();
    let meta = engine.agreed(res, "read the routed files")?;
    if o.flags & FLAG_CHECKPOINT != 0 {
        let mut regions: Vec<RegionRef<'_>> = memory.to_vec();
        regions.push(RegionRef {
            id: META_REGION,
            dtype: Dtype::Byte,
            bytes: &meta,
        });
        let files: Vec<FileRegion<'_>> = o
            .routed
            .iter()
            .enumerate()
            .map(|(i, (_, path))| FileRegion {
                id: file_region(i),
                path,
                hashes: None,
            })
            .collect();
        if o.flags & FLAG_OUTPUT == 0 {
            engine.checkpoint_files(&o.name, o.version, &regions, &files)?;
        } else {
            let maps = files
                .iter()
                .map(|f| Mapped::read(f.path))
                .collect::<Result<Vec<_>>>();
            let maps = engine.agreed(maps, "read the routed files")?;
            regions.extend(files.iter().zip(&maps).map(|(f, m)| RegionRef {
                id: f.id,
                dtype: Dtype::Byte,
                bytes: m.bytes(),
            }));
            engine.checkpoint(&o.name, o.version, &regions)?;
        }
    }
    if o.flags & FLAG_OUTPUT != 0 {
        let res = o
            .routed
            .iter()
            .try_for_each(|(name, staged)| copy_out(staged, Path::new(name)));
        engine.agreed(res, "copy the output files to their paths")?;
    }
    Ok(())
}

/// Copy a staged output file to the path the application named: into a temporary beside it,
/// synced, then renamed, so a reader never sees half a file.
fn copy_out(staged: &Path, dest: &Path) -> Result<()> {
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| io(e, "create", parent))?;
    }
    let file = dest
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{} names no file", dest.display())))?;
    let tmp = dest.with_file_name(format!(".{}.cairn-tmp", file.to_string_lossy()));
    std::fs::copy(staged, &tmp).map_err(|e| io(e, "copy to", &tmp))?;
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(e, "sync", &tmp))?;
    std::fs::rename(&tmp, dest).map_err(|e| io(e, "rename to", dest))
}

/// A buffer for one stored region: the description in memory, a file as a writable mapping
/// of a new file of its size (so restored bytes go straight into the file), a memory region
/// not restored in place in memory if `hold`.
fn buffer(dir: &Path, s: &Shape, hold: bool) -> Result<OwnedRegion> {
    if s.id >= 0 && hold {
        return OwnedRegion::zeroed(s);
    }
    if s.id >= 0 {
        return Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "region {} ({} x {}) is in the checkpoint but is not protected now",
                s.id, s.count, s.dtype
            ),
        ));
    }
    if let (Some(stored), true) = (&s.stored, s.id != META_REGION) {
        return Ok(OwnedRegion {
            in_place: Some(stored.clone()),
            ..OwnedRegion::new(s.id, s.dtype, Box::new(Vec::new()))
        });
    }
    let bytes = usize::try_from(s.bytes())
        .map_err(|_| Error::new(ErrorKind::Corrupt, format!("region {} is too large", s.id)))?;
    let buf: Box<dyn AsMut<[u8]> + Send> = if s.id == META_REGION {
        if bytes > 64 << 20 {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!("the description of the files is {bytes} bytes"),
            ));
        }
        Box::new(vec![0u8; bytes])
    } else {
        Box::new(MappedMut::create(
            &dir.join(format!("region{}", -s.id)),
            bytes,
        )?)
    };
    Ok(OwnedRegion::new(s.id, s.dtype, buf))
}

/// After a restore: read the description, check it against the regions, and give each file
/// its staged name and mode. Returns the description and the routed names' paths.
fn restored_files(
    dir: &Path,
    name: &str,
    version: i64,
    bufs: Vec<OwnedRegion>,
) -> Result<(Meta, BTreeMap<String, PathBuf>)> {
    let damaged = |why: String| {
        Error::new(
            ErrorKind::Corrupt,
            format!("checkpoint {name} v{version}: {why}"),
        )
    };
    let mut meta = None;
    let mut sizes = BTreeMap::new();
    let mut in_place = BTreeMap::new();
    for mut b in bufs {
        if let Some(path) = b.in_place.take() {
            let md = std::fs::metadata(&path).map_err(|e| io(e, "stat", &path))?;
            sizes.insert(b.id, md.len());
            in_place.insert(b.id, path);
        } else if b.id == META_REGION {
            meta = Some(
                serde_json::from_slice::<Meta>(b.buf.as_mut().as_mut())
                    .map_err(|e| damaged(format!("the description of its files: {e}")))?,
            );
        } else {
            sizes.insert(b.id, b.buf.as_mut().as_mut().len() as u64);
        }
        // Dropping the buffer unmaps the file, whose bytes are in the page cache.
    }
    let meta = meta.ok_or_else(|| damaged("it holds no files (no description region)".into()))?;
    if meta.format != META_FORMAT {
        return Err(damaged(format!(
            "file description format {} (this build reads {META_FORMAT})",
            meta.format
        )));
    }
    let mut files = BTreeMap::new();
    for (i, f) in meta.files.iter().enumerate() {
        if f.region != file_region(i) || sizes.remove(&f.region) != Some(f.bytes) {
            return Err(damaged(format!(
                "file {:?} does not match its region {}",
                f.name, f.region
            )));
        }
        if f.name.is_empty() || f.name.contains('\0') || files.contains_key(&f.name) {
            return Err(damaged(format!(
                "file name {:?} is empty or repeated",
                f.name
            )));
        }
        if let Some(stored) = in_place.remove(&f.region) {
            // The checkpoint's own file, verified: handed back where it is, read-only, so
            // that the application cannot change the checkpoint through it by mistake.
            std::fs::set_permissions(&stored, std::fs::Permissions::from_mode(0o400))
                .map_err(|e| io(e, "chmod", &stored))?;
            files.insert(f.name.clone(), stored);
            continue;
        }
        let from = dir.join(format!("region{}", -f.region));
        let to = dir.join(staged_name(i, &f.name));
        std::fs::rename(&from, &to).map_err(|e| io(e, "rename to", &to))?;
        // Only the owner's permission bits: the restored copy stays private to the user.
        let mode = f.mode & 0o700;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode | 0o400))
            .map_err(|e| io(e, "chmod", &to))?;
        files.insert(f.name.clone(), to);
    }
    if let Some(id) = sizes.keys().next() {
        return Err(damaged(format!(
            "region {id} is no file of its description"
        )));
    }
    Ok((meta, files))
}
