//! [`Threads`]: a communicator whose ranks are threads of one process, so tests can run a
//! multi-rank, multi-node job without MPI.

use crate::{Comm, Op, Result};
use std::collections::HashMap;
use std::sync::{Arc, Barrier, Condvar, Mutex};

#[derive(Default)]
struct Mailbox {
    /// Messages in flight, keyed by (source, destination).
    msgs: HashMap<(usize, usize), Vec<Vec<u8>>>,
}

struct Shared {
    size: usize,
    slots: Mutex<Vec<Vec<u8>>>,
    barrier: Barrier,
    mail: Mutex<Mailbox>,
    arrived: Condvar,
}

/// One rank of an in-process world; build the world with [`Threads::world`] and move each
/// rank to its own thread.
pub struct Threads {
    rank: usize,
    shared: Arc<Shared>,
}

impl Threads {
    /// The `size` ranks of a new world.
    pub fn world(size: usize) -> Vec<Threads> {
        let shared = Arc::new(Shared {
            size,
            slots: Mutex::new(vec![Vec::new(); size]),
            barrier: Barrier::new(size),
            mail: Mutex::new(Mailbox::default()),
            arrived: Condvar::new(),
        });
        (0..size)
            .map(|rank| Threads {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }
}

impl Comm for Threads {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn barrier(&self) -> Result<()> {
        self.shared.barrier.wait();
        Ok(())
    }

    fn allreduce_i64(&self, vals: &mut [i64], op: Op) -> Result<()> {
        let mine: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let all = self.allgather(&mine)?;
        for (i, v) in vals.iter_mut().enumerate() {
            *v = all
                .iter()
                .map(|b| i64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes")))
                .reduce(|a, b| op.apply(a, b))
                .expect("world is not empty");
        }
        Ok(())
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.shared.slots.lock().unwrap_or_else(|p| p.into_inner())[self.rank] = mine.to_vec();
        self.shared.barrier.wait();
        let all = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Nobody may overwrite a slot before everyone has read it.
        self.shared.barrier.wait();
        Ok(all)
    }

    fn sendrecv(&self, send: &[u8], dest: usize, src: usize) -> Result<Vec<u8>> {
        self.send(send, dest)?;
        self.recv(src)
    }

    fn send(&self, bytes: &[u8], dest: usize) -> Result<()> {
        let n = self.shared.size;
        if dest >= n {
            return Err(crate::CommError {
                op: "send",
                msg: format!("peer {dest} outside a world of {n}"),
            });
        }
        let mut mail = self.shared.mail.lock().unwrap_or_else(|p| p.into_inner());
        mail.msgs
            .entry((self.rank, dest))
            .or_default()
            .push(bytes.to_vec());
        self.shared.arrived.notify_all();
        Ok(())
    }

    fn recv(&self, src: usize) -> Result<Vec<u8>> {
        let n = self.shared.size;
        if src >= n {
            return Err(crate::CommError {
                op: "recv",
                msg: format!("peer {src} outside a world of {n}"),
            });
        }
        let mut mail = self.shared.mail.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(q) = mail
                .msgs
                .get_mut(&(src, self.rank))
                .filter(|q| !q.is_empty())
            {
                return Ok(q.remove(0));
            }
            mail = self
                .shared
                .arrived
                .wait(mail)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectives_agree_across_threads() {
        let handles: Vec<_> = Threads::world(4)
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let r = c.rank();
                    let mut v = [r as i64];
                    c.allreduce_i64(&mut v, Op::Sum).unwrap();
                    let got = c.sendrecv(&[r as u8], (r + 1) % 4, (r + 3) % 4).unwrap();
                    (v[0], got[0] as usize, c.all_agree(r != 2).unwrap())
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), (6, (r + 3) % 4, false));
        }
    }
}
