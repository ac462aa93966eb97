//! Checkpoint versions of a job. The processes write their images into a private staging
//! directory (`crate::stage`); the root hands them to Cairn's engine
//! (`crate::images`), which stores them as version N of the engine checkpoint named after the
//! job, and only then writes `<dir>/<job>/v<N>/manifest.json`. Only a manifest makes a version
//! complete: restart never considers a version without one, and old versions are deleted
//! only after a newer one is complete. The format is in `docs/coordinator.md`.

use crate::error::{bail, Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

/// The manifest's file name inside a version directory.
pub const MANIFEST: &str = "manifest.json";
/// With `[security] authenticate`: the keyed MAC of the manifest's bytes, in hex.
pub const MANIFEST_MAC: &str = "manifest.json.mac";
/// The manifest format this code writes and reads. Format 1 (images as files in the version
/// directory) is no longer read.
pub const FORMAT: u32 = 2;

/// Whether threads' CPU masks and pages' NUMA nodes are restored (`--affinity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Affinity {
    On,
    Off,
}

impl Affinity {
    pub fn as_str(self) -> &'static str {
        match self {
            Affinity::On => "on",
            Affinity::Off => "off",
        }
    }

    pub fn parse(s: &str) -> Result<Affinity> {
        match s {
            "on" => Ok(Affinity::On),
            "off" => Ok(Affinity::Off),
            _ => bail!(Usage, "--affinity takes on or off, not {s:?}"),
        }
    }
}

/// A complete checkpoint of a job: what restart needs to bring every process back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub job: String,
    pub version: u64,
    /// When the manifest was written, in seconds since the Unix epoch.
    pub created: u64,
    /// The number of (simulated) nodes, hence of sub-coordinators.
    pub nodes: usize,
    /// The sum of the images' sizes.
    pub bytes: u64,
    /// One entry per process, by index.
    pub procs: Vec<ProcImage>,
    /// The connections to other hosts that come back closed after a restart from this
    /// version (their other end was not a process of the job; `CAIRN_CKPT_EXTERNAL=close`),
    /// each named by its two addresses, the lower first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<String>,
    /// Where the engine keeps the images.
    pub engine: EngineRecord,
    pub launch: LaunchRecord,
}

/// One process's image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcImage {
    pub proc: usize,
    pub node: usize,
    pub host: String,
    /// The process id when the checkpoint was taken.
    pub pid: u32,
    /// The image's length.
    pub bytes: u64,
    /// The length of the engine's region that holds it: the image padded with zeros
    /// (`crate::images::region_len`). Restart restores the region and cuts it to `bytes`.
    pub region: u64,
    /// What the engine stored for it (and its members), after zero blocks, unchanged
    /// blocks and compression.
    pub stored: u64,
    /// The other processes of its tree (processes it started, and theirs), each with an
    /// image of its own, stored with this one's as further regions of the same part.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberImage>,
    /// For a slot of a job launched with `--rsh` (a process kept for a command an rsh agent
    /// runs there): whether it has been given one. A restart needs it to tell which
    /// processes the job waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<SlotUse>,
}

/// What a slot of a job launched with `--rsh` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotUse {
    /// It waits for a command (`cairn slot`); the job ends without waiting for it.
    Free,
    /// It runs the command `cairn rsh` gave it (or has run it); the job waits for it.
    Used,
}

/// One image file of a process's tree, as the engine and the staging directories know it.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeFile {
    /// The engine region: 0 for the launched process, else the process's pid in the tree's
    /// namespace.
    pub id: i32,
    /// Its file name in a staging directory.
    pub name: String,
    pub bytes: u64,
    pub region: u64,
    /// The process, for reports: `proc 3 (pid 1234)`, `proc 3's process 1002`.
    pub who: String,
}

impl ProcImage {
    /// The images of its tree: its own first, then each of its members'.
    pub fn files(&self) -> Vec<TreeFile> {
        std::iter::once(TreeFile {
            id: 0,
            name: image_name(self.proc),
            bytes: self.bytes,
            region: self.region,
            who: format!("proc {} (pid {})", self.proc, self.pid),
        })
        .chain(self.members.iter().map(|m| TreeFile {
            id: m.pid as i32,
            name: member_image_name(self.proc, m.pid),
            bytes: m.bytes,
            region: m.region,
            who: format!("proc {}'s process {}", self.proc, m.pid),
        }))
        .collect()
    }
}

/// The image of a process that a job's process started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberImage {
    /// Its pid in the tree's namespace (the same after a restart); also its engine region id.
    pub pid: u32,
    pub bytes: u64,
    pub region: u64,
}

/// The engine checkpoint that holds a version's images, and the configuration it was
/// stored with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineRecord {
    /// The checkpoint's name in the engine (the job id); its version there is the
    /// manifest's.
    pub name: String,
    /// The Cairn release that stored it.
    pub cairn: String,
    /// `[tiers] local`: a directory, `mem` or `none`.
    pub local: String,
    /// `[tiers] global`.
    pub global: String,
    /// The redundancy plan in force (`single`, `partner`, `xor(4)`, ...).
    pub redundancy: String,
    /// `[reduction] compress`.
    pub compress: String,
    /// Whether this version stored only the blocks that changed since the previous one.
    pub incremental: bool,
}

impl EngineRecord {
    /// The record of a configuration (its redundancy as configured, until the engine says
    /// which plan it made of it).
    pub fn describe(cfg: &cairn_core::Config, name: &str) -> EngineRecord {
        use cairn_core::NodeLocal;
        let abs = |p: &Path| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.to_path_buf())
                .display()
                .to_string()
        };
        EngineRecord {
            name: name.to_string(),
            cairn: env!("CARGO_PKG_VERSION").to_string(),
            local: match cfg.node_local() {
                NodeLocal::None => "none".into(),
                NodeLocal::Mem => "mem".into(),
                NodeLocal::Dir(d) => abs(d),
            },
            global: abs(&cfg.global),
            redundancy: cfg.redundancy.clone(),
            compress: cfg.compress.clone(),
            incremental: false,
        }
    }
}

/// How the job was launched; carried unchanged through restarts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchRecord {
    /// The application's command line as `cairn launch` ran it.
    pub command: Vec<String>,
    /// The working directory of the launch.
    pub cwd: String,
    /// The variables a new launch of the same command would need (see [`recorded_env`]).
    pub env: BTreeMap<String, String>,
    pub affinity: Affinity,
    /// The CPU list the processes were confined to, if any.
    pub cpus: Option<String>,
    pub interval_secs: Option<f64>,
    pub timeout_secs: f64,
    pub keep: usize,
    /// How many times the job was restarted before this checkpoint.
    pub restarts: u32,
    /// The hosts the nodes ran on, by node (empty: simulated nodes on the launcher's host),
    /// and the command that started a sub-coordinator on one (`ssh`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent: Vec<String>,
    /// The address each host's sub-coordinator listened on, by node (hosts only): what a
    /// restart on other hosts translates for the processes (`CAIRN_CKPT_MOVED`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addrs: Vec<String>,
    /// Launched with `--rsh`: process 0 runs the program, and every other node has a slot.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rsh: bool,
}

/// The environment subset recorded in the manifest: what a fresh launch of the same command
/// depends on. Restarted processes get their environment back from their images, so restart
/// does not apply these; they are there to relaunch from scratch and to see how the job ran.
pub fn recorded_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "PATH" | "LD_LIBRARY_PATH" | "LD_PRELOAD" | "GLIBC_TUNABLES"
            ) || k.starts_with("OMP_")
                || k.starts_with("GOMP_")
                || (k.starts_with("CAIRN_") && !crate::spawn::JOB_ENV.contains(&k.as_str()))
        })
        .collect()
}

/// `<job_dir>/v<version>`.
pub fn version_dir(job_dir: &Path, version: u64) -> PathBuf {
    job_dir.join(format!("v{version}"))
}

/// The image file name of process `proc`.
pub fn image_name(proc: usize) -> String {
    format!("proc{proc}.img")
}

/// The images of process `proc`'s tree other than its own, from the lengths of a checkpoint's
/// images keyed by (process, pid in its tree's namespace; 0 for its own image).
pub fn members_of(sizes: &BTreeMap<(usize, u32), u64>, proc: usize) -> Vec<MemberImage> {
    sizes
        .range((proc, 1)..(proc + 1, 0))
        .map(|(&(_, pid), &bytes)| MemberImage {
            pid,
            bytes,
            region: 0,
        })
        .collect()
}

/// The image file name of the process with pid `pid` (in its tree's namespace) that process
/// `proc` started.
pub fn member_image_name(proc: usize, pid: u32) -> String {
    format!("proc{proc}.{pid}.img")
}

/// A version directory as found on disk.
#[derive(Debug, Clone)]
pub struct VersionDir {
    pub version: u64,
    pub path: PathBuf,
    /// Whether it has a manifest file (which may still fail to load).
    pub has_manifest: bool,
    /// The names of the files in it, sorted.
    pub files: Vec<String>,
}

impl VersionDir {
    /// `v3 (no manifest: proc0.img, proc1.img)` and the like, for messages.
    fn describe(&self) -> String {
        let files = if self.files.is_empty() {
            "empty".to_string()
        } else {
            let mut f = self.files[..self.files.len().min(6)].join(", ");
            if self.files.len() > 6 {
                f.push_str(&format!(" and {} more", self.files.len() - 6));
            }
            f
        };
        format!("v{} (no manifest: {files})", self.version)
    }
}

/// The version directories of a job, oldest first. Names other than `v<N>` are ignored.
pub fn versions(job_dir: &Path) -> Result<Vec<VersionDir>> {
    let rd = match fs::read_dir(job_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format_args!("read {}", job_dir.display()), e)),
    };
    let mut out = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let Some(v) = e
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix('v'))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let path = e.path();
        let mut files: Vec<String> = fs::read_dir(&path)
            .map(|rd| {
                rd.filter_map(|f| f.ok())
                    .map(|f| f.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        out.push(VersionDir {
            version: v,
            has_manifest: files.iter().any(|f| f == MANIFEST),
            path,
            files,
        });
    }
    out.sort_by_key(|v| v.version);
    Ok(out)
}

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format_args!("fsync {}", dir.display()), e))
}

impl Manifest {
    /// Writes `v<N>/manifest.json` atomically: a temporary file, fsync, rename, fsync of the
    /// directory. Until the rename the version is not complete; after the directory's fsync
    /// it stays complete across a crash.
    pub fn publish(&self, job_dir: &Path) -> Result<()> {
        let dir = version_dir(job_dir, self.version);
        let mut text = serde_json::to_string_pretty(self).expect("a manifest serialises");
        text.push('\n');
        // Authenticated checkpoints: the MAC of the manifest's exact bytes, beside it, written
        // first so that a complete version always has it.
        match cairn_core::auth::key() {
            Some(k) => {
                let mac = k.manifest_mac(&cairn_core::auth::launch_manifest_mac_input(
                    text.as_bytes(),
                ));
                crate::jobdir::write_private(&dir, MANIFEST_MAC, format!("{mac}\n").as_bytes())?;
            }
            None => {
                let _ = fs::remove_file(dir.join(MANIFEST_MAC));
            }
        }
        crate::jobdir::write_private(&dir, MANIFEST, text.as_bytes())?;
        fsync_dir(&dir)
    }

    /// Reads and checks the manifest of `version`: the format, the version and the job must
    /// be the ones asked for, and the processes must be numbered 0..n in order.
    pub fn load(job_dir: &Path, job: &str, version: u64) -> Result<Manifest> {
        let path = version_dir(job_dir, version).join(MANIFEST);
        let text = fs::read_to_string(&path)
            .map_err(|e| Error::io(format_args!("read {}", path.display()), e))?;
        if let Some(k) = cairn_core::auth::key() {
            let mac_path = version_dir(job_dir, version).join(MANIFEST_MAC);
            let mac = fs::read(&mac_path).ok().filter(|m| m.len() <= 128);
            let why = match mac {
                None => Some("no MAC beside it"),
                Some(m) => {
                    let m = String::from_utf8_lossy(&m);
                    let input = cairn_core::auth::launch_manifest_mac_input(text.as_bytes());
                    (!k.manifest_mac_ok(&input, m.trim())).then_some("its MAC does not match")
                }
            };
            if let Some(why) = why {
                let e = cairn_core::auth::refused(format!("manifest {}", path.display()), why);
                return Err(Error::new(ErrorKind::Protocol, e.msg));
            }
        }
        let m: Manifest = serde_json::from_str(&text).map_err(|e| {
            Error::new(
                ErrorKind::Protocol,
                format!("{}: not a manifest: {e}", path.display()),
            )
        })?;
        let bad =
            |why: String| Error::new(ErrorKind::Protocol, format!("{}: {why}", path.display()));
        if m.format != FORMAT {
            let why = if m.format == 1 {
                "format 1: its images were files of the version directory, which this cairn no \
                 longer reads (restart it with the cairn that wrote it)"
                    .to_string()
            } else {
                format!("format {} (this cairn reads {FORMAT})", m.format)
            };
            return Err(bad(why));
        }
        if m.version != version || m.job != job {
            return Err(bad(format!(
                "describes version {} of job {}, not version {version} of {job}",
                m.version, m.job
            )));
        }
        if m.procs.is_empty()
            || m.nodes == 0
            || m.procs
                .iter()
                .enumerate()
                .any(|(i, p)| p.proc != i || p.node >= m.nodes)
        {
            return Err(bad(
                "processes not numbered 0..n or on nodes outside 0..nodes".into(),
            ));
        }
        Ok(m)
    }
}

/// The complete versions restart may start from, newest first: `version` alone if given (it
/// must be complete), else every version with a manifest that loads. Whether the engine can
/// still restore each is for the engine to say. Refuses with a message that says what was
/// found when there is none.
pub fn candidates(job_dir: &Path, job: &str, version: Option<u64>) -> Result<Vec<Manifest>> {
    let all = versions(job_dir)?;
    let complete: Vec<u64> = all
        .iter()
        .filter(|v| v.has_manifest)
        .map(|v| v.version)
        .collect();
    let list = |vs: &[u64]| {
        if vs.is_empty() {
            "none".to_string()
        } else {
            vs.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    if let Some(v) = version {
        let Some(found) = all.iter().find(|d| d.version == v) else {
            bail!(
                NotFound,
                "job {job} has no version {v} in {}; complete versions: {}",
                job_dir.display(),
                list(&complete)
            );
        };
        if !found.has_manifest {
            bail!(
                NotFound,
                "version {v} of job {job} is not complete: {}; complete versions: {}",
                found.describe(),
                list(&complete)
            );
        }
        return Ok(vec![Manifest::load(job_dir, job, v)?]);
    }
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for d in all.iter().rev() {
        if !d.has_manifest {
            problems.push(d.describe());
            continue;
        }
        match Manifest::load(job_dir, job, d.version) {
            Ok(m) => out.push(m),
            Err(e) => problems.push(format!("v{}: {e}", d.version)),
        }
    }
    if !out.is_empty() {
        if !problems.is_empty() {
            tracing::warn!("job {job}: passing over {}", problems.join("; "));
        }
        return Ok(out);
    }
    if all.is_empty() {
        bail!(
            NotFound,
            "no checkpoint of job {job}: {} holds no version directory",
            job_dir.display()
        );
    }
    bail!(
        NotFound,
        "no complete checkpoint of job {job} in {}: found {}",
        job_dir.display(),
        problems.join("; ")
    )
}

/// Removes a version directory. A complete one loses its manifest first (and that is made
/// durable), so a crash in the middle never leaves a version that looks complete but is not.
pub fn remove_version(job_dir: &Path, version: u64) -> Result<()> {
    let dir = version_dir(job_dir, version);
    match fs::remove_file(dir.join(MANIFEST)) {
        Ok(()) => fsync_dir(&dir)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::io(
                format_args!("remove the manifest of {}", dir.display()),
                e,
            ))
        }
    }
    fs::remove_dir_all(&dir).map_err(|e| Error::io(format_args!("remove {}", dir.display()), e))
}

/// After version `newest` became complete: removes complete versions beyond the newest
/// `keep`, except those in `also_keep` (the engine still holds them on the global tier),
/// and incomplete versions older than `newest` (left by a crashed root). Returns the complete
/// or incomplete versions removed; failures are logged and skipped.
pub fn prune(
    job_dir: &Path,
    keep: usize,
    also_keep: &std::collections::BTreeSet<u64>,
    newest: u64,
) -> Vec<u64> {
    let Ok(all) = versions(job_dir) else {
        return Vec::new();
    };
    let complete: Vec<u64> = all
        .iter()
        .filter(|v| v.has_manifest && v.version <= newest)
        .map(|v| v.version)
        .collect();
    let doomed_complete = complete.len().saturating_sub(keep.max(1));
    let mut doomed: Vec<u64> = complete[..doomed_complete]
        .iter()
        .copied()
        .filter(|v| !also_keep.contains(v))
        .collect();
    doomed.extend(
        all.iter()
            .filter(|v| !v.has_manifest && v.version < newest)
            .map(|v| v.version),
    );
    doomed.sort_unstable();
    doomed.retain(|&v| match remove_version(job_dir, v) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("cannot delete an old checkpoint: {e}");
            false
        }
    });
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(job: &str, version: u64, sizes: &[u64]) -> Manifest {
        Manifest {
            format: FORMAT,
            job: job.into(),
            version,
            created: 1_700_000_000,
            nodes: 2,
            bytes: sizes.iter().sum(),
            procs: sizes
                .iter()
                .enumerate()
                .map(|(i, &b)| ProcImage {
                    proc: i,
                    node: i * 2 / sizes.len(),
                    host: "h".into(),
                    pid: 100 + i as u32,
                    bytes: b,
                    region: 64 << 10,
                    stored: b / 2,
                    members: Vec::new(),
                    // A job launched with --rsh: proc 1 is a slot that runs a command.
                    slot: (i == 1).then_some(SlotUse::Used),
                })
                .collect(),
            closed: Vec::new(),
            engine: EngineRecord {
                name: job.into(),
                cairn: "0.1.0".into(),
                local: "/l".into(),
                global: "/g".into(),
                redundancy: "partner".into(),
                compress: "lz4".into(),
                incremental: false,
            },
            launch: LaunchRecord {
                command: vec!["./app".into(), "x y".into()],
                cwd: "/tmp".into(),
                env: BTreeMap::from([("PATH".into(), "/bin".into())]),
                affinity: Affinity::On,
                cpus: None,
                interval_secs: Some(600.0),
                timeout_secs: 60.0,
                keep: 2,
                restarts: 0,
                hosts: Vec::new(),
                agent: Vec::new(),
                addrs: vec!["10.0.0.1".into(), "fd00::2".into()],
                rsh: true,
            },
        }
    }

    /// Creates version `v`'s directory (with a stray file) and, if `complete`, its manifest.
    fn write_version(job_dir: &Path, v: u64, complete: bool) {
        let dir = version_dir(job_dir, v);
        fs::create_dir_all(&dir).unwrap();
        if complete {
            manifest("j", v, &[10, 20, 30, 40])
                .publish(job_dir)
                .unwrap();
        } else {
            fs::write(dir.join(".manifest.json.tmp"), b"{").unwrap();
        }
    }

    #[test]
    fn manifest_round_trips_and_is_checked() {
        let t = tempfile::tempdir().unwrap();
        write_version(t.path(), 3, true);
        let m = Manifest::load(t.path(), "j", 3).unwrap();
        assert_eq!(m, manifest("j", 3, &[10, 20, 30, 40]));
        assert!(!version_dir(t.path(), 3).join(".manifest.json.tmp").exists());
        assert!(Manifest::load(t.path(), "other", 3).is_err());
        // A format 1 manifest is refused with a reason.
        let path = version_dir(t.path(), 3).join(MANIFEST);
        let old = fs::read_to_string(&path)
            .unwrap()
            .replace("\"format\": 2", "\"format\": 1");
        fs::write(&path, old).unwrap();
        let e = Manifest::load(t.path(), "j", 3).unwrap_err();
        assert!(
            e.message().contains("format 1: its images were files"),
            "{e}"
        );
    }

    #[test]
    fn candidates_are_the_complete_versions_newest_first() {
        let t = tempfile::tempdir().unwrap();
        let e = candidates(t.path(), "j", None).unwrap_err();
        assert!(e.message().contains("no version directory"), "{e}");
        write_version(t.path(), 1, false);
        let e = candidates(t.path(), "j", None).unwrap_err();
        assert!(
            e.message().contains("v1 (no manifest: .manifest.json.tmp)"),
            "{e}"
        );
        write_version(t.path(), 2, true);
        write_version(t.path(), 3, false);
        write_version(t.path(), 4, true);
        let vs = |c: Vec<Manifest>| c.iter().map(|m| m.version).collect::<Vec<_>>();
        assert_eq!(vs(candidates(t.path(), "j", None).unwrap()), [4, 2]);
        assert_eq!(vs(candidates(t.path(), "j", Some(2)).unwrap()), [2]);
        let e = candidates(t.path(), "j", Some(3)).unwrap_err();
        assert!(
            e.message().contains("version 3 of job j is not complete"),
            "{e}"
        );
        assert!(e.message().contains("complete versions: 2, 4"), "{e}");
        assert!(candidates(t.path(), "j", Some(9)).is_err());
        // A manifest that does not load is passed over.
        fs::write(version_dir(t.path(), 4).join(MANIFEST), b"{}").unwrap();
        assert_eq!(vs(candidates(t.path(), "j", None).unwrap()), [2]);
    }

    #[test]
    fn prune_keeps_the_newest_complete_versions() {
        let t = tempfile::tempdir().unwrap();
        write_version(t.path(), 1, true);
        write_version(t.path(), 2, false);
        write_version(t.path(), 3, true);
        write_version(t.path(), 4, true);
        write_version(t.path(), 5, false); // a checkpoint in progress
        let none = std::collections::BTreeSet::new();
        assert_eq!(prune(t.path(), 2, &none, 4), vec![1, 2]);
        let left: Vec<u64> = versions(t.path())
            .unwrap()
            .iter()
            .map(|v| v.version)
            .collect();
        assert_eq!(left, [3, 4, 5]);
        assert_eq!(prune(t.path(), 2, &none, 4), Vec::<u64>::new());
        // A version the engine holds on the global tier stays.
        write_version(t.path(), 6, true);
        assert_eq!(prune(t.path(), 1, &[3].into(), 6), vec![4, 5]);
        assert_eq!(complete(t.path()), [3, 6]);
    }

    fn complete(job_dir: &Path) -> Vec<u64> {
        versions(job_dir)
            .unwrap()
            .iter()
            .filter(|v| v.has_manifest)
            .map(|v| v.version)
            .collect()
    }
}
