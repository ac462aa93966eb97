//! Where a checkpoint's objects live inside a tier, and how to enumerate them.
//!
//! ```text
//! <tier root>/<name>/v<version>/manifest.json     written last, by one rank per node (node-local
//!                                                tiers) or by rank 0 (global tier)
//! <tier root>/<name>/v<version>/rank<r>.ckpt      rank r's part (cairn_format::container)
//! <tier root>/<name>/v<version>/rank<r>.done      global tier: rank r's flush is committed
//!                                                (a manifest listing rank r alone)
//! ```
//! A node-local tier's root is `<tiers.local>/node<i>/` for node `i`.

use crate::error::Result;
use cairn_format::{check_name, Manifest};
use cairn_tier::Tier;

pub const MANIFEST: &str = "manifest.json";

pub fn version_dir(name: &str, version: i64) -> String {
    format!("{name}/v{version}")
}

pub fn manifest_key(name: &str, version: i64) -> String {
    format!("{name}/v{version}/{MANIFEST}")
}

pub fn rank_key(name: &str, version: i64, rank: usize) -> String {
    format!("{name}/v{version}/rank{rank}.ckpt")
}

/// The commit record of rank `rank`'s flush of `name` v`version` to the global tier.
pub fn commit_key(name: &str, version: i64, rank: usize) -> String {
    format!("{name}/v{version}/rank{rank}.done")
}

/// Parse `rank<r>.ckpt`.
pub fn parse_rank_file(file: &str) -> Option<usize> {
    let r = file.strip_prefix("rank")?.strip_suffix(".ckpt")?;
    if r.is_empty() || !r.bytes().all(|b| b.is_ascii_digit()) || (r.len() > 1 && r.starts_with('0'))
    {
        return None;
    }
    r.parse().ok()
}

/// Versions stored under `name` on a tier (whatever their state), ascending.
pub fn versions(tier: &dyn Tier, name: &str) -> Result<Vec<i64>> {
    let mut v: Vec<i64> = tier
        .list(name)?
        .iter()
        .filter_map(|d| d.strip_prefix('v'))
        .filter(|d| {
            !d.is_empty()
                && d.bytes().all(|b| b.is_ascii_digit())
                && (d.len() == 1 || !d.starts_with('0'))
        })
        .filter_map(|d| d.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// Checkpoint names stored on a tier.
pub fn names(tier: &dyn Tier) -> Result<Vec<String>> {
    Ok(tier
        .list("")?
        .into_iter()
        .filter(|n| check_name(n).is_ok() && !n.starts_with("node"))
        .collect())
}

/// The largest manifest read: one lists each rank in about 10 bytes, so 64M is millions of
/// ranks; a larger one is damage or a forgery, refused before it is read.
pub const MANIFEST_MAX: u64 = 64 << 20;

/// Read and validate the manifest of one version; `Ok(None)` when there is none (the
/// checkpoint was never completed on this tier, or is being deleted).
pub fn read_manifest(tier: &dyn Tier, name: &str, version: i64) -> Result<Option<Manifest>> {
    read_manifest_at(tier, name, version, &manifest_key(name, version))
}

/// Read and validate rank `rank`'s commit record of `name` v`version` (a manifest that
/// lists that rank alone); `Ok(None)` when there is none.
pub fn read_commit(
    tier: &dyn Tier,
    name: &str,
    version: i64,
    rank: usize,
) -> Result<Option<Manifest>> {
    let m = read_manifest_at(tier, name, version, &commit_key(name, version, rank))?;
    match m {
        Some(m) if m.ranks != [rank as u32] => Err(crate::Error::new(
            crate::ErrorKind::Corrupt,
            format!(
                "{} tier {}/{}: a commit record of rank {rank} lists ranks {:?}",
                tier.label(),
                tier.location(),
                commit_key(name, version, rank),
                m.ranks
            ),
        )),
        m => Ok(m),
    }
}

fn read_manifest_at(
    tier: &dyn Tier,
    name: &str,
    version: i64,
    key: &str,
) -> Result<Option<Manifest>> {
    match tier.get_at_most(key, MANIFEST_MAX, "manifest") {
        Ok(bytes) => {
            let at = || format!("{} tier {}/{key}", tier.label(), tier.location());
            let (m, mac) =
                Manifest::decode_auth(&bytes).map_err(|e| crate::Error::from(e).context(at()))?;
            crate::auth::check_manifest(&m, mac.as_deref(), at)?;
            if m.name != name || m.version != version {
                return Err(crate::Error::new(
                    crate::ErrorKind::Corrupt,
                    format!(
                        "{} tier {}/{key} describes {} v{}",
                        tier.label(),
                        tier.location(),
                        m.name,
                        m.version
                    ),
                ));
            }
            Ok(Some(m))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_format::is_node_dir;

    /// A manifest larger than a manifest may be (sparse: nothing is written) is refused by
    /// its size, not read.
    #[test]
    fn an_oversized_manifest_is_refused_unread() {
        let d = tempfile::tempdir().unwrap();
        let tier = cairn_tier::DirTier::new("global", d.path().join("r"), false).unwrap();
        let path = d.path().join("r").join(manifest_key("big", 1));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::File::create(&path)
            .unwrap()
            .set_len(MANIFEST_MAX + 1)
            .unwrap();
        let e = read_manifest(&tier, "big", 1).unwrap_err().to_string();
        assert!(e.contains("more than a manifest may have"), "{e}");
    }

    #[test]
    fn node_directories_are_not_names() {
        assert!(is_node_dir("node0") && is_node_dir("node12"));
        assert!(!is_node_dir("nodes") && !is_node_dir("node") && !is_node_dir("node1a"));
        assert!(check_name("node7").is_err() && check_name("nodes").is_ok());
    }

    #[test]
    fn rank_files_parse_strictly() {
        assert_eq!(parse_rank_file("rank12.ckpt"), Some(12));
        assert_eq!(parse_rank_file("rank0.ckpt"), Some(0));
        for bad in [
            "rank.ckpt",
            "rank01.ckpt",
            "rank-1.ckpt",
            "rank1.ckpt.tmp.5.0",
            "x",
        ] {
            assert_eq!(parse_rank_file(bad), None, "{bad}");
        }
    }
}
