//! The plumbing the root and the sub-coordinators share: an accept thread, one reader thread
//! per connection, and the event channel through which everything reaches the coordinator's
//! single state-machine thread. Only that thread writes to sockets and changes state, so the
//! checkpoint logic has no locks; readers only parse lines.

use crate::error::Error;
use crate::proto::{self, LineReader, Msg};
use std::io::ErrorKind as IoKind;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a new connection may take to send its first line.
pub const FIRST_LINE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the reader threads tell the state-machine thread.
pub enum Event {
    /// A connection sent its first line; `writer` is its write side.
    Opened {
        id: u64,
        msg: Msg,
        writer: TcpStream,
        peer: SocketAddr,
    },
    /// A later line.
    Line { id: u64, msg: Msg },
    /// The connection ended: `why` is `None` for a clean end of stream, else what went wrong
    /// (already logged when it is a protocol error).
    Closed { id: u64, why: Option<String> },
    /// The engine finished storing the images of checkpoint `version` (the root's only
    /// event that does not come from a connection).
    Stored {
        version: u64,
        result: Result<crate::images::Stored, String>,
    },
    /// The launcher started the engine job: the root may take checkpoints (what it needs is
    /// in the root's own hand-over slot, so that this plumbing knows nothing of the root).
    Begin,
    /// Start these processes of the node (the sub-coordinator's engine connection asks, and
    /// waits for the pids or the error on `reply`).
    Spawn {
        starts: Vec<crate::spawn::ProcStart>,
        reply: Sender<crate::error::Result<Vec<u32>>>,
    },
    /// The sub-coordinator's staging directories (from the launcher's brief).
    Staging(crate::stage::Staging),
    /// A child of the sub-coordinator may have ended (SIGCHLD).
    Reap,
    /// Send this signal to every process of the job (the root tells the nodes).
    Signal(i32),
    /// Stop the coordinator.
    Stop,
}

/// The next event, waiting at most until `deadline` (`None` once it has passed); a closed
/// channel reads as [`Event::Stop`].
pub fn next_event(rx: &Receiver<Event>, deadline: Option<Instant>) -> Option<Event> {
    match deadline {
        Some(t) => match rx.recv_timeout(t.saturating_duration_since(Instant::now())) {
            Ok(ev) => Some(ev),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Event::Stop),
        },
        None => Some(rx.recv().unwrap_or(Event::Stop)),
    }
}

/// Reads `stream` until it ends, sending its lines as events under `id`. The first line comes
/// as [`Event::Opened`] unless `opened` is false (a connection whose first exchange the
/// caller already did, like a sub-coordinator's link to the root). An unknown verb or a
/// malformed line is logged with `who` and ends the connection.
pub fn spawn_reader(
    id: u64,
    mut r: LineReader<TcpStream>,
    who: String,
    opened: bool,
    tx: Sender<Event>,
) -> std::io::Result<JoinHandle<()>> {
    let writer = r.get_ref().try_clone()?;
    let peer = r
        .get_ref()
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    std::thread::Builder::new()
        .name(format!("cairn-conn-{id}"))
        .spawn(move || {
            let mut first = opened;
            if first {
                let _ = r.get_ref().set_read_timeout(Some(FIRST_LINE_TIMEOUT));
            }
            let mut writer = Some(writer);
            loop {
                let why = match r.next_msg() {
                    Ok(Some(msg)) => {
                        let ev = if first {
                            first = false;
                            let _ = r.get_ref().set_read_timeout(None);
                            Event::Opened {
                                id,
                                msg,
                                writer: writer.take().expect("first line once"),
                                peer,
                            }
                        } else {
                            Event::Line { id, msg }
                        };
                        if tx.send(ev).is_err() {
                            return;
                        }
                        continue;
                    }
                    Ok(None) => None,
                    Err(e) => Some(describe(&e, &who, first)),
                };
                let _ = r.get_ref().shutdown(Shutdown::Both);
                if !first {
                    let _ = tx.send(Event::Closed { id, why });
                }
                return;
            }
        })
}

/// A reader's error as a log line (protocol errors are logged here, once).
fn describe(e: &Error, who: &str, first: bool) -> String {
    match e.kind() {
        crate::ErrorKind::Protocol => {
            tracing::warn!("{who}: {}; closing the connection", e.message());
            format!("protocol error: {}", e.message())
        }
        crate::ErrorKind::Timeout if first => {
            format!("no first line within {FIRST_LINE_TIMEOUT:?}")
        }
        _ => e.message().to_string(),
    }
}

/// Accepts connections on a listener until stopped, giving each a reader thread.
pub struct Acceptor {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Acceptor {
    /// Starts accepting; connection ids are taken from `ids` (shared with the caller, which
    /// may hand out ids of its own).
    pub fn start(
        listener: TcpListener,
        what: &'static str,
        ids: Arc<AtomicU64>,
        tx: Sender<Event>,
    ) -> std::io::Result<Acceptor> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("cairn-accept-{what}"))
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::Acquire) {
                        return;
                    }
                    let stream = match conn {
                        Ok(s) => s,
                        Err(e) if e.kind() == IoKind::Interrupted => continue,
                        Err(e) => {
                            // EMFILE and the like: say so, and do not spin.
                            tracing::warn!("{what}: accept: {e}");
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    };
                    if proto::setup(&stream).is_err() {
                        continue;
                    }
                    let id = ids.fetch_add(1, Ordering::Relaxed);
                    let who = match stream.peer_addr() {
                        Ok(p) => format!("{what}: connection from {p}"),
                        Err(_) => format!("{what}: a connection"),
                    };
                    if let Err(e) = spawn_reader(id, LineReader::new(stream), who, true, tx.clone())
                    {
                        tracing::warn!("{what}: cannot start a reader thread: {e}");
                    }
                }
            })?;
        Ok(Acceptor {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes the listener (a connection to it wakes the thread).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
            let _ = t.join();
        }
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends `msg` on `w`, logging a failure instead of returning it: a peer that cannot be
/// written to will be seen closing by its reader.
pub fn send_or_log(w: &mut TcpStream, msg: &Msg, to: impl std::fmt::Display) {
    if let Err(e) = proto::send(w, msg) {
        tracing::debug!("{to}: {e}");
    }
}

/// Answers a refused first line with `DENIED why=...` and closes the connection.
pub fn deny(mut w: TcpStream, why: &str, who: impl std::fmt::Display) {
    tracing::warn!("{who}: denied: {why}");
    let _ = proto::send(&mut w, &Msg::new(proto::Verb::Denied).arg("why", why));
    let _ = w.shutdown(Shutdown::Both);
}

/// The first eight findings of a report, joined by "; ", and how many more there are: a
/// failure may name thousands of processes, and a protocol line holds 4096 bytes.
pub fn first_findings<'a>(items: impl ExactSizeIterator<Item = &'a str>) -> String {
    const SHOWN: usize = 8;
    let total = items.len();
    let mut out = items.take(SHOWN).collect::<Vec<_>>().join("; ");
    if total > SHOWN {
        out.push_str(&format!("; and {} more", total - SHOWN));
    }
    out
}

/// `0-3,5,7-8` from sorted indices, for reports about many processes.
pub fn ranges(items: impl IntoIterator<Item = usize>) -> String {
    let mut v: Vec<usize> = items.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// `proc 3` or `procs 0-2,5`: a word and the items it names, for reports.
pub fn named(word: &str, items: impl IntoIterator<Item = usize>) -> String {
    let list = ranges(items);
    if list.contains([',', '-']) {
        format!("{word}s {list}")
    } else {
        format!("{word} {list}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_compress_runs() {
        assert_eq!(ranges([5, 0, 1, 2, 7, 8, 3]), "0-3,5,7-8");
        assert_eq!(ranges([4]), "4");
        assert_eq!(ranges([]), "");
        assert_eq!(named("proc", [3]), "proc 3");
        assert_eq!(named("node", [0, 1]), "nodes 0-1");
    }
}
