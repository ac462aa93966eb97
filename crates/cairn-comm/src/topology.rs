//! Which node and failure domain each rank lives on, real or simulated.
//!
//! Nodes are found by gathering host names: ranks that share a host name share a node, which
//! is what `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` reports on the clusters Cairn targets,
//! and works the same over any [`Comm`]. With `sim_nodes = k` each real node's ranks are cut
//! into `k` contiguous simulated nodes, each with its own node-local storage and its own
//! failure domain, so one machine can stand for several.

use crate::{Comm, CommError};

/// Where this rank sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub rank: usize,
    pub size: usize,
    /// This rank's node index, `0..nodes`, numbered in rank order.
    pub node: usize,
    pub nodes: usize,
    /// The node of every rank, indexed by rank.
    pub node_of: Vec<usize>,
    /// The failure domain of every rank, indexed by rank (the node unless configured coarser).
    pub domain_of: Vec<usize>,
    /// True when nodes are simulated (`sim_nodes > 0`).
    pub simulated: bool,
    /// This rank's position among the ranks of its host (its local rank).
    pub host_rank: usize,
    /// This rank's node among the (simulated) nodes of its host: `host_rank * sim_nodes /
    /// ranks on the host`, or 0 with real nodes. Names the node's shared-memory store, the
    /// way the interposer computes it from the launcher's local rank.
    pub host_node: usize,
    pub hostname: String,
}

impl Topology {
    /// Collective: discover the topology. `sim_nodes = 0` means real nodes only;
    /// `domain_env` names an environment variable (e.g. a rack name) whose value groups nodes
    /// into coarser failure domains.
    pub fn discover(
        comm: &dyn Comm,
        sim_nodes: usize,
        domain_env: Option<&str>,
    ) -> Result<Topology, CommError> {
        let hostname = hostname();
        let domain_val = domain_env
            .map(|v| std::env::var(v).unwrap_or_default())
            .unwrap_or_default();
        let mine = format!("{hostname}\n{domain_val}");
        let all = comm.allgather(mine.as_bytes())?;
        let all: Vec<(String, String)> = all
            .iter()
            .map(|b| {
                let s = String::from_utf8_lossy(b);
                let (h, d) = s.split_once('\n').unwrap_or((&s, ""));
                (h.to_string(), d.to_string())
            })
            .collect();
        Self::from_hosts(comm.rank(), &all, sim_nodes, domain_env.is_some()).map(|mut t| {
            t.hostname = hostname;
            t
        })
    }

    /// The pure part of [`Topology::discover`]: `hosts[r]` is rank r's (host name, domain value).
    pub fn from_hosts(
        rank: usize,
        hosts: &[(String, String)],
        sim_nodes: usize,
        by_domain: bool,
    ) -> Result<Topology, CommError> {
        let size = hosts.len();
        let mut real: Vec<&str> = Vec::new();
        let real_of: Vec<usize> = hosts
            .iter()
            .map(|(h, _)| match real.iter().position(|x| x == h) {
                Some(i) => i,
                None => {
                    real.push(h);
                    real.len() - 1
                }
            })
            .collect();
        let mut node_of = real_of.clone();
        if sim_nodes > 0 {
            for (ri, host) in real.iter().enumerate() {
                let members: Vec<usize> = (0..size).filter(|r| real_of[*r] == ri).collect();
                if members.len() < sim_nodes {
                    return Err(CommError {
                        op: "topology",
                        msg: format!(
                            "sim_nodes = {sim_nodes} but host {host} runs only {} rank(s); each simulated node needs at least one rank",
                            members.len()
                        ),
                    });
                }
                for (pos, r) in members.iter().enumerate() {
                    node_of[*r] = ri * sim_nodes + pos * sim_nodes / members.len();
                }
            }
        }
        // Number nodes densely in order of their lowest rank.
        let mut order: Vec<usize> = Vec::new();
        for n in &node_of {
            if !order.contains(n) {
                order.push(*n);
            }
        }
        let node_of: Vec<usize> = node_of
            .iter()
            .map(|n| order.iter().position(|x| x == n).unwrap())
            .collect();
        let nodes = order.len();
        let domain_of = if by_domain {
            let mut seen: Vec<&str> = Vec::new();
            hosts
                .iter()
                .map(|(_, d)| match seen.iter().position(|x| x == d) {
                    Some(i) => i,
                    None => {
                        seen.push(d);
                        seen.len() - 1
                    }
                })
                .collect()
        } else {
            node_of.clone()
        };
        let host_members: Vec<usize> = (0..size).filter(|r| real_of[*r] == real_of[rank]).collect();
        let host_rank = host_members
            .iter()
            .position(|r| *r == rank)
            .expect("a rank is on its own host");
        let host_node = if sim_nodes > 0 {
            host_rank * sim_nodes / host_members.len()
        } else {
            0
        };
        Ok(Topology {
            rank,
            size,
            host_rank,
            host_node,
            node: node_of[rank],
            nodes,
            node_of,
            domain_of,
            simulated: sim_nodes > 0,
            hostname: String::new(),
        })
    }

    /// Ranks on this rank's node, in rank order.
    pub fn node_ranks(&self) -> Vec<usize> {
        (0..self.size)
            .filter(|r| self.node_of[*r] == self.node)
            .collect()
    }

    /// True for the lowest rank of each node, which writes the node's shared records.
    pub fn is_node_leader(&self) -> bool {
        self.node_ranks().first() == Some(&self.rank)
    }
}

fn hostname() -> String {
    // The kernel's UTS name is what gethostname(2) returns; reading it needs no unsafe code.
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(names: &[&str]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|h| (h.to_string(), String::new()))
            .collect()
    }

    #[test]
    fn real_nodes_follow_host_names() {
        let h = hosts(&["a", "a", "b", "b", "a"]);
        let t = Topology::from_hosts(4, &h, 0, false).unwrap();
        assert_eq!(t.node_of, vec![0, 0, 1, 1, 0]);
        assert_eq!(t.nodes, 2);
        assert_eq!(t.node, 0);
        assert_eq!(t.node_ranks(), vec![0, 1, 4]);
        assert!(!t.is_node_leader());
        assert_eq!((t.host_rank, t.host_node), (2, 0));
    }

    #[test]
    fn host_nodes_number_simulated_nodes_within_each_host() {
        // Two hosts of 4 ranks, 2 simulated nodes each: global nodes 0..4, host nodes 0..2.
        let h = hosts(&["a", "a", "a", "a", "b", "b", "b", "b"]);
        let got: Vec<(usize, usize, usize)> = (0..8)
            .map(|r| {
                let t = Topology::from_hosts(r, &h, 2, false).unwrap();
                (t.node, t.host_rank, t.host_node)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 0, 0),
                (0, 1, 0),
                (1, 2, 1),
                (1, 3, 1),
                (2, 0, 0),
                (2, 1, 0),
                (3, 2, 1),
                (3, 3, 1)
            ]
        );
    }

    #[test]
    fn simulated_nodes_are_contiguous_blocks() {
        let h = hosts(&["a"; 4]);
        let t = Topology::from_hosts(2, &h, 2, false).unwrap();
        assert_eq!(t.node_of, vec![0, 0, 1, 1]);
        assert!(t.is_node_leader());
        let t = Topology::from_hosts(0, &hosts(&["a"; 5]), 2, false).unwrap();
        assert_eq!(t.node_of, vec![0, 0, 0, 1, 1]);
        let err = Topology::from_hosts(0, &hosts(&["a"; 2]), 3, false).unwrap_err();
        assert!(err.msg.contains("sim_nodes = 3"), "{}", err.msg);
    }

    #[test]
    fn domains_group_nodes() {
        let h: Vec<(String, String)> = [("a", "r1"), ("b", "r1"), ("c", "r2")]
            .iter()
            .map(|(h, d)| (h.to_string(), d.to_string()))
            .collect();
        let t = Topology::from_hosts(0, &h, 0, true).unwrap();
        assert_eq!(t.node_of, vec![0, 1, 2]);
        assert_eq!(t.domain_of, vec![0, 0, 1]);
    }
}
