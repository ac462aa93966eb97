//! Redundancy across nodes: which ranks protect which ([`plan`]), and the erasure codes over
//! a set's stripes ([`stripe`]). Pure computation: no I/O, no messages; the engine moves the
//! bytes.
//!
//! - `partner`: every rank's part is also stored on a partner in the next failure domain of
//!   its row (ranks with the same position inside their domains form a row).
//! - `xor`: sets of `n` ranks in distinct domains; each member's part is cut into `n - 1`
//!   segments and every member holds the XOR parity of one stripe, so any one lost member is
//!   rebuilt from the others (storage `1 / (n - 1)` of the data).
//! - `rs`: the same layout with `m` parity shards per stripe from a Reed-Solomon code, so any
//!   `m` lost members of a set are rebuilt (storage `m / (n - m)`).
//!
//! ```
//! use cairn_redundancy::{plan, Scheme, Settings};
//! use cairn_comm::Topology;
//! let hosts: Vec<(String, String)> = (0..8).map(|_| ("h".to_string(), String::new())).collect();
//! let topo = Topology::from_hosts(0, &hosts, 4, false).unwrap(); // 4 simulated nodes
//! let p = plan(&Settings { scheme: Scheme::Rs, set_size: 4, parity: 2 }, &topo).unwrap();
//! assert_eq!(p.sets, vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
//! ```
#![forbid(unsafe_code)]

pub mod stripe;

use cairn_comm::Topology;

/// The configured redundancy scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Single,
    Partner,
    Xor,
    Rs,
}

impl Scheme {
    pub fn parse(s: &str) -> Option<Scheme> {
        match s {
            "single" => Some(Scheme::Single),
            "partner" => Some(Scheme::Partner),
            "xor" => Some(Scheme::Xor),
            "rs" => Some(Scheme::Rs),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheme::Single => "single",
            Scheme::Partner => "partner",
            Scheme::Xor => "xor",
            Scheme::Rs => "rs",
        }
    }
}

/// Settings from `[redundancy]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub scheme: Scheme,
    /// Members per set for xor / rs; 0 picks as many failure domains as there are, up to 8.
    pub set_size: usize,
    /// Parity shards per stripe for rs (xor always has 1).
    pub parity: usize,
}

/// Who protects whom in this job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub scheme: Scheme,
    /// partner: the rank that stores a copy of rank r's part.
    pub partner_dest: Vec<usize>,
    /// partner: the rank whose copy rank r stores.
    pub partner_src: Vec<usize>,
    /// xor / rs: the sets, each a list of ranks in member order.
    pub sets: Vec<Vec<usize>>,
    /// xor / rs: parity shards per stripe.
    pub parity: usize,
}

impl Plan {
    /// A readable description, e.g. `rs(4+2)`, `xor(4)`, `partner`, `single`.
    pub fn describe(&self) -> String {
        match self.scheme {
            Scheme::Xor => format!("xor({})", self.sets.first().map_or(0, Vec::len)),
            Scheme::Rs => {
                let n = self.sets.first().map_or(0, Vec::len);
                format!("rs({}+{})", n - self.parity, self.parity)
            }
            s => s.name().to_string(),
        }
    }

    /// The set holding `rank` and its member index, for xor / rs.
    pub fn set_of(&self, rank: usize) -> Option<(usize, usize)> {
        self.sets
            .iter()
            .enumerate()
            .find_map(|(s, set)| set.iter().position(|r| *r == rank).map(|i| (s, i)))
    }
}

/// Ranks grouped by failure domain (domains ordered by their lowest rank), then arranged in
/// rows: row p holds the p-th rank of every domain that has one, in domain order.
fn rows(topo: &Topology) -> (usize, Vec<Vec<usize>>) {
    let mut domains: Vec<usize> = Vec::new();
    for d in &topo.domain_of {
        if !domains.contains(d) {
            domains.push(*d);
        }
    }
    let members: Vec<Vec<usize>> = domains
        .iter()
        .map(|d| {
            (0..topo.size)
                .filter(|r| topo.domain_of[*r] == *d)
                .collect()
        })
        .collect();
    let depth = members.iter().map(Vec::len).max().unwrap_or(0);
    let rows = (0..depth)
        .map(|p| members.iter().filter_map(|m| m.get(p).copied()).collect())
        .collect();
    (domains.len(), rows)
}

/// Work out partners or sets for `settings` on `topo`, or explain why the scheme cannot
/// protect this job (never a silent downgrade).
pub fn plan(settings: &Settings, topo: &Topology) -> Result<Plan, String> {
    let (ndomains, rows) = rows(topo);
    let mut plan = Plan {
        scheme: settings.scheme,
        partner_dest: Vec::new(),
        partner_src: Vec::new(),
        sets: Vec::new(),
        parity: 0,
    };
    match settings.scheme {
        Scheme::Single => {}
        Scheme::Partner => {
            if ndomains < 2 {
                return Err(format!(
                    "redundancy scheme \"partner\" needs at least 2 failure domains (nodes), but all {} ranks are in one; run on more nodes, set [topology] sim_nodes, or use scheme \"single\"",
                    topo.size
                ));
            }
            if rows.iter().any(|r| r.len() != ndomains) {
                return Err(format!(
                    "redundancy scheme \"partner\" needs the same number of ranks in every failure domain; ranks per domain are {:?}",
                    (0..ndomains).map(|d| rows.iter().filter(|r| r.len() > d).count()).collect::<Vec<_>>()
                ));
            }
            plan.partner_dest = vec![0; topo.size];
            plan.partner_src = vec![0; topo.size];
            for row in &rows {
                for (i, r) in row.iter().enumerate() {
                    plan.partner_dest[*r] = row[(i + 1) % row.len()];
                    plan.partner_src[*r] = row[(i + row.len() - 1) % row.len()];
                }
            }
        }
        Scheme::Xor | Scheme::Rs => {
            let m = if settings.scheme == Scheme::Xor {
                1
            } else {
                settings.parity
            };
            let name = settings.scheme.name();
            if m == 0 {
                return Err("[redundancy] parity must be at least 1 for scheme \"rs\"".into());
            }
            let n = if settings.set_size == 0 {
                ndomains.min(8)
            } else {
                settings.set_size
            };
            if n > ndomains {
                return Err(format!(
                    "[redundancy] set_size = {n} but the job has only {ndomains} failure domain(s) (nodes); members of a set must be in distinct domains"
                ));
            }
            if m >= n {
                return Err(format!(
                    "scheme \"{name}\" with {m} parity shard(s) needs sets larger than {m}, but sets have {n} member(s) ({ndomains} failure domain(s)); lower [redundancy] parity or add nodes"
                ));
            }
            for row in &rows {
                if row.len() <= m {
                    return Err(format!(
                        "rank(s) {row:?} cannot form a \"{name}\" set of more than {m} members in distinct failure domains (ranks per domain differ); use the same number of ranks on every node"
                    ));
                }
                let mut chunks: Vec<Vec<usize>> = row.chunks(n).map(<[usize]>::to_vec).collect();
                if chunks.len() > 1 && chunks.last().is_some_and(|c| c.len() <= m) {
                    let tail = chunks.pop().unwrap();
                    chunks.last_mut().unwrap().extend(tail);
                }
                plan.sets.extend(chunks);
            }
            plan.parity = m;
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(size: usize, nodes: usize) -> Topology {
        let hosts: Vec<(String, String)> = (0..size)
            .map(|_| ("h".to_string(), String::new()))
            .collect();
        Topology::from_hosts(0, &hosts, nodes, false).unwrap()
    }

    fn settings(scheme: Scheme, set_size: usize, parity: usize) -> Settings {
        Settings {
            scheme,
            set_size,
            parity,
        }
    }

    #[test]
    fn partners_are_on_other_nodes() {
        let t = topo(4, 2);
        let p = plan(&settings(Scheme::Partner, 0, 0), &t).unwrap();
        assert_eq!(p.partner_dest, vec![2, 3, 0, 1]);
        assert_eq!(p.partner_src, vec![2, 3, 0, 1]);
        let t = topo(6, 3);
        let p = plan(&settings(Scheme::Partner, 0, 0), &t).unwrap();
        assert_eq!(p.partner_dest, vec![2, 3, 4, 5, 0, 1]);
        assert_eq!(p.partner_src, vec![4, 5, 0, 1, 2, 3]);
        for r in 0..6 {
            assert_ne!(t.node_of[r], t.node_of[p.partner_dest[r]]);
        }
    }

    #[test]
    fn sets_never_hold_two_members_of_one_domain() {
        for (size, nodes, n, m) in [
            (8, 4, 4, 2),
            (12, 4, 0, 1),
            (10, 5, 2, 1),
            (16, 8, 3, 1),
            (9, 9, 4, 2),
        ] {
            let t = topo(size, nodes);
            let p = plan(&settings(Scheme::Rs, n, m), &t).unwrap();
            let mut seen = vec![0; size];
            for set in &p.sets {
                assert!(set.len() > m);
                let mut doms: Vec<usize> = set.iter().map(|r| t.domain_of[*r]).collect();
                doms.sort();
                doms.dedup();
                assert_eq!(doms.len(), set.len(), "{set:?} shares a domain");
                for r in set {
                    seen[*r] += 1;
                }
            }
            assert!(
                seen.iter().all(|c| *c == 1),
                "{size}/{nodes}: every rank in exactly one set"
            );
        }
        // 9 ranks in 9 domains with sets of 4 and m = 2: the last chunk of 1 joins its neighbour.
        let p = plan(&settings(Scheme::Rs, 4, 2), &topo(9, 9)).unwrap();
        assert_eq!(p.sets.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 5]);
    }

    #[test]
    fn impossible_protection_is_an_error() {
        let e = plan(&settings(Scheme::Partner, 0, 0), &topo(4, 0)).unwrap_err();
        assert!(e.contains("at least 2 failure domains"), "{e}");
        let e = plan(&settings(Scheme::Xor, 3, 1), &topo(4, 2)).unwrap_err();
        assert!(e.contains("set_size = 3") && e.contains("only 2"), "{e}");
        let e = plan(&settings(Scheme::Rs, 2, 2), &topo(4, 2)).unwrap_err();
        assert!(e.contains("2 parity"), "{e}");
        let e = plan(&settings(Scheme::Partner, 0, 0), &topo(5, 2)).unwrap_err();
        assert!(e.contains("same number of ranks"), "{e}");
        assert_eq!(
            plan(&settings(Scheme::Xor, 0, 0), &topo(4, 2))
                .unwrap()
                .describe(),
            "xor(2)"
        );
    }
}
