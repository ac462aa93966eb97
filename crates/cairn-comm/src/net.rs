//! [`Net`]: a communicator whose ranks are threads of several processes, one or more per
//! process, joined by TCP connections between the processes. The launcher of transparent
//! checkpoints runs each host's engine ranks in that host's sub-coordinator, so that each
//! host stores its own images; the engine's collectives cross hosts over these connections.
//!
//! The caller makes and authenticates the connections (one per pair of processes, each
//! direction's bytes are this module's frames); [`Net::world`] takes them over. Every
//! message is a frame `source rank (u32) | destination rank (u32) | channel (u8) | length
//! (u64) | bytes`, little-endian. Frames between two ranks arrive in the order they were
//! sent, per channel: point-to-point messages on one, collectives on the other, so that a
//! collective never takes a message meant for `recv`.
//!
//! Collectives go through rank 0: every rank sends its part, rank 0 sends everything back.
//! A process whose connection closes (it died) fails every receive that waits on one of its
//! ranks, naming the process, rather than leaving it waiting forever.

use crate::{Comm, CommError, Op, Result};
use std::collections::{HashMap, VecDeque};
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex};

const P2P: u8 = 0;
const COLL: u8 = 1;
/// The largest message a frame may carry (a frame claiming more is a broken peer).
const MAX_FRAME: u64 = 1 << 36;

type Key = (usize, usize, u8);

#[derive(Default)]
struct Mail {
    msgs: HashMap<Key, VecDeque<Vec<u8>>>,
    /// Processes whose connection is gone, with why.
    gone: HashMap<usize, String>,
}

struct Shared {
    size: usize,
    /// The process hosting each rank.
    owner: Vec<usize>,
    me: usize,
    /// The connection to each other process (None for this one).
    links: Vec<Option<Mutex<TcpStream>>>,
    mail: Mutex<Mail>,
    arrived: Condvar,
}

/// One rank of a world spanning several processes; see the module documentation.
pub struct Net {
    rank: usize,
    shared: Arc<Shared>,
}

fn err(op: &'static str, msg: String) -> CommError {
    CommError { op, msg }
}

impl Net {
    /// This process's ranks of a world of `owner.len()` ranks, where rank `r` lives in
    /// process `owner[r]` and this is process `me`. `links[p]` is an open connection to
    /// process `p` (`None` for `me`, and for a process that hosts no rank); each is read by
    /// a thread of its own from now on. Returns the ranks this process hosts, in rank order.
    pub fn world(me: usize, owner: Vec<usize>, links: Vec<Option<TcpStream>>) -> Result<Vec<Net>> {
        let size = owner.len();
        if size == 0 || size > u32::MAX as usize {
            return Err(err("world", format!("a world of {size} ranks")));
        }
        for (r, &p) in owner.iter().enumerate() {
            if p >= links.len() {
                return Err(err(
                    "world",
                    format!("rank {r} lives in process {p}, which has no link"),
                ));
            }
            if p != me && links[p].is_none() {
                return Err(err(
                    "world",
                    format!("no connection to process {p}, which hosts rank {r}"),
                ));
            }
        }
        let mut readers = Vec::new();
        let mut writers = Vec::with_capacity(links.len());
        for (p, l) in links.into_iter().enumerate() {
            match l {
                Some(s) if p != me => {
                    let r = s
                        .try_clone()
                        .map_err(|e| err("world", format!("connection to process {p}: {e}")))?;
                    let _ = s.set_nodelay(true);
                    readers.push((p, r));
                    writers.push(Some(Mutex::new(s)));
                }
                _ => writers.push(None),
            }
        }
        let shared = Arc::new(Shared {
            size,
            owner,
            me,
            links: writers,
            mail: Mutex::new(Mail::default()),
            arrived: Condvar::new(),
        });
        for (p, stream) in readers {
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(format!("cairn-net-{p}"))
                .spawn(move || read_frames(sh, p, stream))
                .map_err(|e| err("world", format!("cannot start a reader thread: {e}")))?;
        }
        Ok((0..size)
            .filter(|&r| shared.owner[r] == me)
            .map(|rank| Net {
                rank,
                shared: shared.clone(),
            })
            .collect())
    }

    fn put(&self, dest: usize, chan: u8, bytes: &[u8], op: &'static str) -> Result<()> {
        let sh = &self.shared;
        if dest >= sh.size {
            return Err(err(
                op,
                format!("peer {dest} outside a world of {}", sh.size),
            ));
        }
        let p = sh.owner[dest];
        if p == sh.me {
            let mut mail = sh.mail.lock().unwrap_or_else(|e| e.into_inner());
            mail.msgs
                .entry((self.rank, dest, chan))
                .or_default()
                .push_back(bytes.to_vec());
            sh.arrived.notify_all();
            return Ok(());
        }
        let link = sh.links[p].as_ref().expect("checked in world()");
        let mut head = [0u8; 17];
        head[0..4].copy_from_slice(&(self.rank as u32).to_le_bytes());
        head[4..8].copy_from_slice(&(dest as u32).to_le_bytes());
        head[8] = chan;
        head[9..17].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        let mut s = link.lock().unwrap_or_else(|e| e.into_inner());
        s.write_all(&head)
            .and_then(|_| s.write_all(bytes))
            .map_err(|e| err(op, format!("sending to rank {dest} (process {p}): {e}")))
    }

    fn take(&self, src: usize, chan: u8, op: &'static str) -> Result<Vec<u8>> {
        let sh = &self.shared;
        if src >= sh.size {
            return Err(err(
                op,
                format!("peer {src} outside a world of {}", sh.size),
            ));
        }
        let p = sh.owner[src];
        let mut mail = sh.mail.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(m) = mail
                .msgs
                .get_mut(&(src, self.rank, chan))
                .and_then(|q| q.pop_front())
            {
                return Ok(m);
            }
            if let Some(why) = mail.gone.get(&p) {
                return Err(err(
                    op,
                    format!("rank {src} is in process {p}, whose connection is gone: {why}"),
                ));
            }
            // Every collective involves every rank: once any process is gone, none can
            // complete, and a rank waiting on one of this process's own ranks (rank 0,
            // which gave up on the gone process) would otherwise wait forever.
            if chan == COLL {
                if let Some((q, why)) = mail.gone.iter().min_by_key(|(q, _)| **q) {
                    return Err(err(
                        op,
                        format!("process {q}, part of the world, is gone: {why}"),
                    ));
                }
            }
            mail = sh.arrived.wait(mail).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Reads process `p`'s frames into the mail until its connection ends.
fn read_frames(sh: Arc<Shared>, p: usize, stream: TcpStream) {
    let mut r = BufReader::with_capacity(1 << 16, stream);
    let why = loop {
        let mut head = [0u8; 17];
        if let Err(e) = r.read_exact(&mut head) {
            break if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "closed".to_string()
            } else {
                e.to_string()
            };
        }
        let src = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
        let dst = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
        let chan = head[8];
        let len = u64::from_le_bytes(head[9..17].try_into().expect("8 bytes"));
        if src >= sh.size
            || dst >= sh.size
            || sh.owner[src] != p
            || sh.owner[dst] != sh.me
            || chan > COLL
        {
            break format!("a frame from rank {src} to rank {dst} on channel {chan}, which process {p} cannot send");
        }
        if len > MAX_FRAME {
            break format!("a frame of {len} bytes");
        }
        let mut bytes = vec![0u8; len as usize];
        if let Err(e) = r.read_exact(&mut bytes) {
            break format!("a frame cut short: {e}");
        }
        let mut mail = sh.mail.lock().unwrap_or_else(|e| e.into_inner());
        mail.msgs
            .entry((src, dst, chan))
            .or_default()
            .push_back(bytes);
        sh.arrived.notify_all();
    };
    let mut mail = sh.mail.lock().unwrap_or_else(|e| e.into_inner());
    mail.gone.insert(p, why);
    sh.arrived.notify_all();
}

impl Comm for Net {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn barrier(&self) -> Result<()> {
        self.allgather(&[]).map(|_| ())
    }

    fn allreduce_i64(&self, vals: &mut [i64], op: Op) -> Result<()> {
        let mine: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let all = self.allgather(&mine)?;
        for (i, v) in vals.iter_mut().enumerate() {
            let mut acc: Option<i64> = None;
            for b in &all {
                let x = b
                    .get(i * 8..i * 8 + 8)
                    .ok_or_else(|| err("allreduce", format!("a rank gave {} bytes", b.len())))?;
                let x = i64::from_le_bytes(x.try_into().expect("8 bytes"));
                acc = Some(acc.map_or(x, |a| op.apply(a, x)));
            }
            *v = acc.expect("world is not empty");
        }
        Ok(())
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.shared.size;
        if self.rank != 0 {
            self.put(0, COLL, mine, "allgather")?;
            let all = self.take(0, COLL, "allgather")?;
            return unpack(&all, n);
        }
        let mut parts = Vec::with_capacity(n);
        parts.push(mine.to_vec());
        for r in 1..n {
            parts.push(self.take(r, COLL, "allgather")?);
        }
        let packed = pack(&parts);
        for r in 1..n {
            self.put(r, COLL, &packed, "allgather")?;
        }
        Ok(parts)
    }

    fn sendrecv(&self, send: &[u8], dest: usize, src: usize) -> Result<Vec<u8>> {
        self.put(dest, P2P, send, "sendrecv")?;
        self.take(src, P2P, "sendrecv")
    }

    fn send(&self, bytes: &[u8], dest: usize) -> Result<()> {
        self.put(dest, P2P, bytes, "send")
    }

    fn recv(&self, src: usize) -> Result<Vec<u8>> {
        self.take(src, P2P, "recv")
    }
}

/// Every rank's part, each as its length (u64) and bytes.
fn pack(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

fn unpack(mut b: &[u8], n: usize) -> Result<Vec<Vec<u8>>> {
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let bad = || {
            err(
                "allgather",
                "rank 0 sent a gather that does not parse".to_string(),
            )
        };
        let len = b.get(..8).ok_or_else(bad)?;
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let part = b
            .get(8..8usize.checked_add(len).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        parts.push(part.to_vec());
        b = &b[8 + len..];
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Three "processes" (ranks 0 and 3 in the first, 1 in the second, 2 and 4 in the third),
    /// each a set of threads with real loopback connections between them.
    fn worlds() -> Vec<Vec<Net>> {
        let owner = vec![0, 1, 2, 0, 2];
        let procs = 3;
        let mut links: Vec<Vec<Option<TcpStream>>> = (0..procs)
            .map(|_| (0..procs).map(|_| None).collect())
            .collect();
        let pairs: Vec<(usize, usize)> = (0..procs)
            .flat_map(|a| (a + 1..procs).map(move |b| (a, b)))
            .collect();
        for (a, b) in pairs {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, _) = l.accept().unwrap();
            links[a][b] = Some(c);
            links[b][a] = Some(s);
        }
        links
            .into_iter()
            .enumerate()
            .map(|(p, l)| Net::world(p, owner.clone(), l).unwrap())
            .collect()
    }

    #[test]
    fn collectives_and_messages_cross_processes() {
        let mut handles = Vec::new();
        for w in worlds() {
            for c in w {
                handles.push(std::thread::spawn(move || {
                    let r = c.rank();
                    let mut v = [r as i64, -(r as i64)];
                    c.allreduce_i64(&mut v, Op::Sum).unwrap();
                    let big = vec![r as u8; 200_000];
                    let got = c.sendrecv(&big, (r + 1) % 5, (r + 4) % 5).unwrap();
                    let all = c.allgather(&[r as u8; 3]).unwrap();
                    c.barrier().unwrap();
                    (
                        r,
                        v,
                        got.len(),
                        got[0] as usize,
                        all,
                        c.all_agree(r != 4).unwrap(),
                    )
                }));
            }
        }
        for h in handles {
            let (r, v, len, from, all, agree) = h.join().unwrap();
            assert_eq!(v, [10, -10]);
            assert_eq!((len, from), (200_000, (r + 4) % 5));
            assert_eq!(all, (0..5u8).map(|k| vec![k; 3]).collect::<Vec<_>>());
            assert!(!agree);
        }
    }

    #[test]
    fn a_lost_process_fails_the_receive_that_waits_on_it() {
        let w = worlds();
        // Process 2 goes away: its connection to process 0 closes (a dead process's would).
        let link = w[2][0].shared.links[0].as_ref().unwrap();
        link.lock()
            .unwrap()
            .shutdown(std::net::Shutdown::Both)
            .unwrap();
        let e = w[0][0].recv(2).unwrap_err();
        assert!(e.msg.contains("process 2") && e.msg.contains("gone"), "{e}");
        // Ranks of a process still there are reached as before.
        w[1][0].send(b"hi", 0).unwrap();
        assert_eq!(w[0][0].recv(1).unwrap(), b"hi");
    }

    #[test]
    fn a_lost_process_fails_every_collective_even_one_waiting_on_a_rank_of_its_own_process() {
        let mut w = worlds();
        let link = w[2][0].shared.links[0].as_ref().unwrap();
        link.lock()
            .unwrap()
            .shutdown(std::net::Shutdown::Both)
            .unwrap();
        // Rank 3 waits in a barrier on rank 0, which lives in its own process and never
        // joins: it must learn that process 2 is gone rather than wait forever.
        let r3 = w[0].pop().unwrap();
        assert_eq!(r3.rank(), 3);
        let t = std::thread::spawn(move || r3.barrier());
        let e = t.join().unwrap().unwrap_err();
        assert!(e.msg.contains("process 2") && e.msg.contains("gone"), "{e}");
    }
}
