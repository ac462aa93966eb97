//! Where the processes of a job write their images before the engine takes them.
//!
//! Each node stages its processes' images beside its data on the engine's node-local tier,
//! `<local>/node<k>/.launch/<job>/`, when that tier is a directory: an image written there
//! is on the tier's file system, so the engine takes the file over where it lies
//! (`cairn_core::part::write_part_files`) instead of copying it, and every byte of a full
//! checkpoint is written once, by the process that owns it. With the shared-memory tier or
//! no node-local tier the images are staged in `<dir>/<job>/stage/node<k>/` and the engine
//! copies them. Under either root, `v<N>/` holds the images of checkpoint N and `restart/`
//! those a restart had the engine copy out (an image the engine kept where the process wrote
//! it is read there). The engine's listings skip names starting with a dot, so `.launch` is
//! never taken for a checkpoint name.
//!
//! Each node's root is its sub-coordinator's alone: it creates, prunes and removes what is
//! under it ([`Staging::of_node`]), on its own host, and no other process of the job does.

use crate::error::{Error, Result};
use cairn_core::{Config, NodeLocal};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The staging directories of a job, one root per node (see the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Staging {
    roots: Vec<PathBuf>,
    /// `<dir>/<job>/stage`: above the roots when the tier is not a directory, and where a
    /// job staged before it was (cleared with the others).
    shared: PathBuf,
    /// Only this node's root is created, pruned and removed (a sub-coordinator's view).
    #[serde(default)]
    only: Option<usize>,
    /// The engine's block size when it takes the images over where they lie (a directory
    /// tier, no compression, no incremental checkpoints), 0 otherwise: the processes then
    /// hash their images' blocks while writing them (`<image>.hashes`), and the engine
    /// records those hashes instead of reading every image back to hash it.
    #[serde(default)]
    hash_block: u32,
}

/// The directory of a restart's images under a staging root.
const RESTART: &str = "restart";

impl Staging {
    /// The staging of job `job` in `job_dir` over `nodes` nodes, for the engine
    /// configuration `cfg`.
    pub fn new(cfg: &Config, job_dir: &Path, job: &str, nodes: usize) -> Staging {
        let shared = job_dir.join("stage");
        let adopts = matches!(cfg.node_local(), NodeLocal::Dir(_))
            && cfg.compress == "none"
            && !cfg.incremental;
        let roots = match cfg.node_local() {
            NodeLocal::Dir(local) => {
                let local = std::path::absolute(local).unwrap_or_else(|_| local.to_path_buf());
                (0..nodes.max(1))
                    .map(|k| local.join(format!("node{k}")).join(".launch").join(job))
                    .collect()
            }
            NodeLocal::Mem | NodeLocal::None => (0..nodes.max(1))
                .map(|k| shared.join(format!("node{k}")))
                .collect(),
        };
        Staging {
            roots,
            shared,
            only: None,
            hash_block: if adopts { cfg.block } else { 0 },
        }
    }

    /// The block size processes hash their images in while writing them, if any (0).
    pub fn hash_block(&self) -> u32 {
        self.hash_block
    }

    /// The view of node `node`'s sub-coordinator: every change touches its root only.
    pub fn of_node(&self, node: usize) -> Staging {
        Staging {
            only: Some(node.min(self.roots.len() - 1)),
            ..self.clone()
        }
    }

    /// The nodes whose roots this view changes.
    fn nodes(&self) -> std::ops::Range<usize> {
        match self.only {
            Some(k) => k..k + 1,
            None => 0..self.roots.len(),
        }
    }

    fn root(&self, node: usize) -> &Path {
        &self.roots[node.min(self.roots.len() - 1)]
    }

    /// `<root of node>/v<version>`: where the processes of `node` write checkpoint `version`.
    pub fn version_dir(&self, node: usize, version: u64) -> PathBuf {
        self.root(node).join(format!("v{version}"))
    }

    /// `<root of node>/restart`: where the engine copies the restored images of `node`.
    pub fn restart_dir(&self, node: usize) -> PathBuf {
        self.root(node).join(RESTART)
    }

    /// Every root of the view once, and for the whole job's view the shared one.
    fn all_roots(&self) -> BTreeSet<&Path> {
        let mut all: BTreeSet<&Path> = self.nodes().map(|k| self.roots[k].as_path()).collect();
        if self.only.is_none() {
            all.insert(&self.shared);
        }
        all
    }

    /// Creates the private directory of `version` on every node of the view.
    pub fn create_version(&self, version: u64) -> Result<()> {
        for node in self.nodes() {
            crate::jobdir::create_private_dir(&self.version_dir(node, version))?;
        }
        Ok(())
    }

    /// Creates the private restart directory on every node of the view.
    pub fn create_restart(&self) -> Result<()> {
        for node in self.nodes() {
            crate::jobdir::create_private_dir(&self.restart_dir(node))?;
        }
        Ok(())
    }

    /// Removes the directories of `version` (its images, if the engine left any).
    pub fn remove_version(&self, version: u64) {
        for root in self.all_roots() {
            remove(&root.join(format!("v{version}")));
        }
    }

    /// Removes the restart directories.
    pub fn remove_restart(&self) {
        for root in self.all_roots() {
            remove(&root.join(RESTART));
        }
    }

    /// Removes the directories of every version before `newest`, the newest complete one
    /// (images the engine has taken, or that failed checkpoints left). The images of
    /// `newest` the engine did not take over stay until a newer checkpoint completes: a
    /// restart on the same nodes reads them in place, after checking every block against
    /// the checkpoint, instead of having the engine assemble them again from an incremental
    /// chain or decompress them. They take no more room than each checkpoint needs while
    /// its processes write.
    pub fn prune(&self, newest: u64) {
        self.remove_versions(|v| v < newest);
    }

    /// Removes the directories of every version but `version`.
    pub fn keep_only(&self, version: u64) {
        self.remove_versions(|v| v != version);
    }

    /// Removes the directories of every version: the job ended well and will not restart.
    pub fn remove_versions_all(&self) {
        self.remove_versions(|_| true);
    }

    fn remove_versions(&self, doomed: impl Fn(u64) -> bool) {
        for root in self.all_roots() {
            let Ok(rd) = fs::read_dir(root) else { continue };
            for e in rd.filter_map(|e| e.ok()) {
                if version_of(&e.file_name()).is_some_and(&doomed) {
                    remove(&e.path());
                }
            }
        }
    }

    /// Removes everything staged on every node but the versions' directories (the images
    /// a restart may read in place): nothing of the job runs, so what is there is from a
    /// run that ended.
    pub fn clear(&self) -> Result<()> {
        for root in self.all_roots() {
            let rd = match fs::read_dir(root) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format_args!("list {}", root.display()), e)),
            };
            for e in rd {
                let e = e.map_err(|e| Error::io(format_args!("list {}", root.display()), e))?;
                if version_of(&e.file_name()).is_some() {
                    continue;
                }
                let path = e.path();
                let gone = match e.file_type() {
                    Ok(t) if t.is_dir() => fs::remove_dir_all(&path),
                    _ => fs::remove_file(&path),
                };
                match gone {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(format_args!("remove {}", path.display()), e)),
                }
            }
        }
        Ok(())
    }

    /// The length of the longest path an image of `procs` processes can have.
    pub fn longest_path(&self, procs: usize) -> usize {
        let name = crate::manifest::member_image_name(procs.saturating_sub(1), u32::MAX);
        self.roots
            .iter()
            .map(|r| {
                r.join(format!("v{}", u32::MAX))
                    .join(&name)
                    .as_os_str()
                    .len()
            })
            .max()
            .unwrap_or(0)
    }
}

/// N of a version's directory `v<N>`.
fn version_of(name: &std::ffi::OsStr) -> Option<u64> {
    name.to_str()?.strip_prefix('v')?.parse().ok()
}

fn remove(path: &Path) {
    match fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_staged_beside_each_nodes_data_on_a_directory_tier() {
        let t = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            local: Some(t.path().join("local")),
            ..Config::default()
        };
        let job_dir = t.path().join("jobs").join("j1");
        let s = Staging::new(&cfg, &job_dir, "j1", 2);
        assert_eq!(
            s.version_dir(1, 7),
            t.path().join("local/node1/.launch/j1/v7")
        );
        assert_eq!(
            s.restart_dir(0),
            t.path().join("local/node0/.launch/j1/restart")
        );
        s.create_version(3).unwrap();
        s.create_version(5).unwrap();
        s.create_restart().unwrap();
        // The newest complete version's images stay for a restart in place.
        s.prune(5);
        assert!(!s.version_dir(0, 3).exists() && !s.version_dir(1, 3).exists());
        assert!(s.version_dir(0, 5).exists() && s.version_dir(1, 5).exists());
        s.remove_restart();
        assert!(!s.restart_dir(1).exists());
        // Clearing for a restart keeps the versions and removes anything else.
        s.create_restart().unwrap();
        fs::write(s.version_dir(0, 5).join("proc0.img"), b"image").unwrap();
        fs::write(t.path().join("local/node0/.launch/j1/stray"), b"x").unwrap();
        s.clear().unwrap();
        assert!(s.version_dir(0, 5).join("proc0.img").exists());
        assert!(!s.restart_dir(0).exists());
        assert!(!t.path().join("local/node0/.launch/j1/stray").exists());
        s.create_version(6).unwrap();
        s.keep_only(6);
        assert!(!s.version_dir(0, 5).exists() && s.version_dir(1, 6).exists());

        cfg.local = None;
        cfg.local_mem = true;
        let s = Staging::new(&cfg, &job_dir, "j1", 2);
        assert_eq!(s.version_dir(1, 7), job_dir.join("stage/node1/v7"));
    }

    #[test]
    fn a_nodes_view_changes_its_own_root_only() {
        let t = tempfile::tempdir().unwrap();
        let cfg = Config {
            local: None,
            local_mem: true,
            ..Config::default()
        };
        let job_dir = t.path().join("j1");
        let all = Staging::new(&cfg, &job_dir, "j1", 2);
        let (n0, n1) = (all.of_node(0), all.of_node(1));
        n0.create_version(4).unwrap();
        assert!(all.version_dir(0, 4).exists() && !all.version_dir(1, 4).exists());
        n1.create_version(4).unwrap();
        n1.create_restart().unwrap();
        n0.remove_version(4);
        assert!(!all.version_dir(0, 4).exists() && all.version_dir(1, 4).exists());
        n0.remove_versions_all();
        n0.remove_restart();
        assert!(all.restart_dir(1).exists());
        n0.clear().unwrap();
        assert!(all.restart_dir(1).exists());
        n1.clear().unwrap();
        assert!(!all.restart_dir(1).exists() && all.version_dir(1, 4).exists());
    }
}
