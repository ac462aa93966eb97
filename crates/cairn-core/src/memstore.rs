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
    // SAFETY: getuid(2) has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let name = store_name(uid, &job_name(), owner);
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
