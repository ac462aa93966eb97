//! The root coordinator: the sub-coordinators of the job's nodes and the clients connect to
//! it; it runs every checkpoint as a sequence of global barriers, has the engine store the
//! images and publishes the manifest.
//!
//! One thread (`RootLoop::run`) owns all state and performs every transition of a
//! checkpoint (the state machine is drawn in `docs/coordinator.md`):
//!
//! ```text
//!  IDLE -request-> REGISTER -all joined-> SUSPEND -all SUSPENDED-> WRITE -all WRITTEN-> STORE -stored-> RESUME ok=1
//!                     |                      |                       |                   |  + manifest    |
//!                     | gone, timeout        | failed, timeout, lost | failed, timeout,  | engine failed  | all RESUMED
//!                     v                      v                       v lost              v                v
//!                 DONE ok=0 <-all RESUMED- RESUME ok=0 <-------------+-------------------+            DONE ok=1
//! ```
//!
//! Readers and the accept thread only parse lines and hand them over as `hub::Event`s; the
//! engine's work in STORE runs on a thread of its own, which reports with
//! `Event::Stored`, so the root keeps answering status requests meanwhile.

use crate::engines::Engines;
use crate::error::{Error, ErrorKind, Result};
use crate::hub::{self, deny, named, send_or_log, Acceptor, Event};
use crate::images::{Stored, TreeImage};
use crate::jobdir::Token;
use crate::manifest::{self, LaunchRecord, Manifest, ProcImage, SlotUse};
use crate::proto::{Msg, Verb};
use crate::stage::Staging;
use crate::{node_of, procs_of_node};
use cairn_ckpt::connection_key;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How much longer than the phase timeout the root waits for a node's answer: a node reports
/// its own processes' timeouts by name when the phase timeout expires, and that report should
/// arrive before the root gives up on the node as a whole.
pub const NODE_MARGIN: Duration = Duration::from_secs(1);

/// What the root needs to know about the job.
pub struct RootConfig {
    pub job: String,
    /// `<dir>/<job>`, absolute.
    pub job_dir: PathBuf,
    pub token: Token,
    pub procs: usize,
    pub nodes: usize,
    /// The timeout of each phase.
    pub timeout: Duration,
    /// Checkpoint this long after the previous one ended (or after the start).
    pub interval: Option<Duration>,
    /// How many complete versions' manifests to keep (the node-local tier's window); those
    /// the engine holds on the global tier are kept too.
    pub keep: usize,
    /// Where the processes write their images.
    pub staging: Staging,
    /// The hosts of the nodes, by node (empty: simulated nodes): what `cairn rsh HOST` is
    /// matched against, with each node's address and the host name its processes report.
    pub hosts: Vec<String>,
    /// The processes that are slots (`--rsh`): kept for commands `cairn rsh` runs on their
    /// nodes.
    pub slots: Vec<usize>,
}

/// What the root learns once the sub-coordinators are up and their engines started
/// ([`Root::begin`]): until then it takes no checkpoint.
pub struct Begun {
    /// The engine job that stores the images, one part on each node.
    pub images: Arc<Engines>,
    /// Recorded in every manifest.
    pub launch: LaunchRecord,
    /// The number of the first checkpoint this root takes.
    pub first_version: u64,
    /// The newest complete checkpoint when the job starts (the one a restart came from).
    pub last: Option<LastCheckpoint>,
    /// The settings the root keeps from then on (a restart's come with the version it
    /// restored).
    pub interval: Option<Duration>,
    pub timeout: Duration,
    pub keep: usize,
    /// The connections to other hosts that come back closed (their other end was not in
    /// the job at the checkpoint a restart came from), by key.
    pub closed: Vec<String>,
    /// The slots that were given a command before the checkpoint a restart came from.
    pub used_slots: BTreeSet<usize>,
}

/// Where a node's sub-coordinator listens: for its processes, and for the root's engine
/// connection and the other nodes' links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddrs {
    pub procs: String,
    pub links: String,
}

/// The newest complete checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastCheckpoint {
    pub version: u64,
    /// Seconds since the Unix epoch.
    pub when: u64,
}

/// What the launcher waits on: the sub-coordinators' addresses, filled in as they register,
/// and each process's wait status, as its sub-coordinator reports it (`ENDED`).
#[derive(Default)]
struct Shared {
    node_addrs: Vec<Option<NodeAddrs>>,
    ended: Vec<Option<ExitStatus>>,
    /// Slots that never ran a command: ended by the root once the rest of the job had, and
    /// not part of its exit status.
    unused_slots: BTreeSet<usize>,
    stopped: bool,
}

/// A running root coordinator.
pub struct Root {
    addr: SocketAddr,
    tx: Sender<Event>,
    /// Where [`Root::begin`] leaves what the loop takes at [`Event::Begin`].
    handover: Arc<Mutex<Option<Begun>>>,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    acceptor: Acceptor,
}

impl Root {
    /// Starts accepting on `listener` and running the state machine.
    pub fn start(listener: TcpListener, cfg: RootConfig) -> Result<Root> {
        let (tx, rx) = channel();
        let shared = Arc::new((
            Mutex::new(Shared {
                node_addrs: vec![None; cfg.nodes],
                ended: vec![None; cfg.procs],
                unused_slots: BTreeSet::new(),
                stopped: false,
            }),
            Condvar::new(),
        ));
        let ids = Arc::new(AtomicU64::new(1));
        let acceptor = Acceptor::start(listener, "root coordinator", ids, tx.clone())
            .map_err(|e| Error::io("start the root coordinator", e))?;
        let addr = acceptor.addr();
        let mut lp = RootLoop::new(cfg, rx, tx.clone(), shared.clone());
        let handover = lp.handover.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-root".into())
            .spawn(move || lp.run())
            .map_err(|e| Error::io("start the root coordinator", e))?;
        Ok(Root {
            addr,
            tx,
            handover,
            shared,
            thread: Some(thread),
            acceptor,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Hands the root the engine job and what the launch or restart decided; from now on it
    /// takes checkpoints (and its interval starts).
    pub fn begin(&self, b: Begun) {
        *self.handover.lock().expect("the root's hand-over slot") = Some(b);
        let _ = self.tx.send(Event::Begin);
    }

    /// Waits until every node's sub-coordinator has registered and returns their addresses,
    /// by node. `check` is called every 100 ms and may give up early (a sub-coordinator that
    /// exited, say).
    pub fn wait_nodes(
        &self,
        limit: Duration,
        mut check: impl FnMut() -> Result<()>,
    ) -> Result<Vec<NodeAddrs>> {
        let deadline = Instant::now() + limit;
        let (lock, cv) = &*self.shared;
        let mut g = lock.lock().expect("root state lock");
        loop {
            if g.node_addrs.iter().all(Option::is_some) {
                return Ok(g.node_addrs.iter().flatten().cloned().collect());
            }
            if g.stopped {
                return Err(Error::new(ErrorKind::Io, "the root coordinator stopped"));
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> = (0..g.node_addrs.len())
                    .filter(|&n| g.node_addrs[n].is_none())
                    .collect();
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "sub-coordinators did not register within {1:.0} s: {0}",
                        named("node", missing),
                        limit.as_secs_f64()
                    ),
                ));
            }
            let wait = (deadline - now).min(Duration::from_millis(100));
            g = cv.wait_timeout(g, wait).expect("root state lock").0;
            drop(g);
            check()?;
            g = lock.lock().expect("root state lock");
        }
    }

    /// Waits until every process has ended (or its node was lost, which counts as killed
    /// by SIGKILL: its processes die with their sub-coordinator) and returns their wait
    /// statuses, by process. Returns what it has if the root stops first, counting the
    /// rest as killed.
    pub fn wait_ended(&self) -> Vec<ExitStatus> {
        let (lock, cv) = &*self.shared;
        let mut g = lock.lock().expect("root state lock");
        while !g.stopped && g.ended.iter().any(Option::is_none) {
            g = cv.wait(g).expect("root state lock");
        }
        g.ended
            .iter()
            .map(|s| s.unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL)))
            .collect()
    }

    /// The slots that never ran a command, once the job has ended: their statuses (they were
    /// killed) are not part of the job's.
    pub fn unused_slots(&self) -> BTreeSet<usize> {
        let (lock, _) = &*self.shared;
        lock.lock().expect("root state lock").unused_slots.clone()
    }

    /// Something that sends a signal to every process of the job, through their nodes'
    /// sub-coordinators (what `cairn kill` and the launcher's forwarded signals do).
    pub fn signaller(&self) -> impl Fn(i32) + Send + Sync + 'static {
        let tx = Mutex::new(self.tx.clone());
        move |sig| {
            let _ = tx.lock().expect("signal sender").send(Event::Signal(sig));
        }
    }

    /// Stops the coordinator: clients waiting for a checkpoint are told the job ended, every
    /// connection is closed (sub-coordinators exit when their link to the root closes).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.tx.send(Event::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.acceptor.stop();
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A process as the root sees it.
#[derive(Debug, Clone, PartialEq)]
enum ProcState {
    /// Not registered yet.
    Missing,
    Running,
    Exited(i32),
    /// Its connection closed without BYE (a crash), or its node's link was lost.
    Lost,
}

struct ProcSlot {
    node: usize,
    state: ProcState,
    pid: u32,
    host: String,
    restarted: bool,
    /// A slot (`--rsh`): free, or given a command.
    slot: Option<SlotUse>,
}

struct NodeSlot {
    conn: Option<u64>,
    addr: Option<String>,
    pid: u32,
    procs: Vec<usize>,
    lost: bool,
}

enum Role {
    Node(usize),
    Client,
}

struct Peer {
    role: Role,
    writer: TcpStream,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Register,
    Suspend,
    Write,
    /// The engine stores the images; the processes stay suspended.
    Store,
    Resume {
        ok: bool,
    },
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Register => "registration",
            Phase::Suspend => "SUSPEND",
            Phase::Write => "WRITE",
            Phase::Store => "STORE",
            Phase::Resume { .. } => "RESUME",
        }
    }
}

/// How long the root lets the engine store a checkpoint: no limit. Its calls are collective
/// over threads of this process and end in an agreement; a slow tier is slow, not lost, and
/// failing the checkpoint would not stop the engine's writes.
const STORE_LIMIT: Duration = Duration::from_secs(10 * 365 * 86400);

/// The checkpoint in progress.
struct Ckpt {
    version: u64,
    phase: Phase,
    started: Instant,
    deadline: Instant,
    /// Nodes whose answer to the current phase is awaited.
    pending: BTreeSet<usize>,
    /// Per node, the bytes its processes wrote, once it answered WRITTEN.
    bytes: Vec<Option<u64>>,
    /// Per image, as its node reported it (`IMAGE`): the process, the pid in its tree's
    /// namespace (0 for the launched process's own image), and the image's length.
    sizes: BTreeMap<(usize, u32), u64>,
    failures: Vec<String>,
    /// The processes' connections to other hosts, as their nodes reported them (`CONN`).
    conns: Vec<ConnEnd>,
    /// Those whose other end no process of the job holds, which come back closed.
    closed: Vec<String>,
    /// Clients waiting for its DONE.
    clients: Vec<u64>,
    /// The images, once every node answered WRITTEN and they were checked.
    images: Vec<ProcImage>,
    total_bytes: u64,
    total_stored: u64,
}

/// One end of a connection between hosts, as a node reported it at a checkpoint.
struct ConnEnd {
    node: usize,
    who: String,
    fd: i32,
    local: String,
    peer: String,
    close: bool,
}

/// Restored processes connecting their connections between hosts again: where each
/// connection's listening end listens, and the nodes whose processes wait to know.
#[derive(Default)]
struct Meeting {
    listens: HashMap<String, String>,
    seeks: HashMap<String, Vec<usize>>,
    closed: std::collections::HashSet<String>,
}

struct RootLoop {
    cfg: RootConfig,
    rx: Receiver<Event>,
    /// For the engine's thread to report with.
    tx: Sender<Event>,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    peers: HashMap<u64, Peer>,
    nodes: Vec<NodeSlot>,
    procs: Vec<ProcSlot>,
    ckpt: Option<Ckpt>,
    /// Requests that came too late to join the running checkpoint: another one follows it.
    queued: Option<Vec<u64>>,
    next_version: u64,
    last: Option<LastCheckpoint>,
    next_interval: Option<Instant>,
    /// Set by [`Root::begin`].
    begun: Option<Begun>,
    /// What [`Root::begin`] hands over, taken at [`Event::Begin`].
    handover: Arc<Mutex<Option<Begun>>>,
    meeting: Meeting,
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl RootLoop {
    fn new(
        cfg: RootConfig,
        rx: Receiver<Event>,
        tx: Sender<Event>,
        shared: Arc<(Mutex<Shared>, Condvar)>,
    ) -> Self {
        let nodes = (0..cfg.nodes)
            .map(|n| NodeSlot {
                conn: None,
                addr: None,
                pid: 0,
                procs: procs_of_node(n, cfg.procs, cfg.nodes).collect(),
                lost: false,
            })
            .collect();
        let procs = (0..cfg.procs)
            .map(|i| ProcSlot {
                node: node_of(i, cfg.procs, cfg.nodes),
                state: ProcState::Missing,
                pid: 0,
                host: String::new(),
                restarted: false,
                slot: cfg.slots.contains(&i).then_some(SlotUse::Free),
            })
            .collect();
        RootLoop {
            next_version: 1,
            last: None,
            next_interval: None,
            begun: None,
            handover: Arc::new(Mutex::new(None)),
            meeting: Meeting::default(),
            cfg,
            rx,
            tx,
            shared,
            peers: HashMap::new(),
            nodes,
            procs,
            ckpt: None,
            queued: None,
        }
    }

    fn run(&mut self) {
        loop {
            let wake = [self.ckpt.as_ref().map(|c| c.deadline), self.next_interval]
                .into_iter()
                .flatten()
                .min();
            let ev = hub::next_event(&self.rx, wake);
            match ev {
                Some(Event::Stop) => break,
                Some(Event::Opened {
                    id,
                    msg,
                    writer,
                    peer,
                }) => self.opened(id, msg, writer, peer),
                Some(Event::Line { id, msg }) => self.line(id, msg),
                Some(Event::Closed { id, why }) => self.closed(id, why),
                Some(Event::Stored { version, result }) => self.stored(version, result),
                Some(Event::Signal(sig)) => {
                    let n = self.signal(sig);
                    tracing::info!("signal {sig} forwarded to {n} processes");
                }
                Some(Event::Spawn { .. } | Event::Reap | Event::Staging(_)) => {}
                Some(Event::Begin) => {
                    let taken = self.handover.lock().expect("the hand-over slot").take();
                    if let Some(b) = taken {
                        self.next_version = b.first_version;
                        self.last = b.last;
                        self.cfg.interval = b.interval;
                        self.cfg.timeout = b.timeout;
                        self.cfg.keep = b.keep;
                        self.next_interval = self.cfg.interval.map(|i| Instant::now() + i);
                        self.meeting.closed = b.closed.iter().cloned().collect();
                        for &i in &b.used_slots {
                            if let Some(p) = self.procs.get_mut(i).filter(|p| p.slot.is_some()) {
                                p.slot = Some(SlotUse::Used);
                            }
                        }
                        self.begun = Some(b);
                    }
                }
                None => {}
            }
            self.timers();
        }
        self.stop();
    }

    /// Deadlines and the interval.
    fn timers(&mut self) {
        let now = Instant::now();
        if self.ckpt.as_ref().is_some_and(|c| now >= c.deadline) {
            self.deadline_passed();
        }
        if self.next_interval.is_some_and(|t| now >= t) {
            self.next_interval = None;
            if self.ckpt.is_none() {
                self.request(None, "the interval".into());
            }
        }
    }

    fn stop(&mut self) {
        if let Some(c) = self.ckpt.take() {
            let done = Msg::new(Verb::Done)
                .arg("ckpt", c.version)
                .arg("ok", 0)
                .arg("why", "the job ended during the checkpoint");
            for id in c.clients.iter().chain(self.queued.iter().flatten()) {
                if let Some(p) = self.peers.get_mut(id) {
                    send_or_log(&mut p.writer, &done, "client");
                }
            }
        }
        for (_, p) in self.peers.drain() {
            let _ = p.writer.shutdown(Shutdown::Both);
        }
        let (lock, cv) = &*self.shared;
        lock.lock().expect("root state lock").stopped = true;
        cv.notify_all();
    }

    // ---- connections ---------------------------------------------------------------------

    fn opened(&mut self, id: u64, msg: Msg, writer: TcpStream, peer: SocketAddr) {
        let who = format!("root coordinator: {} from {peer}", msg.verb);
        match msg.verb {
            Verb::Client => self.client(id, &msg, writer, &who),
            Verb::Subcoord => match self.check_node(&msg) {
                Ok(n) => {
                    let addr = msg.get("addr").unwrap_or("").to_string();
                    let links = msg.get("links").unwrap_or("").to_string();
                    let slot = &mut self.nodes[n];
                    slot.conn = Some(id);
                    slot.addr = Some(addr.clone());
                    slot.pid = msg.num("pid").unwrap_or(0);
                    slot.lost = false;
                    let mut peer = Peer {
                        role: Role::Node(n),
                        writer,
                    };
                    send_or_log(
                        &mut peer.writer,
                        &Msg::new(Verb::Welcome).arg("node", n),
                        "sub-coordinator",
                    );
                    self.peers.insert(id, peer);
                    tracing::debug!("node {n}: sub-coordinator at {addr} registered");
                    let (lock, cv) = &*self.shared;
                    lock.lock().expect("root state lock").node_addrs[n] =
                        Some(NodeAddrs { procs: addr, links });
                    cv.notify_all();
                }
                Err(why) => deny(writer, &why, who),
            },
            Verb::Hello => deny(
                writer,
                "this is the root coordinator: processes connect to their node's \
                 sub-coordinator (CAIRN_COORD_ADDR)",
                who,
            ),
            _ => deny(writer, &format!("unexpected first line {}", msg.verb), who),
        }
    }

    fn check_node(&self, msg: &Msg) -> Result<usize, String> {
        if !msg.get("token").is_some_and(|t| self.cfg.token.matches(t)) {
            return Err("wrong token".into());
        }
        if let Some(j) = msg.get("job").filter(|j| *j != self.cfg.job) {
            return Err(format!(
                "job mismatch: this is job {}, not {j}",
                self.cfg.job
            ));
        }
        let n: usize = msg.num("node").map_err(|e| e.to_string())?;
        let Some(slot) = self.nodes.get(n) else {
            return Err(format!("no node {n}: the job has {} nodes", self.cfg.nodes));
        };
        if slot.conn.is_some() {
            return Err(format!("node {n} already has a sub-coordinator"));
        }
        let procs: usize = msg.num("procs").map_err(|e| e.to_string())?;
        if procs != slot.procs.len() {
            return Err(format!(
                "node {n} has {} processes, not {procs}",
                slot.procs.len()
            ));
        }
        Ok(n)
    }

    fn client(&mut self, id: u64, msg: &Msg, mut writer: TcpStream, who: &str) {
        if !msg.get("token").is_some_and(|t| self.cfg.token.matches(t)) {
            return deny(writer, "wrong token", who);
        }
        match msg.get("cmd") {
            Some("status") => {
                for line in self.status() {
                    send_or_log(&mut writer, &line, "client");
                }
                let _ = writer.shutdown(Shutdown::Both);
            }
            Some("checkpoint") => {
                self.peers.insert(
                    id,
                    Peer {
                        role: Role::Client,
                        writer,
                    },
                );
                self.request(Some(id), "a client".into());
            }
            Some("kill") => {
                let sig = msg
                    .num::<i32>("signal")
                    .ok()
                    .filter(|s| *s > 0 && *s < 65)
                    .unwrap_or(libc::SIGKILL);
                let n = self.signal(sig);
                tracing::info!("job {}: signal {sig} sent to {n} processes", self.cfg.job);
                let done = Msg::new(Verb::Done).arg("ok", 1).arg("killed", n);
                send_or_log(&mut writer, &done, "client");
                let _ = writer.shutdown(Shutdown::Both);
            }
            other => deny(
                writer,
                &format!("unknown command {:?}", other.unwrap_or("")),
                who,
            ),
        }
    }

    fn status(&self) -> Vec<Msg> {
        let mut out = vec![Msg::new(Verb::Job)
            .arg("job", &self.cfg.job)
            .arg("procs", self.cfg.procs)
            .arg("nodes", self.cfg.nodes)
            .arg(
                "state",
                match (&self.ckpt, &self.begun) {
                    (Some(c), _) => format!("checkpointing:{}", c.phase.name()),
                    // Until the engine is up a checkpoint request is refused.
                    (None, None) => "starting".into(),
                    (None, Some(_)) => "idle".into(),
                },
            )
            .arg("ckpt", self.ckpt.as_ref().map(|c| c.version).unwrap_or(0))];
        for (i, p) in self.procs.iter().enumerate() {
            let (state, status) = match p.state {
                ProcState::Missing => ("missing", None),
                // A slot that waits for a command.
                ProcState::Running if p.slot == Some(SlotUse::Free) => ("slot", None),
                ProcState::Running => ("running", None),
                ProcState::Exited(s) => ("exited", Some(s)),
                ProcState::Lost => ("lost", None),
            };
            let mut m = Msg::new(Verb::Proc)
                .arg("proc", i)
                .arg("pid", p.pid)
                .arg("node", p.node)
                .arg("host", if p.host.is_empty() { "-" } else { &p.host })
                .arg("state", state)
                .arg("restarted", u8::from(p.restarted));
            if let Some(s) = status {
                m = m.arg("status", s);
            }
            match p.slot {
                Some(SlotUse::Free) => m = m.arg("slot", "free"),
                Some(SlotUse::Used) => m = m.arg("slot", "used"),
                None => {}
            }
            out.push(m);
        }
        for (n, s) in self.nodes.iter().enumerate() {
            let joined = s
                .procs
                .iter()
                .filter(|&&i| self.procs[i].state == ProcState::Running)
                .count();
            out.push(
                Msg::new(Verb::Node)
                    .arg("node", n)
                    .arg("procs", s.procs.len())
                    .arg("running", joined)
                    .arg("subcoord", s.addr.as_deref().unwrap_or("-"))
                    .arg("pid", s.pid)
                    .arg(
                        "state",
                        match (s.conn, s.lost) {
                            (Some(_), _) => "connected",
                            (None, true) => "lost",
                            (None, false) => "waiting",
                        },
                    ),
            );
        }
        out.push(match self.last {
            Some(l) => Msg::new(Verb::Last)
                .arg("ckpt", l.version)
                .arg("when", l.when)
                .arg(
                    "dir",
                    manifest::version_dir(&self.cfg.job_dir, l.version).display(),
                ),
            None => Msg::new(Verb::Last).arg("ckpt", "none"),
        });
        out.push(Msg::new(Verb::End));
        out
    }

    /// Has every connected node send `sig` to its running processes; returns how many
    /// processes that is, as far as the root knows (those that have not ended).
    fn signal(&mut self, sig: i32) -> usize {
        let ended = {
            let (lock, _) = &*self.shared;
            lock.lock().expect("root state lock").ended.clone()
        };
        let mut count = 0;
        for n in 0..self.nodes.len() {
            let Some(id) = self.nodes[n].conn else {
                continue;
            };
            if let Some(p) = self.peers.get_mut(&id) {
                send_or_log(
                    &mut p.writer,
                    &Msg::new(Verb::Kill).arg("signal", sig),
                    "sub-coordinator",
                );
                count += self.nodes[n]
                    .procs
                    .iter()
                    .filter(|&&i| ended[i].is_none())
                    .count();
            }
        }
        count
    }

    /// Records process `i`'s end for the launcher.
    fn set_ended(&mut self, i: usize, st: ExitStatus) {
        let (lock, cv) = &*self.shared;
        let mut g = lock.lock().expect("root state lock");
        if g.ended[i].is_none() {
            g.ended[i] = Some(st);
            cv.notify_all();
        }
    }

    fn closed(&mut self, id: u64, why: Option<String>) {
        let Some(peer) = self.peers.remove(&id) else {
            return;
        };
        let _ = peer.writer.shutdown(Shutdown::Both);
        match peer.role {
            Role::Client => {
                if let Some(c) = &mut self.ckpt {
                    c.clients.retain(|&x| x != id);
                }
                if let Some(q) = &mut self.queued {
                    q.retain(|&x| x != id);
                }
            }
            Role::Node(n) => {
                let slot = &mut self.nodes[n];
                slot.conn = None;
                slot.lost = true;
                let procs = slot.procs.clone();
                for &i in &procs {
                    if matches!(self.procs[i].state, ProcState::Running | ProcState::Missing) {
                        self.procs[i].state = ProcState::Lost;
                    }
                    // They die with their sub-coordinator.
                    self.set_ended(i, ExitStatus::from_raw(libc::SIGKILL));
                }
                self.end_unused_slots();
                let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
                let report = format!(
                    "node {n}: the sub-coordinator's connection was lost{why} ({})",
                    named("proc", procs)
                );
                match self.ckpt.as_ref().map(|c| c.phase) {
                    Some(Phase::Resume { .. }) => {
                        tracing::warn!("{report}");
                        self.answered(n);
                    }
                    // Every image is written: the checkpoint stands; the job will have to be
                    // restarted from it.
                    Some(Phase::Store) | None => tracing::warn!("{report}"),
                    Some(_) => self.fail(report),
                }
            }
        }
    }

    // ---- lines from sub-coordinators ------------------------------------------------------

    fn line(&mut self, id: u64, msg: Msg) {
        let Some(peer) = self.peers.get(&id) else {
            return;
        };
        let Role::Node(n) = peer.role else {
            tracing::debug!("root coordinator: client sent {}; ignored", msg.verb);
            return;
        };
        if let Err(e) = self.node_line(n, &msg) {
            tracing::warn!("node {n}: {msg}: {e}");
        }
    }

    fn node_line(&mut self, n: usize, msg: &Msg) -> Result<()> {
        match msg.verb {
            Verb::Joined | Verb::Left => {
                let i: usize = msg.num("proc")?;
                let Some(p) = self.procs.get_mut(i).filter(|p| p.node == n) else {
                    return Err(Error::new(
                        ErrorKind::Protocol,
                        "not a process of this node",
                    ));
                };
                if msg.verb == Verb::Joined {
                    p.state = ProcState::Running;
                    p.pid = msg.num("pid")?;
                    p.host = msg.get("host").unwrap_or("").to_string();
                    p.restarted = msg.get("restarted") == Some("1");
                } else {
                    p.state = match msg.get("status").and_then(|s| s.parse().ok()) {
                        Some(s) => ProcState::Exited(s),
                        None => ProcState::Lost,
                    };
                }
                if self
                    .ckpt
                    .as_ref()
                    .is_some_and(|c| c.phase == Phase::Register)
                {
                    self.check_registered();
                }
            }
            Verb::Ended => {
                let i: usize = msg.num("proc")?;
                if !self.procs.get(i).is_some_and(|p| p.node == n) {
                    return Err(Error::new(
                        ErrorKind::Protocol,
                        "not a process of this node",
                    ));
                }
                let st = ExitStatus::from_raw(msg.num("status")?);
                let p = &mut self.procs[i];
                if matches!(p.state, ProcState::Running | ProcState::Missing) {
                    // It ended without saying BYE (killed, or before it could join).
                    p.state = match st.code() {
                        Some(c) => ProcState::Exited(c),
                        None => ProcState::Lost,
                    };
                }
                self.set_ended(i, st);
                self.end_unused_slots();
                if self
                    .ckpt
                    .as_ref()
                    .is_some_and(|c| c.phase == Phase::Register)
                {
                    self.check_registered();
                }
            }
            Verb::Rsh => self.rsh(n, msg)?,
            Verb::Done => self.ran(n, msg)?,
            Verb::Checkpoint => {
                let who = msg.get("proc").unwrap_or("?");
                self.request(None, format!("proc {who}"));
            }
            Verb::Suspended
            | Verb::Written
            | Verb::Image
            | Verb::Conn
            | Verb::Failed
            | Verb::Resumed => {
                self.phase_answer(n, msg)?;
            }
            Verb::Listen | Verb::Seek => self.meet(n, msg)?,
            v => {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    format!("{v} is not something a sub-coordinator sends"),
                ))
            }
        }
        Ok(())
    }

    fn phase_answer(&mut self, n: usize, msg: &Msg) -> Result<()> {
        let v: u64 = msg.num("ckpt")?;
        let Some(c) = self.ckpt.as_mut().filter(|c| c.version == v) else {
            tracing::debug!("node {n}: {msg} for no running checkpoint; ignored");
            return Ok(());
        };
        let expected = self.nodes[n].procs.len();
        match (msg.verb, c.phase) {
            (Verb::Failed, Phase::Suspend | Phase::Write) => {
                let why = msg.get("why").unwrap_or("no reason given");
                self.fail(format!("node {n}: {why}"));
            }
            (Verb::Suspended, Phase::Suspend) | (Verb::Written, Phase::Write) => {
                let count: usize = msg.num("count")?;
                if count != expected {
                    self.fail(format!(
                        "node {n} answered {} for {count} processes, not {expected}",
                        msg.verb
                    ));
                    return Ok(());
                }
                if msg.verb == Verb::Written {
                    // Each image was reported on a line of its own before this (IMAGE).
                    let reported = c
                        .sizes
                        .iter()
                        .filter(|((i, _), _)| self.procs[*i].node == n)
                        .fold((0usize, 0u64), |(k, b), (_, &len)| (k + 1, b + len));
                    let images: usize = msg.num("images")?;
                    let bytes: u64 = msg.num("bytes")?;
                    if reported != (images, bytes) {
                        self.fail(format!(
                            "node {n} answered WRITTEN for {images} images of {bytes} bytes, \
                             but reported {} of {}",
                            reported.0, reported.1
                        ));
                        return Ok(());
                    }
                    c.bytes[n] = Some(bytes);
                }
                self.answered(n);
            }
            (Verb::Image, Phase::Write) => {
                let i: usize = msg.num("proc")?;
                // A member is a process of the tree other than its first: pid > 1 in the
                // tree's namespace.
                let ns: u32 = match msg.get("member") {
                    Some(_) => msg.num::<u32>("member")?.max(1),
                    None => 0,
                };
                if !self.procs.get(i).is_some_and(|p| p.node == n) || ns == 1 {
                    self.fail(format!(
                        "node {n} reported an image of proc {i} (process {ns}), not one of its own"
                    ));
                    return Ok(());
                }
                c.sizes.insert((i, ns), msg.num("bytes")?);
            }
            (Verb::Conn, Phase::Write) => {
                let i: usize = msg.num("proc")?;
                if !self.procs.get(i).is_some_and(|p| p.node == n) {
                    self.fail(format!(
                        "node {n} reported a connection of proc {i}, not one of its own"
                    ));
                    return Ok(());
                }
                c.conns.push(ConnEnd {
                    node: n,
                    who: msg.req("who")?.to_string(),
                    fd: msg.num("fd")?,
                    local: msg.req("local")?.to_string(),
                    peer: msg.req("peer")?.to_string(),
                    close: msg.get("close") == Some("1"),
                });
            }
            (Verb::Resumed, Phase::Resume { .. }) => {
                if let Some(w) = msg.get("writing") {
                    tracing::info!(
                        "checkpoint {v}: node {n}: procs {w} may still be writing; their \
                         staging is left for later deletion"
                    );
                }
                if let Some(m) = msg.get("missing") {
                    tracing::warn!(
                        "checkpoint {v}: node {n}: procs {m} did not confirm RESUME within {:.0} s",
                        self.cfg.timeout.as_secs_f64()
                    );
                }
                self.answered(n);
            }
            _ => tracing::debug!("node {n}: {msg} in phase {}; ignored", c.phase.name()),
        }
        Ok(())
    }

    // ---- slots and commands run in them (`--rsh`) -----------------------------------------

    /// Node `n` asks, for a `cairn rsh` connected to it (`rsh=`, its connection there), to
    /// run a command on host `host=`: in a free slot of a node on that host, which is from
    /// then on a process the job waits for. The target node answers when the slot got it.
    fn rsh(&mut self, n: usize, msg: &Msg) -> Result<()> {
        let id: u64 = msg.num("rsh")?;
        let host = msg.req("host")?;
        let cmd = msg.req("cmd")?;
        let i = match self.free_slot(host) {
            Ok(i) => i,
            Err(why) => {
                self.answer_rsh(n, id, Err(why));
                return Ok(());
            }
        };
        let k = self.procs[i].node;
        let run = Msg::new(Verb::Run)
            .arg("rsh", id)
            .arg("from", n)
            .arg("proc", i)
            .arg("cmd", cmd);
        let sent = match self.node_writer(k) {
            Some(w) => crate::proto::send_whole(w, &run).map_err(|e| e.to_string()),
            None => Err("its sub-coordinator is not connected".into()),
        };
        match sent {
            Ok(()) => {
                self.procs[i].slot = Some(SlotUse::Used);
                tracing::info!(
                    "job {}: host {host}: proc {i}, the slot on node {k}, runs `{cmd}`",
                    self.cfg.job
                );
            }
            Err(e) => self.answer_rsh(n, id, Err(format!("node {k}: {e}"))),
        }
        Ok(())
    }

    /// The connection to node `k`'s sub-coordinator, while it is connected.
    fn node_writer(&mut self, k: usize) -> Option<&mut TcpStream> {
        let id = self.nodes[k].conn?;
        self.peers.get_mut(&id).map(|p| &mut p.writer)
    }

    /// Whether `host` names node `k`: its host as `--hosts` gave it, its sub-coordinator's
    /// address, or the host name its processes reported.
    fn node_is(&self, k: usize, host: &str) -> bool {
        let addr = self.nodes[k].addr.as_deref();
        self.cfg.hosts.get(k).is_some_and(|h| h == host)
            || addr
                .and_then(|a| a.parse::<SocketAddr>().ok())
                .is_some_and(|a| a.ip().to_string() == host)
            || (self.nodes[k].procs.iter()).any(|&i| self.procs[i].host == host)
    }

    /// The first free slot, still running or starting, on a node of `host`; or why there is
    /// none.
    fn free_slot(&self, host: &str) -> Result<usize, String> {
        let nodes: Vec<usize> = (0..self.nodes.len())
            .filter(|&k| self.node_is(k, host))
            .collect();
        if nodes.is_empty() {
            let known = match self.cfg.hosts.is_empty() {
                true => "it runs on simulated nodes of one host".to_string(),
                false => format!("its hosts are {}", self.cfg.hosts.join(", ")),
            };
            return Err(format!(
                "{host} is not a host of job {} ({known})",
                self.cfg.job
            ));
        }
        let slots: Vec<usize> = (nodes.iter())
            .flat_map(|&k| self.nodes[k].procs.iter().copied())
            .filter(|&i| self.procs[i].slot.is_some())
            .collect();
        let free = slots.iter().copied().find(|&i| {
            let p = &self.procs[i];
            p.slot == Some(SlotUse::Free)
                && matches!(p.state, ProcState::Running | ProcState::Missing)
                && self.nodes[p.node].conn.is_some()
        });
        match (free, slots.is_empty()) {
            (Some(i), _) => Ok(i),
            (None, true) => Err(format!(
                "host {host} ({}) has no slot: it runs the job's program itself (slots are on \
                 the other hosts of a job launched with --rsh)",
                named("node", nodes)
            )),
            (None, false) => Err(format!(
                "no free slot on host {host} ({}): {} ran a command already or ended",
                named("node", nodes),
                named("proc", slots)
            )),
        }
    }

    /// Node `n` says whether slot `proc=` got the command of an `RSH` (`DONE rsh= to=`):
    /// the answer goes to the node whose `cairn rsh` asked.
    fn ran(&mut self, n: usize, msg: &Msg) -> Result<()> {
        let id: u64 = msg.num("rsh")?;
        let to: usize = msg.num("to")?;
        let i: usize = msg.num("proc")?;
        if to >= self.nodes.len() || !self.procs.get(i).is_some_and(|p| p.node == n) {
            return Err(Error::new(
                ErrorKind::Protocol,
                "not an answer about a slot of this node",
            ));
        }
        let outcome = match msg.get("ok") {
            Some("1") => Ok(i),
            _ => Err(format!(
                "node {n}: {}",
                msg.get("why").unwrap_or("no reason given")
            )),
        };
        self.answer_rsh(to, id, outcome);
        Ok(())
    }

    /// Answers the `cairn rsh` `id` waiting on node `to`: the slot that got its command, or
    /// why none did.
    fn answer_rsh(&mut self, to: usize, id: u64, outcome: Result<usize, String>) {
        let m = Msg::new(Verb::Done).arg("rsh", id);
        let m = match outcome {
            Ok(i) => m
                .arg("ok", 1)
                .arg("proc", i)
                .arg("node", self.procs[i].node),
            Err(why) => {
                tracing::warn!("job {}: cairn rsh refused: {why}", self.cfg.job);
                m.arg("ok", 0).arg("why", why)
            }
        };
        if let Some(w) = self.node_writer(to) {
            send_or_log(w, &m, format_args!("node {to}"));
        }
    }

    /// Once every process the job waits for has ended (those that are not slots, and the
    /// slots that were given a command), the slots never used are ended by their nodes:
    /// nothing will use them now, and their statuses are not the job's.
    fn end_unused_slots(&mut self) {
        let (lock, cv) = &*self.shared;
        let mut g = lock.lock().expect("root state lock");
        let waited_for_ended = (self.procs.iter().enumerate())
            .filter(|(_, p)| p.slot != Some(SlotUse::Free))
            .all(|(i, _)| g.ended[i].is_some());
        let unused: Vec<usize> = (0..self.procs.len())
            .filter(|&i| self.procs[i].slot == Some(SlotUse::Free) && !g.unused_slots.contains(&i))
            .collect();
        if !waited_for_ended || unused.is_empty() {
            return;
        }
        g.unused_slots.extend(&unused);
        let ended = g.ended.clone();
        cv.notify_all();
        drop(g);
        for i in unused.into_iter().filter(|&i| ended[i].is_none()) {
            let node = self.procs[i].node;
            let kill = Msg::new(Verb::Kill)
                .arg("signal", libc::SIGKILL)
                .arg("proc", i);
            if let Some(w) = self.node_writer(node) {
                send_or_log(w, &kill, format_args!("node {node}"));
            }
        }
    }

    // ---- the checkpoint state machine ----------------------------------------------------

    /// A checkpoint was asked for. A request joins the running checkpoint while it has not
    /// written anything yet; later ones get a new checkpoint after it.
    fn request(&mut self, client: Option<u64>, by: String) {
        if self.begun.is_none() {
            let done = Msg::new(Verb::Done)
                .arg("ckpt", 0)
                .arg("ok", 0)
                .arg("why", "the job is still starting: its engine is not up yet");
            if let Some(mut p) = client.and_then(|id| self.peers.remove(&id)) {
                send_or_log(&mut p.writer, &done, "client");
                let _ = p.writer.shutdown(Shutdown::Both);
            }
            return;
        }
        match &mut self.ckpt {
            Some(c) if matches!(c.phase, Phase::Register | Phase::Suspend) => {
                c.clients.extend(client);
            }
            Some(_) => self.queued.get_or_insert_with(Vec::new).extend(client),
            None => self.begin(client.into_iter().collect(), by),
        }
    }

    fn begin(&mut self, clients: Vec<u64>, by: String) {
        let version = self.next_version;
        self.next_version += 1;
        self.next_interval = None;
        tracing::info!(
            "checkpoint {version} of job {}: requested by {by}",
            self.cfg.job
        );
        let now = Instant::now();
        self.ckpt = Some(Ckpt {
            version,
            phase: Phase::Register,
            started: now,
            deadline: now + self.cfg.timeout,
            pending: BTreeSet::new(),
            bytes: vec![None; self.cfg.nodes],
            sizes: BTreeMap::new(),
            failures: Vec::new(),
            conns: Vec::new(),
            closed: Vec::new(),
            clients,
            images: Vec::new(),
            total_bytes: 0,
            total_stored: 0,
        });
        self.check_registered();
    }

    /// In REGISTER: goes on once every process has joined; fails at once if one is gone.
    fn check_registered(&mut self) {
        let gone: Vec<String> = self
            .procs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.state {
                ProcState::Exited(s) => Some(format!("proc {i} exited with status {s}")),
                ProcState::Lost => Some(format!(
                    "proc {i} (node {}) is gone: it lost its connection (it died, or replaced \
                     itself by exec with a program that does not load the checkpoint library: \
                     statically linked, or with LD_PRELOAD or the environment cleared)",
                    p.node
                )),
                _ => None,
            })
            .collect();
        if !gone.is_empty() {
            return self.fail(gone.join("; "));
        }
        if self.procs.iter().all(|p| p.state == ProcState::Running) {
            self.start_phase(Phase::Suspend);
        }
    }

    /// Sends the phase's command to every node and waits for all of them.
    fn start_phase(&mut self, phase: Phase) {
        let c = self.ckpt.as_mut().expect("a checkpoint runs");
        let v = c.version;
        let msg = match phase {
            Phase::Suspend => Msg::new(Verb::Suspend).arg("ckpt", v),
            // Each node creates its own staging directory and tells its processes where.
            Phase::Write => Msg::new(Verb::Write).arg("ckpt", v),
            Phase::Resume { ok } => Msg::new(Verb::Resume)
                .arg("ckpt", v)
                .arg("ok", u8::from(ok)),
            Phase::Register | Phase::Store => unreachable!("{} sends nothing", phase.name()),
        };
        c.phase = phase;
        c.deadline = Instant::now() + self.cfg.timeout + NODE_MARGIN;
        c.pending = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].conn.is_some())
            .collect();
        self.progress();
        let mut unreachable = Vec::new();
        for n in 0..self.nodes.len() {
            let Some(conn) = self.nodes[n].conn else {
                unreachable.push(n);
                continue;
            };
            let w = &mut self.peers.get_mut(&conn).expect("a node's peer").writer;
            if let Err(e) = crate::proto::send(w, &msg) {
                tracing::warn!("node {n}: {e}");
                // Its reader will see the connection end and report it.
            }
        }
        if !unreachable.is_empty() && !matches!(phase, Phase::Resume { .. }) {
            return self.fail(format!(
                "no sub-coordinator is connected for {}",
                named("node", unreachable)
            ));
        }
        if self.ckpt.as_ref().is_some_and(|c| c.pending.is_empty()) {
            self.phase_done();
        }
    }

    /// Node `n` answered the current phase.
    fn answered(&mut self, n: usize) {
        let Some(c) = self.ckpt.as_mut() else { return };
        if c.pending.remove(&n) && c.pending.is_empty() {
            self.phase_done();
        }
    }

    fn phase_done(&mut self) {
        let phase = self.ckpt.as_ref().expect("a checkpoint runs").phase;
        match phase {
            Phase::Register => {}
            Phase::Suspend => self.start_phase(Phase::Write),
            Phase::Write => match self.check_images() {
                Ok(()) => self.store(),
                Err(why) => self.fail(why),
            },
            Phase::Store => {}
            Phase::Resume { ok } => self.finish(ok),
        }
    }

    /// Every node answered WRITTEN, having checked its own images where they are (each a
    /// file of the length its process reported, with the descriptors its tree shares): the
    /// images as the nodes reported them. Every process needs its own image.
    fn check_images(&mut self) -> Result<(), String> {
        let c = self.ckpt.as_ref().expect("a checkpoint runs");
        let mut images = Vec::with_capacity(self.procs.len());
        for (i, p) in self.procs.iter().enumerate() {
            let Some(&bytes) = c.sizes.get(&(i, 0)) else {
                return Err(format!(
                    "node {} answered WRITTEN without the image of proc {i}",
                    p.node
                ));
            };
            let members = manifest::members_of(&c.sizes, i);
            images.push(ProcImage {
                proc: i,
                node: p.node,
                host: p.host.clone(),
                pid: p.pid,
                bytes,
                region: 0,
                stored: 0,
                members,
                slot: p.slot,
            });
        }
        let closed = self.match_connections()?;
        let c = self.ckpt.as_mut().expect("a checkpoint runs");
        c.total_bytes = c.sizes.values().sum();
        c.images = images;
        c.closed = closed;
        Ok(())
    }

    /// Every connection between hosts the nodes reported needs its other end in the job
    /// (the end whose addresses are this one's, the other way round), held once: a restart
    /// connects the two again. One whose other end is elsewhere fails the checkpoint,
    /// naming it, unless its process chose to have it come back closed
    /// (`CAIRN_CKPT_EXTERNAL=close`): those are returned, by key.
    fn match_connections(&self) -> Result<Vec<String>, String> {
        let c = self.ckpt.as_ref().expect("a checkpoint runs");
        let mut ends: HashMap<(&str, &str), &ConnEnd> = HashMap::new();
        for e in &c.conns {
            if let Some(other) = ends.insert((&e.local, &e.peer), e) {
                return Err(format!(
                    "node {}: {} (fd {}) and node {}: {} (fd {}) both hold a connection from {} \
                     to {}",
                    other.node, other.who, other.fd, e.node, e.who, e.fd, e.local, e.peer
                ));
            }
        }
        let mut outside = Vec::new();
        let mut closed = Vec::new();
        for e in &c.conns {
            if ends.contains_key(&(e.peer.as_str(), e.local.as_str())) {
                continue;
            }
            if e.close {
                closed.push(connection_key(&e.local, &e.peer));
            } else {
                outside.push(format!(
                    "node {}: {}: fd {} is a TCP connection from {} to {}, and no process of the \
                     job holds its other end",
                    e.node, e.who, e.fd, e.local, e.peer
                ));
            }
        }
        if outside.is_empty() {
            return Ok(closed);
        }
        Err(format!(
            "{} (a connection leaving the job cannot be made again at a restart; with \
             CAIRN_CKPT_EXTERNAL=close in the job's environment it comes back closed instead)",
            crate::hub::first_findings(outside.iter().map(String::as_str))
        ))
    }

    /// A restored process's connection to another host (through node `n`): its listening
    /// end says where it listens (LISTEN), its other end asks (SEEK); each answer goes to the
    /// nodes of those that asked. A connection that comes back closed is answered NONE.
    fn meet(&mut self, n: usize, msg: &Msg) -> Result<()> {
        let key = msg.req("key")?.to_string();
        let m = &mut self.meeting;
        let mut answers: Vec<(usize, Msg)> = Vec::new();
        if m.closed.contains(&key) {
            answers.push((n, Msg::new(Verb::NoPeer).arg("key", &key)));
        } else if msg.verb == Verb::Listen {
            let addr = msg.req("addr")?.to_string();
            let peer = Msg::new(Verb::Peer).arg("key", &key).arg("addr", &addr);
            for k in m.seeks.remove(&key).unwrap_or_default() {
                answers.push((k, peer.clone()));
            }
            m.listens.insert(key, addr);
        } else if let Some(addr) = m.listens.get(&key) {
            answers.push((n, Msg::new(Verb::Peer).arg("key", &key).arg("addr", addr)));
        } else {
            m.seeks.entry(key).or_default().push(n);
        }
        for (k, a) in answers {
            if let Some(w) = self.node_writer(k) {
                send_or_log(w, &a, format_args!("node {k}"));
            }
        }
        Ok(())
    }

    /// STORE: the engine takes the images, on a thread of its own; `stored` goes on.
    fn store(&mut self) {
        let c = self.ckpt.as_mut().expect("a checkpoint runs");
        let v = c.version;
        c.phase = Phase::Store;
        c.deadline = Instant::now() + STORE_LIMIT;
        c.pending.clear();
        self.progress();
        let c = self.ckpt.as_ref().expect("a checkpoint runs");
        let paths: Vec<Vec<TreeImage>> = c
            .images
            .iter()
            .map(|p| {
                let dir = self.cfg.staging.version_dir(p.node, v);
                p.files()
                    .into_iter()
                    .map(|f| TreeImage {
                        id: f.id,
                        path: dir.join(f.name),
                    })
                    .collect()
            })
            .collect();
        let images = self.begun.as_ref().expect("begun").images.clone();
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("cairn-store-{v}"))
            .spawn(move || {
                let result = images.checkpoint(v, &paths).map_err(|e| e.to_string());
                let _ = tx.send(Event::Stored { version: v, result });
            });
        if let Err(e) = spawned {
            self.fail(format!("cannot start the engine's thread: {e}"));
        }
    }

    /// The engine is done with checkpoint `v`: on success, the manifest is written (from
    /// then on the checkpoint is complete) and the processes resume.
    fn stored(&mut self, v: u64, result: Result<Stored, String>) {
        if !self
            .ckpt
            .as_ref()
            .is_some_and(|c| c.version == v && c.phase == Phase::Store)
        {
            tracing::debug!("checkpoint {v}: the engine reported after the checkpoint ended");
            return;
        }
        let published = result
            .map_err(|e| format!("the engine could not store the images: {e}"))
            .and_then(|s| self.publish(&s));
        match published {
            Ok(()) => self.start_phase(Phase::Resume { ok: true }),
            Err(why) => self.fail(why),
        }
    }

    /// Writes the manifest of the checkpoint the engine stored. From here on the checkpoint
    /// is complete, whatever happens next.
    fn publish(&mut self, stored: &Stored) -> Result<(), String> {
        let c = self.ckpt.as_mut().expect("a checkpoint runs");
        // Each image is a region of its own length.
        for (p, &s) in c.images.iter_mut().zip(&stored.stored) {
            p.stored = s;
            p.region = p.bytes;
            for m in &mut p.members {
                m.region = m.bytes;
            }
        }
        c.total_stored = stored.stored.iter().sum();
        let begun = self.begun.as_ref().expect("begun");
        let mut engine = begun.images.record().clone();
        engine.incremental = stored.incremental;
        let m = Manifest {
            format: manifest::FORMAT,
            job: self.cfg.job.clone(),
            version: c.version,
            created: now_unix(),
            nodes: self.cfg.nodes,
            bytes: c.total_bytes,
            procs: c.images.clone(),
            closed: c.closed.clone(),
            engine,
            launch: begun.launch.clone(),
        };
        let dir = manifest::version_dir(&self.cfg.job_dir, c.version);
        crate::jobdir::create_private_dir(&dir)
            .and_then(|()| m.publish(&self.cfg.job_dir))
            .map_err(|e| format!("cannot write the manifest: {e}"))?;
        tracing::info!(
            "checkpoint {} of job {}: the engine stored {} bytes for {} bytes of images{} in \
             {:.2} s",
            c.version,
            self.cfg.job,
            c.total_stored,
            c.total_bytes,
            if stored.incremental {
                " (incremental)"
            } else {
                ""
            },
            stored.secs
        );
        self.last = Some(LastCheckpoint {
            version: m.version,
            when: m.created,
        });
        Ok(())
    }

    /// Tells the checkpoint's clients which phase starts.
    fn progress(&mut self) {
        let c = self.ckpt.as_ref().expect("a checkpoint runs");
        let secs = c.started.elapsed().as_secs_f64();
        let progress = Msg::new(Verb::Progress)
            .arg("ckpt", c.version)
            .arg("phase", c.phase.name())
            .arg("secs", format!("{secs:.3}"));
        for id in c.clients.clone() {
            if let Some(p) = self.peers.get_mut(&id) {
                send_or_log(&mut p.writer, &progress, "client");
            }
        }
    }

    /// Once every restored process has registered, their images are read: the restart's
    /// staging directories go.
    fn fail(&mut self, why: String) {
        let Some(c) = self.ckpt.as_mut() else { return };
        match c.phase {
            Phase::Resume { .. } => {
                tracing::warn!("checkpoint {}: while resuming: {why}", c.version);
            }
            Phase::Register => {
                c.failures.push(why);
                self.finish(false);
            }
            Phase::Suspend | Phase::Write | Phase::Store => {
                c.failures.push(why);
                self.start_phase(Phase::Resume { ok: false });
            }
        }
    }

    fn deadline_passed(&mut self) {
        let Some(c) = self.ckpt.as_mut() else { return };
        let t = self.cfg.timeout.as_secs_f64();
        match c.phase {
            Phase::Register => {
                let missing: Vec<usize> = (0..self.procs.len())
                    .filter(|&i| self.procs[i].state == ProcState::Missing)
                    .collect();
                let nodes: BTreeSet<usize> = missing.iter().map(|&i| self.procs[i].node).collect();
                self.fail(format!(
                    "{} ({}) did not register within {t:.0} s",
                    named("proc", missing),
                    named("node", nodes)
                ));
            }
            // The engine is not timed (STORE_LIMIT); nothing to do if it ever were.
            Phase::Store => {}
            Phase::Suspend | Phase::Write => {
                let phase = c.phase.name();
                let report: Vec<String> = c
                    .pending
                    .iter()
                    .map(|&n| {
                        format!(
                            "node {n} ({}) did not answer {phase} within {:.0} s",
                            named("proc", self.nodes[n].procs.iter().copied()),
                            (self.cfg.timeout + NODE_MARGIN).as_secs_f64()
                        )
                    })
                    .collect();
                self.fail(report.join("; "));
            }
            Phase::Resume { ok } => {
                tracing::warn!(
                    "checkpoint {}: {} did not confirm RESUME within {t:.0} s",
                    c.version,
                    named("node", c.pending.iter().copied())
                );
                self.finish(ok);
            }
        }
    }

    fn finish(&mut self, ok: bool) {
        let Some(c) = self.ckpt.take() else { return };
        let secs = c.started.elapsed().as_secs_f64();
        let dir = manifest::version_dir(&self.cfg.job_dir, c.version);
        let done = if ok {
            tracing::info!(
                "checkpoint {} of job {} complete: {} bytes from {} processes, {} stored by the \
                 engine, in {secs:.2} s ({})",
                c.version,
                self.cfg.job,
                c.total_bytes,
                self.procs.len(),
                c.total_stored,
                dir.display()
            );
            let on_global = (self.begun.as_ref())
                .map(|b| b.images.global_versions())
                .unwrap_or_default();
            let removed = manifest::prune(&self.cfg.job_dir, self.cfg.keep, &on_global, c.version);
            if !removed.is_empty() {
                let removed = removed.iter().map(|&v| v as usize);
                tracing::info!("deleted old checkpoints: {}", named("version", removed));
            }
            Msg::new(Verb::Done)
                .arg("ckpt", c.version)
                .arg("ok", 1)
                .arg("dir", dir.display())
                .arg("bytes", c.total_bytes)
                .arg("stored", c.total_stored)
                .arg("secs", format!("{secs:.3}"))
        } else {
            let why = c.failures.join("; ");
            tracing::warn!(
                "checkpoint {} of job {} failed after {secs:.2} s: {why}",
                c.version,
                self.cfg.job
            );
            // A manifest that failed half-way (its directory, a temporary file) goes.
            if dir.exists() {
                if let Err(e) = manifest::remove_version(&self.cfg.job_dir, c.version) {
                    tracing::debug!("{e}");
                }
            }
            Msg::new(Verb::Done)
                .arg("ckpt", c.version)
                .arg("ok", 0)
                .arg("why", why)
        };
        for id in &c.clients {
            if let Some(mut p) = self.peers.remove(id) {
                send_or_log(&mut p.writer, &done, "client");
                let _ = p.writer.shutdown(Shutdown::Both);
            }
        }
        self.next_interval = self.cfg.interval.map(|i| Instant::now() + i);
        if let Some(q) = self.queued.take() {
            self.begin(q, "requests made during the previous checkpoint".into());
        }
    }
}
