//! Which shared-memory store a process uses: the name and sizes, from `[tiers.mem]`, the job
//! (`CAIRN_JOB`, else `SLURM_JOB_ID`, else `local`) and the node or process. The interposer
//! (`native/fs`) names stores by the same rules, so the engine's `mem` tier and programs
//! under `cairn fs run` on one node share one store.

use crate::config::Config;
use cairn_comm::Topology;
use cairn_tier::cairn_shm::{spill_path, store_name, StoreConfig, StoreOwner};

/// The job a store belongs to.
pub fn job_name() -> String {
    ["CAIRN_JOB", "SLURM_JOB_ID"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| "local".into())
}

/// The store of this rank: its node's, or its own with `store = "process"` (by its rank on
/// the host, so a restarted rank finds it). `CAIRN_NODE` overrides the node.
pub fn owner(cfg: &Config, topo: &Topology) -> StoreOwner {
    if cfg.mem.per_process {
        return StoreOwner::Process(topo.host_rank as u32 + 1);
    }
    let node = std::env::var("CAIRN_NODE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(topo.host_node as u32);
    StoreOwner::Node(node)
}

/// How to open (creating if missing) the store of `owner` in this job.
pub fn store_config(cfg: &Config, owner: StoreOwner) -> StoreConfig {
    let name = store_name(uid(), &job_name(), owner);
    StoreConfig {
        spill: cfg.mem.spill_dir.as_deref().map(|d| spill_path(d, &name)),
        name,
        size: cfg.mem.size,
        chunk: cfg.mem.chunk,
        max_files: cfg.mem.max_files,
        spill_size: cfg.mem.spill_size,
        per_process: cfg.mem.per_process,
        create: true,
        populate: true,
    }
}

/// Where POSIX shared-memory segments appear as files (Linux).
pub const SHM_DIR: &str = "/dev/shm";

fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The common start of this user's store names in this job, `/cairn-<uid>-<job>-`.
fn job_prefix() -> String {
    let name = store_name(uid(), &job_name(), StoreOwner::Node(0));
    name.strip_suffix("n0")
        .expect("store names end in n<node>")
        .to_string()
}

/// `/dev/shm/cairn-<uid>-<job>-n*`: where this job's stores are looked for, for messages.
pub fn job_pattern() -> String {
    format!("{SHM_DIR}{}n*", job_prefix())
}

/// `n<node>` or `p<process>` as [`store_name`] writes them (plain decimal).
fn parse_owner(s: &str) -> Option<StoreOwner> {
    let (kind, digits) = s.split_at_checked(1)?;
    let n: u32 = digits.parse().ok()?;
    if n.to_string() != digits {
        return None;
    }
    match kind {
        "n" => Some(StoreOwner::Node(n)),
        "p" if n > 0 => Some(StoreOwner::Process(n)),
        _ => None,
    }
}

/// This user's stores of the current job ([`job_name`]) present in [`SHM_DIR`], with their
/// shared-memory names: per-node stores by node index, then per-process stores.
pub fn job_stores() -> std::io::Result<Vec<(StoreOwner, String)>> {
    let prefix = job_prefix();
    let lead = prefix.trim_start_matches('/');
    let entries = match std::fs::read_dir(SHM_DIR) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let file = entry?.file_name();
        let Some(file) = file.to_str() else { continue };
        if let Some(owner) = file.strip_prefix(lead).and_then(parse_owner) {
            out.push((owner, format!("/{file}")));
        }
    }
    out.sort_by_key(|(o, _)| match o {
        StoreOwner::Node(n) => (0, *n),
        StoreOwner::Process(p) => (1, *p),
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_parse_only_as_store_name_writes_them() {
        assert_eq!(parse_owner("n0"), Some(StoreOwner::Node(0)));
        assert_eq!(parse_owner("n12"), Some(StoreOwner::Node(12)));
        assert_eq!(parse_owner("p3"), Some(StoreOwner::Process(3)));
        for bad in [
            "", "n", "n01", "n+1", "n-1", "p0", "n1.spill", "x1", "n1-n0",
        ] {
            assert_eq!(parse_owner(bad), None, "{bad}");
        }
    }
}
