//! Checkpoint versions of a job: `<dir>/<job>/v<N>/proc<i>.img`, written by the processes, and
//! `v<N>/manifest.json`, written by the root once every image is in place. Only a manifest
//! makes a version complete: restart never considers a version without one, and old versions
//! are deleted only after a newer one is complete. The format is in `docs/coordinator.md`.

use crate::error::{bail, Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

/// The manifest's file name inside a version directory.
pub const MANIFEST: &str = "manifest.json";
/// The manifest format this code writes and reads.
pub const FORMAT: u32 = 1;

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
    /// The image's file name, relative to the version directory.
    pub image: String,
    pub bytes: u64,
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
                || (k.starts_with("CAIRN_") && !crate::launch::JOB_ENV.contains(&k.as_str()))
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
        crate::jobdir::write_private(&dir, MANIFEST, text.as_bytes())?;
        fsync_dir(&dir)
    }

    /// Reads and checks the manifest of `version`: the format, the version and the job must
    /// be the ones asked for, and the processes must be numbered 0..n in order.
    pub fn load(job_dir: &Path, job: &str, version: u64) -> Result<Manifest> {
        let path = version_dir(job_dir, version).join(MANIFEST);
        let text = fs::read_to_string(&path)
            .map_err(|e| Error::io(format_args!("read {}", path.display()), e))?;
        let m: Manifest = serde_json::from_str(&text).map_err(|e| {
            Error::new(
                ErrorKind::Protocol,
                format!("{}: not a manifest: {e}", path.display()),
            )
        })?;
        let bad =
            |why: String| Error::new(ErrorKind::Protocol, format!("{}: {why}", path.display()));
        if m.format != FORMAT {
            return Err(bad(format!(
                "format {} (this cairn reads {FORMAT})",
                m.format
            )));
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

    /// Checks that every image the manifest lists is a regular file of the recorded size.
    pub fn check_images(&self, job_dir: &Path) -> Result<()> {
        let dir = version_dir(job_dir, self.version);
        for p in &self.procs {
            let path = dir.join(&p.image);
            let ok = crate::launch::is_plain_name(&p.image)
                && fs::symlink_metadata(&path)
                    .map(|m| m.is_file() && m.len() == p.bytes)
                    .unwrap_or(false);
            if !ok {
                bail!(
                    NotFound,
                    "version {} of job {}: the image of proc {} ({}) is missing or not {} bytes",
                    self.version,
                    self.job,
                    p.proc,
                    path.display(),
                    p.bytes
                );
            }
        }
        Ok(())
    }
}

/// The manifest restart starts from: `version` if given (it must be complete), else the
/// newest complete version whose images are all there. Refuses with a message that says what
/// was found when there is none.
pub fn choose(job_dir: &Path, job: &str, version: Option<u64>) -> Result<Manifest> {
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
        let m = Manifest::load(job_dir, job, v)?;
        m.check_images(job_dir)?;
        return Ok(m);
    }
    let mut problems = Vec::new();
    for d in all.iter().rev() {
        if !d.has_manifest {
            problems.push(d.describe());
            continue;
        }
        match Manifest::load(job_dir, job, d.version).and_then(|m| {
            m.check_images(job_dir)?;
            Ok(m)
        }) {
            Ok(m) => {
                if !problems.is_empty() {
                    tracing::warn!(
                        "job {job}: restarting from version {}, passing over {}",
                        m.version,
                        problems.join("; ")
                    );
                }
                return Ok(m);
            }
            Err(e) => problems.push(format!("v{}: {e}", d.version)),
        }
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

/// After version `newest` became complete: removes complete versions beyond the newest `keep`
/// and incomplete versions older than `newest` (left by failed checkpoints or a crashed
/// root). Returns the versions removed; failures are logged and skipped.
pub fn prune(job_dir: &Path, keep: usize, newest: u64) -> Vec<u64> {
    let Ok(all) = versions(job_dir) else {
        return Vec::new();
    };
    let keep = keep.max(1);
    let complete: Vec<u64> = all
        .iter()
        .filter(|v| v.has_manifest && v.version <= newest)
        .map(|v| v.version)
        .collect();
    let doomed_complete = complete.len().saturating_sub(keep);
    let mut doomed: Vec<u64> = complete[..doomed_complete].to_vec();
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
                    image: image_name(i),
                    bytes: b,
                })
                .collect(),
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
            },
        }
    }

    /// Writes the images of a version and, if `complete`, its manifest.
    fn write_version(job_dir: &Path, v: u64, complete: bool) {
        let sizes = [10, 20, 30, 40];
        let dir = version_dir(job_dir, v);
        fs::create_dir_all(&dir).unwrap();
        for (i, &s) in sizes.iter().enumerate() {
            fs::write(dir.join(image_name(i)), vec![7u8; s as usize]).unwrap();
        }
        if complete {
            manifest("j", v, &sizes).publish(job_dir).unwrap();
        }
    }

    #[test]
    fn manifest_round_trips_and_is_checked() {
        let t = tempfile::tempdir().unwrap();
        write_version(t.path(), 3, true);
        let m = Manifest::load(t.path(), "j", 3).unwrap();
        assert_eq!(m, manifest("j", 3, &[10, 20, 30, 40]));
        m.check_images(t.path()).unwrap();
        assert!(!version_dir(t.path(), 3).join(".manifest.json.tmp").exists());
        assert!(Manifest::load(t.path(), "other", 3).is_err());
        fs::write(version_dir(t.path(), 3).join(image_name(2)), b"short").unwrap();
        let e = m.check_images(t.path()).unwrap_err();
        assert!(e.message().contains("proc 2"), "{e}");
    }

    #[test]
    fn choose_takes_the_newest_complete_and_refuses_incomplete() {
        let t = tempfile::tempdir().unwrap();
        let e = choose(t.path(), "j", None).unwrap_err();
        assert!(e.message().contains("no version directory"), "{e}");
        write_version(t.path(), 1, false);
        let e = choose(t.path(), "j", None).unwrap_err();
        assert!(
            e.message()
                .contains("v1 (no manifest: proc0.img, proc1.img"),
            "{e}"
        );
        write_version(t.path(), 2, true);
        write_version(t.path(), 3, false);
        assert_eq!(choose(t.path(), "j", None).unwrap().version, 2);
        assert_eq!(choose(t.path(), "j", Some(2)).unwrap().version, 2);
        let e = choose(t.path(), "j", Some(3)).unwrap_err();
        assert!(
            e.message().contains("version 3 of job j is not complete"),
            "{e}"
        );
        assert!(e.message().contains("complete versions: 2"), "{e}");
        assert!(choose(t.path(), "j", Some(9)).is_err());
        // A complete version with a lost image is passed over for an older one.
        write_version(t.path(), 4, true);
        fs::remove_file(version_dir(t.path(), 4).join(image_name(1))).unwrap();
        assert_eq!(choose(t.path(), "j", None).unwrap().version, 2);
    }

    #[test]
    fn prune_keeps_the_newest_complete_versions() {
        let t = tempfile::tempdir().unwrap();
        write_version(t.path(), 1, true);
        write_version(t.path(), 2, false);
        write_version(t.path(), 3, true);
        write_version(t.path(), 4, true);
        write_version(t.path(), 5, false); // a checkpoint in progress
        assert_eq!(prune(t.path(), 2, 4), vec![1, 2]);
        let left: Vec<u64> = versions(t.path())
            .unwrap()
            .iter()
            .map(|v| v.version)
            .collect();
        assert_eq!(left, [3, 4, 5]);
        assert_eq!(prune(t.path(), 2, 4), Vec::<u64>::new());
    }
}
