//! The engine job of a launched job, spread over its nodes: each node's sub-coordinator runs
//! the engine ranks of its own processes ([`Images::start_ranks`] over a [`Net`] world that
//! the sub-coordinators join among themselves), so every image is read, protected and stored
//! by the host whose processes wrote it, on that host's node-local tier. The root drives them
//! through [`Engines`], which has the calls of [`Images`]: it sends each sub-coordinator the
//! part of a command that concerns its ranks and joins the answers. What crosses the root is
//! paths, versions and byte counts, never a byte of an image.
//!
//! Each sub-coordinator listens on a second address, its link address, which it tells the
//! root when it registers (`SUBCOORD links=`). A connection to it opens with one line:
//!
//! - `ENGINE token=<hex>` from the root, then frames `length (u64, little-endian) | JSON`:
//!   the [`Brief`] (the engine configuration the launcher resolved, the job's shape and every
//!   node's link address), answered by `Started` once the engine is up; then one request per
//!   frame, each answered by one frame.
//! - `LINK token=<hex> node=<k>` from the sub-coordinator of node `k`, which is smaller than
//!   this one's: the connection then carries the [`Net`] world's frames between the two.
//!
//! Every node connects to the nodes before it and accepts the nodes after it, so each pair
//! has one connection. A line with the wrong token, or a second `ENGINE`, is refused.

use crate::error::{Error, ErrorKind, Result};
use crate::hub::Event;
use crate::images::{Images, RestoreError, RestoredImage, Stored, TreeImage};
use crate::jobdir::Token;
use crate::manifest::{EngineRecord, ProcImage};
use crate::proto::{Msg, Verb, MAX_LINE};
use crate::spawn::ProcStart;
use crate::stage::Staging;
use crate::{net, node_of, procs_of_node};
use cairn_comm::Net;
use cairn_core::Config;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a sub-coordinator waits for the root's brief and for the links of the nodes
/// after it.
const LINK_LIMIT: Duration = Duration::from_secs(60);
/// The largest frame either side accepts (a brief or a command names paths, not data).
const MAX_FRAME: u64 = 64 << 20;

/// A process's restored images in its manifest's order, and whether it ran in a pid
/// namespace of Cairn's (see [`Engines::fit`]).
pub type FittedTree = (Vec<RestoredImage>, bool);

/// What the root tells each sub-coordinator before its engine starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Brief {
    pub config: Config,
    pub job: String,
    pub node: usize,
    pub nodes: usize,
    pub procs: usize,
    /// The link address of every node, by node.
    pub links: Vec<String>,
    /// Where the job's processes stage their images; the node creates, prunes and removes
    /// its own part.
    pub staging: Staging,
    /// Each node runs on a host of its own (`--hosts`): the engine's nodes are the hosts
    /// (`[topology] sim_nodes` = 1) rather than `nodes` simulated on one host.
    #[serde(default)]
    pub real_hosts: bool,
}

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Checkpoint {
        version: u64,
        trees: Vec<Vec<TreeImage>>,
    },
    Newest,
    Restore {
        version: u64,
        staging: Staging,
        nodes: Vec<usize>,
        /// The first restore of the restart: the node first clears what a run that ended
        /// left in its staging (the versions' images aside) and makes its restart directory.
        first: bool,
    },
    /// Put the restored images of the node's processes in their manifest's order, cut the
    /// copies to length and check they can run here.
    Fit {
        version: u64,
        procs: Vec<ProcImage>,
        trees: Vec<Vec<RestoredImage>>,
    },
    /// The job has ended: finish the engine's work, remove the restart's copies and, when
    /// every process exited 0 (no restart will read them), the staged images.
    Finalize {
        ended_well: bool,
    },
    /// Start these processes of the node (not an engine call: the connection is the
    /// launcher's to the node, and this is the one thing it asks besides the engine).
    Spawn(Vec<ProcStart>),
}

#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    /// The engine is up; its redundancy plan.
    Started(String),
    Stored(Stored),
    Newest(Option<u64>),
    Restored(u64, Vec<Vec<RestoredImage>>),
    Finalized,
    /// Per process, its tree's images in order and whether it ran in a pid namespace.
    Fitted(Vec<FittedTree>),
    /// The pids of the processes started, in order.
    Spawned(Vec<u32>),
    Failed {
        kind: ErrorKind,
        msg: String,
        /// The restore found no such version everywhere (the caller passes it over).
        not_found: bool,
    },
}

fn failed(e: &Error) -> Answer {
    Answer::Failed {
        kind: e.kind(),
        msg: e.message().to_string(),
        not_found: false,
    }
}

fn write_frame<T: Serialize>(w: &mut impl Write, what: &T) -> std::io::Result<()> {
    let body = serde_json::to_vec(what).map_err(std::io::Error::other)?;
    let mut buf = Vec::with_capacity(8 + body.len());
    buf.extend_from_slice(&(body.len() as u64).to_le_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)?;
    w.flush()
}

fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> std::io::Result<T> {
    let mut len = [0u8; 8];
    r.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "a frame of {len} bytes (at most {MAX_FRAME})"
        )));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// Reads one line byte by byte, so that nothing after it is taken from the stream (it carries
/// frames next).
fn read_line(s: &mut TcpStream) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while line.len() < MAX_LINE {
        if s.read(&mut b)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if b[0] == b'\n' {
            return String::from_utf8(line).map_err(std::io::Error::other);
        }
        line.push(b[0]);
    }
    Err(std::io::Error::other(
        "a line longer than the protocol allows",
    ))
}

// ---- the root's side ---------------------------------------------------------------------

struct Link {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// How many ranks the node runs.
    ranks: usize,
}

struct Links {
    nodes: Vec<Link>,
    /// A call failed half-way (a node is gone, or answered out of turn): no further call
    /// can be trusted to line up.
    broken: bool,
    finalized: bool,
}

/// The engine job of a launched job, as the root drives it; see the module documentation.
pub struct Engines {
    name: String,
    procs: usize,
    /// The global tier's root, absolute.
    global: PathBuf,
    record: EngineRecord,
    links: Mutex<Links>,
}

impl Engines {
    /// Connects to each node's sub-coordinator at its link address (`links[n]`), hands it
    /// the brief and waits until every node's engine is up. Fails with the first node's
    /// reason when one cannot start (a redundancy scheme that needs more nodes, say).
    pub fn start(
        cfg: &Config,
        job: &str,
        procs: usize,
        links: &[String],
        token: &Token,
        staging: &Staging,
        real_hosts: bool,
    ) -> Result<Engines> {
        let nodes = links.len();
        let mut conns = Vec::with_capacity(nodes);
        for (n, addr) in links.iter().enumerate() {
            let mut s = net::connect(addr, n as u64)?;
            let hello = Msg::new(Verb::Engine).arg("token", token.hex()).encode();
            let brief = Brief {
                config: cfg.clone(),
                job: job.to_string(),
                node: n,
                nodes,
                procs,
                links: links.to_vec(),
                staging: staging.clone(),
                real_hosts,
            };
            s.write_all(hello.as_bytes())
                .and_then(|()| write_frame(&mut s, &brief))
                .map_err(|e| Error::io(format_args!("brief node {n}'s engine at {addr}"), e))?;
            let reader = BufReader::new(
                s.try_clone()
                    .map_err(|e| Error::io("clone a connection", e))?,
            );
            conns.push(Link {
                reader,
                writer: s,
                ranks: procs_of_node(n, procs, nodes).count(),
            });
        }
        let record = EngineRecord::describe(cfg, job);
        let mut engines = Engines {
            name: job.to_string(),
            procs,
            global: PathBuf::from(&record.global),
            record,
            links: Mutex::new(Links {
                nodes: conns,
                broken: false,
                finalized: false,
            }),
        };
        let l = engines.links.get_mut().expect("engine links");
        let answers = collect(l, "start the engine").map_err(CallError::into_error)?;
        if let Some(Answer::Started(plan)) = answers.first() {
            engines.record.redundancy = plan.clone();
        }
        Ok(engines)
    }

    /// The engine record manifests carry (where images go, and how).
    pub fn record(&self) -> &EngineRecord {
        &self.record
    }

    /// The job's process count (one engine rank each).
    pub fn procs(&self) -> usize {
        self.procs
    }

    /// As [`Images::global_versions`]: read from the global tier, which every host shares.
    pub fn global_versions(&self) -> BTreeSet<u64> {
        crate::images::global_versions(&self.global, &self.name)
    }

    /// As [`Images::checkpoint`], `trees` holding every process's images in order; each
    /// node's engine reads its own processes' images.
    pub fn checkpoint(&self, version: u64, trees: &[Vec<TreeImage>]) -> Result<Stored> {
        if trees.len() != self.procs {
            crate::error::bail!(
                Engine,
                "{} processes' images for a job of {}",
                trees.len(),
                self.procs
            );
        }
        let mut rest = trees;
        let answers = self.call("checkpoint the images", |ranks| {
            let (mine, after) = rest.split_at(ranks);
            rest = after;
            Request::Checkpoint {
                version,
                trees: mine.to_vec(),
            }
        })?;
        let mut all = Stored {
            stored: Vec::with_capacity(self.procs),
            incremental: false,
            secs: 0.0,
        };
        for a in answers {
            let Answer::Stored(s) = a else {
                return Err(out_of_turn("checkpoint"));
            };
            all.stored.extend(s.stored);
            all.incremental |= s.incremental;
            all.secs = all.secs.max(s.secs);
        }
        Ok(all)
    }

    /// As [`Images::newest`].
    pub fn newest(&self) -> Result<Option<u64>> {
        match self
            .call("find the newest checkpoint", |_| Request::Newest)?
            .first()
        {
            Some(Answer::Newest(v)) => Ok(*v),
            _ => Err(out_of_turn("newest")),
        }
    }

    /// As [`Images::restore`], `nodes` naming every process's node: each node's engine
    /// restores its own processes' images on its host.
    pub fn restore(
        &self,
        version: u64,
        staging: &Staging,
        nodes: &[usize],
        first: bool,
    ) -> Result<(u64, Vec<Vec<RestoredImage>>), RestoreError> {
        let mut rest = nodes;
        let answers = self
            .call_raw("restore the images", |ranks| {
                let (mine, after) = rest.split_at(ranks.min(rest.len()));
                rest = after;
                Request::Restore {
                    version,
                    staging: staging.clone(),
                    nodes: mine.to_vec(),
                    first,
                }
            })
            .map_err(|e| match e {
                CallError::NotFound(why) => RestoreError::NotFound(why),
                CallError::Other(e) => RestoreError::Other(e),
            })?;
        let mut restored = None;
        let mut trees = Vec::with_capacity(self.procs);
        for a in answers {
            let Answer::Restored(v, t) = a else {
                return Err(RestoreError::Other(out_of_turn("restore")));
            };
            if restored.is_some_and(|r| r != v) {
                return Err(RestoreError::Other(Error::new(
                    ErrorKind::Engine,
                    format!(
                        "the nodes' engines restored different versions ({} and {v})",
                        restored.unwrap_or(0)
                    ),
                )));
            }
            restored = Some(v);
            trees.extend(t);
        }
        match restored {
            Some(v) if trees.len() == self.procs => Ok((v, trees)),
            _ => Err(RestoreError::Other(out_of_turn("restore"))),
        }
    }

    /// Has each node fit the images the engine restored to the manifest `procs` (one
    /// entry per process, in order) on its host: see [`crate::check::restored`]. Returns,
    /// per process, its tree's images in order and whether it ran in a pid namespace.
    pub fn fit(
        &self,
        version: u64,
        procs: &[ProcImage],
        trees: Vec<Vec<RestoredImage>>,
    ) -> Result<Vec<FittedTree>> {
        if procs.len() != self.procs || trees.len() != self.procs {
            crate::error::bail!(
                Engine,
                "{} manifest entries and {} restored trees for a job of {}",
                procs.len(),
                trees.len(),
                self.procs
            );
        }
        let (mut rest_p, mut rest_t) = (procs, trees.as_slice());
        let answers = self.call("check the restored images", |ranks| {
            let ((mine_p, after_p), (mine_t, after_t)) =
                (rest_p.split_at(ranks), rest_t.split_at(ranks));
            (rest_p, rest_t) = (after_p, after_t);
            Request::Fit {
                version,
                procs: mine_p.to_vec(),
                trees: mine_t.to_vec(),
            }
        })?;
        let mut fitted = Vec::with_capacity(self.procs);
        for a in answers {
            let Answer::Fitted(f) = a else {
                return Err(out_of_turn("fit"));
            };
            fitted.extend(f);
        }
        Ok(fitted)
    }

    /// As [`Images::finalize`]: every node's engine finishes its flushes and stops; each
    /// node then removes the restart's copies and, if `ended_well` (every process exited
    /// 0: no restart will read them), the images its processes staged. Later calls do
    /// nothing.
    pub fn finalize(&self, ended_well: bool) -> Result<()> {
        {
            let l = self.links.lock().expect("engine links");
            if l.finalized || l.broken {
                return Ok(());
            }
        }
        let r = self.call("finalize the engine", |_| Request::Finalize { ended_well });
        self.links.lock().expect("engine links").finalized = true;
        r.map(|_| ())
    }

    /// Has each node's sub-coordinator start its own processes (`starts` holds every
    /// process of the job, in order); returns their pids on their hosts, in order.
    pub fn spawn(&self, starts: &[ProcStart]) -> Result<Vec<u32>> {
        if starts.len() != self.procs || starts.iter().enumerate().any(|(i, s)| s.proc != i) {
            crate::error::bail!(
                Usage,
                "{} process descriptions for a job of {}",
                starts.len(),
                self.procs
            );
        }
        let mut rest = starts;
        let answers = self.call("start the processes", |ranks| {
            let (mine, after) = rest.split_at(ranks);
            rest = after;
            Request::Spawn(mine.to_vec())
        })?;
        let mut pids = Vec::with_capacity(self.procs);
        for a in answers {
            let Answer::Spawned(p) = a else {
                return Err(out_of_turn("spawn"));
            };
            pids.extend(p);
        }
        Ok(pids)
    }

    fn call(&self, what: &str, make: impl FnMut(usize) -> Request) -> Result<Vec<Answer>> {
        self.call_raw(what, make).map_err(CallError::into_error)
    }

    /// Sends each node its request (`make` gets the node's rank count, nodes in order), then
    /// collects one answer from each, in node order.
    fn call_raw(
        &self,
        what: &str,
        mut make: impl FnMut(usize) -> Request,
    ) -> Result<Vec<Answer>, CallError> {
        let mut l = self.links.lock().expect("engine links");
        if l.broken || l.finalized {
            return Err(CallError::Other(Error::new(
                ErrorKind::Engine,
                format!("cannot {what}: the engine job has ended"),
            )));
        }
        for n in 0..l.nodes.len() {
            let req = make(l.nodes[n].ranks);
            if let Err(e) = write_frame(&mut l.nodes[n].writer, &req) {
                l.broken = true;
                return Err(CallError::Other(Error::io(
                    format_args!("{what}: node {n}'s engine"),
                    e,
                )));
            }
        }
        collect(&mut l, what)
    }
}

enum CallError {
    NotFound(String),
    Other(Error),
}

impl CallError {
    fn into_error(self) -> Error {
        match self {
            CallError::NotFound(why) => Error::new(ErrorKind::NotFound, why),
            CallError::Other(e) => e,
        }
    }
}

fn out_of_turn(op: &str) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!("a node's engine answered {op} out of turn"),
    )
}

/// One answer from every node, in node order; the first failure (after all have answered,
/// so the next call lines up) is the call's.
fn collect(l: &mut Links, what: &str) -> Result<Vec<Answer>, CallError> {
    let mut answers = Vec::with_capacity(l.nodes.len());
    let mut first_failure = None;
    for n in 0..l.nodes.len() {
        match read_frame::<Answer>(&mut l.nodes[n].reader) {
            Ok(Answer::Failed {
                kind,
                msg,
                not_found,
            }) => {
                if first_failure.is_none() {
                    first_failure = Some(if not_found {
                        CallError::NotFound(msg)
                    } else {
                        CallError::Other(Error::new(kind, format!("{what}: {msg}")))
                    });
                }
            }
            Ok(a) => answers.push(a),
            Err(e) => {
                l.broken = true;
                return Err(CallError::Other(Error::new(
                    ErrorKind::Engine,
                    format!(
                        "{what}: node {n}'s engine is gone ({})",
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            "its sub-coordinator closed the link".to_string()
                        } else {
                            e.to_string()
                        }
                    ),
                )));
            }
        }
    }
    match first_failure {
        Some(f) => Err(f),
        None => Ok(answers),
    }
}

// ---- a sub-coordinator's side -----------------------------------------------------------

/// The links other nodes opened to this one, by node, until the engine takes them.
#[derive(Default)]
struct Arrived {
    links: HashMap<usize, TcpStream>,
    engine_taken: bool,
}

/// Accepts on `listener` (this node's link address) for as long as the process runs: the
/// root's engine connection starts this node's engine on a thread of its own; links from
/// other nodes wait for it. `spawner` starts the node's processes when the launcher asks
/// (`None`: this node starts none, and says so).
pub(crate) fn serve(
    listener: TcpListener,
    token: Token,
    node: usize,
    spawner: Option<Sender<Event>>,
) -> Result<()> {
    let arrived = Arc::new((Mutex::new(Arrived::default()), Condvar::new()));
    std::thread::Builder::new()
        .name("cairn-links".into())
        .spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { continue };
                let (token, arrived) = (token.clone(), arrived.clone());
                let spawner = spawner.clone();
                // A handshake of its own, so that a silent connection holds up nobody.
                let _ = std::thread::Builder::new()
                    .name("cairn-link".into())
                    .spawn(move || accepted(s, &token, node, arrived, spawner));
            }
        })
        .map_err(|e| Error::io("start accepting links", e))?;
    Ok(())
}

fn accepted(
    mut s: TcpStream,
    token: &Token,
    node: usize,
    arrived: Arc<(Mutex<Arrived>, Condvar)>,
    spawner: Option<Sender<Event>>,
) {
    let peer = s
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let msg = match read_line(&mut s)
        .map_err(|e| e.to_string())
        .and_then(|l| Msg::parse(&l).map_err(|e| e.to_string()))
    {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("node {node}: link from {peer}: {e}");
            return;
        }
    };
    let refuse = |mut s: TcpStream, why: &str| {
        tracing::warn!("node {node}: refused {} from {peer}: {why}", msg.verb);
        let _ = s.write_all(Msg::new(Verb::Denied).arg("why", why).encode().as_bytes());
    };
    if !msg.get("token").is_some_and(|t| token.matches(t)) {
        return refuse(s, "wrong token");
    }
    let _ = s.set_read_timeout(None);
    let (lock, cv) = &*arrived;
    match msg.verb {
        Verb::Engine => {
            let mut g = lock.lock().expect("links lock");
            if g.engine_taken {
                drop(g);
                return refuse(s, "this node's engine is already driven");
            }
            g.engine_taken = true;
            drop(g);
            let _ = s.set_nodelay(true);
            run_engine(s, node, token, &arrived, spawner);
        }
        Verb::Link => match msg.num::<usize>("node") {
            Ok(k) if k > node && k < usize::from(u16::MAX) => {
                let mut g = lock.lock().expect("links lock");
                if g.links.contains_key(&k) {
                    drop(g);
                    return refuse(s, &format!("node {k} is already linked"));
                }
                g.links.insert(k, s);
                cv.notify_all();
            }
            _ => refuse(s, "LINK needs node=<k> of a node after this one"),
        },
        v => refuse(s, &format!("unexpected first line {v}")),
    }
}

/// This node's engine: the brief, the world, then one request after another until the root
/// closes the connection.
fn run_engine(
    mut s: TcpStream,
    node: usize,
    token: &Token,
    arrived: &(Mutex<Arrived>, Condvar),
    spawner: Option<Sender<Event>>,
) {
    let _ = s.set_read_timeout(Some(LINK_LIMIT));
    let brief: Brief = match read_frame(&mut s) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!("node {node}: no brief from the root: {e}");
            return;
        }
    };
    let _ = s.set_read_timeout(None);
    let images = match start(&brief, node, token, arrived) {
        Ok(i) => i,
        Err(e) => {
            let _ = write_frame(&mut s, &failed(&e));
            return;
        }
    };
    let staging = brief.staging.of_node(node);
    if let Some(sp) = &spawner {
        // Before Started: the root sends no WRITE before it has the answer.
        let _ = sp.send(Event::Staging(staging.clone()));
    }
    let plan = images.record().redundancy.clone();
    if write_frame(&mut s, &Answer::Started(plan)).is_err() {
        return;
    }
    let mut reader = BufReader::new(match s.try_clone() {
        Ok(r) => r,
        Err(_) => return,
    });
    loop {
        let req: Request = match read_frame(&mut reader) {
            Ok(r) => r,
            // The root is done with the engine (or gone): dropping it stops the ranks.
            Err(_) => return,
        };
        let answer = match req {
            Request::Checkpoint { version, trees } => images
                .checkpoint(version, &trees)
                .map_or_else(|e| failed(&e), Answer::Stored),
            Request::Newest => images.newest().map_or_else(|e| failed(&e), Answer::Newest),
            Request::Restore {
                version,
                staging: all,
                nodes,
                first,
            } => match prepare_restore(&staging, first)
                .map_err(RestoreError::Other)
                .and_then(|()| images.restore(version, &all, &nodes))
            {
                Ok((v, trees)) => {
                    // Images staged for other versions will not be read.
                    staging.keep_only(v);
                    Answer::Restored(v, trees)
                }
                Err(RestoreError::NotFound(msg)) => Answer::Failed {
                    kind: ErrorKind::NotFound,
                    msg,
                    not_found: true,
                },
                Err(RestoreError::Other(e)) => failed(&e),
            },
            Request::Fit {
                version,
                procs,
                trees,
            } => fit(version, &procs, trees).map_or_else(|e| failed(&e), Answer::Fitted),
            Request::Finalize { ended_well } => {
                let r = images.finalize();
                staging.remove_restart();
                if ended_well {
                    staging.remove_versions_all();
                }
                r.map_or_else(|e| failed(&e), |()| Answer::Finalized)
            }
            Request::Spawn(starts) => spawn_here(node, spawner.as_ref(), starts)
                .map_or_else(|e| failed(&e), Answer::Spawned),
        };
        if write_frame(&mut s, &answer).is_err() {
            return;
        }
    }
}

/// Before the first restore of a restart: nothing of the job runs, so what the node's
/// staging holds is from a run that ended; its versions' images may be read in place.
fn prepare_restore(staging: &Staging, first: bool) -> Result<()> {
    if first {
        staging.clear()?;
        staging.create_restart()?;
    }
    Ok(())
}

/// [`crate::check::restored`] for each of the node's processes.
fn fit(
    version: u64,
    procs: &[ProcImage],
    trees: Vec<Vec<RestoredImage>>,
) -> Result<Vec<FittedTree>> {
    let here = cairn_ckpt::Machine::here()
        .map_err(|e| Error::new(ErrorKind::Io, format!("uname: {e}")))?;
    procs
        .iter()
        .zip(trees)
        .map(|(p, tree)| crate::check::restored(version, p, tree, &here))
        .collect()
}

/// Hands `starts` to the thread that owns this node's processes and waits for its answer.
fn spawn_here(
    node: usize,
    spawner: Option<&Sender<Event>>,
    starts: Vec<ProcStart>,
) -> Result<Vec<u32>> {
    let Some(spawner) = spawner else {
        crate::error::bail!(Usage, "node {node} does not start processes");
    };
    let (reply, answer) = channel();
    spawner
        .send(Event::Spawn { starts, reply })
        .map_err(|_| Error::new(ErrorKind::Io, format!("node {node} is stopping")))?;
    answer
        .recv()
        .map_err(|_| Error::new(ErrorKind::Io, format!("node {node} is stopping")))?
        .map_err(|e| Error::new(e.kind(), format!("node {node}: {}", e.message())))
}

/// Joins the world (connecting to the nodes before this one, waiting for those after it)
/// and starts this node's ranks.
fn start(
    b: &Brief,
    node: usize,
    token: &Token,
    arrived: &(Mutex<Arrived>, Condvar),
) -> Result<Images> {
    if b.node != node || b.nodes != b.links.len() || node >= b.nodes || b.nodes > b.procs {
        crate::error::bail!(
            Protocol,
            "node {node}: a brief for node {} of {} with {} links and {} processes",
            b.node,
            b.nodes,
            b.links.len(),
            b.procs
        );
    }
    let mut links: Vec<Option<TcpStream>> = (0..b.nodes).map(|_| None).collect();
    for (k, addr) in b.links.iter().enumerate().take(node) {
        let mut s = net::connect(addr, node as u64)?;
        let hello = Msg::new(Verb::Link)
            .arg("token", token.hex())
            .arg("node", node)
            .encode();
        s.write_all(hello.as_bytes())
            .map_err(|e| Error::io(format_args!("link to node {k} at {addr}"), e))?;
        links[k] = Some(s);
    }
    let deadline = Instant::now() + LINK_LIMIT;
    let (lock, cv) = arrived;
    let mut g = lock.lock().expect("links lock");
    for (k, slot) in links.iter_mut().enumerate().skip(node + 1) {
        while !g.links.contains_key(&k) {
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> =
                    (k..b.nodes).filter(|m| !g.links.contains_key(m)).collect();
                crate::error::bail!(
                    Timeout,
                    "node {node}: {} did not link within {:.0} s",
                    crate::hub::named("node", missing),
                    LINK_LIMIT.as_secs_f64()
                );
            }
            g = cv.wait_timeout(g, deadline - now).expect("links lock").0;
        }
        *slot = g.links.remove(&k);
    }
    drop(g);
    let owner: Vec<usize> = (0..b.procs).map(|r| node_of(r, b.procs, b.nodes)).collect();
    let world = Net::world(node, owner, links)
        .map_err(|e| Error::new(ErrorKind::Engine, format!("node {node}: {e}")))?;
    let per_host = if b.real_hosts { 1 } else { b.nodes };
    Images::start_ranks(b.config.clone(), &b.job, per_host, world)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(token: &Token, n: usize) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        serve(l, token.clone(), n, None).unwrap();
        addr
    }

    /// The first line `line` sent to `addr`, and the answer, if any.
    fn answer(addr: &str, line: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(line.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// Two nodes' sub-coordinators (here, two `serve` in one process) with two ranks each,
    /// driven through `Engines` as the root drives them: each node stores its own ranks'
    /// images on its own node's tier, and only those; a restore gives every image back bit
    /// for bit; a version nobody has is "not found", which the restart passes over.
    #[test]
    fn two_nodes_store_and_restore_their_own_images_as_the_root_drives_them() {
        let t = tempfile::tempdir().unwrap();
        let cfg = Config {
            local: Some(t.path().join("local")),
            global: t.path().join("global"),
            fsync_global: false,
            // Compressed: the restore copies each image out rather than finding it in place.
            compress: "lz4".into(),
            ..Config::default()
        };
        let token = Token::random().unwrap();
        let links = [node(&token, 0), node(&token, 1)];
        let job_dir = t.path().join("job");
        std::fs::create_dir_all(&job_dir).unwrap();
        let staging = Staging::new(&cfg, &job_dir, "halves", 2);
        let engines = Engines::start(&cfg, "halves", 4, &links, &token, &staging, false).unwrap();
        assert_eq!(engines.record().redundancy, "single");
        let image = |r: usize| -> Vec<u8> {
            (0..20_000u32)
                .map(|i| (i as usize * 7 + r * 13) as u8)
                .collect()
        };
        let trees: Vec<Vec<TreeImage>> = (0..4)
            .map(|r| {
                let path = t.path().join(format!("img{r}"));
                std::fs::write(&path, image(r)).unwrap();
                vec![TreeImage { id: 0, path }]
            })
            .collect();
        let stored = engines.checkpoint(1, &trees).unwrap();
        assert_eq!(stored.stored.len(), 4);
        assert_eq!(engines.newest().unwrap(), Some(1));
        for (n, mine) in [(0, [0, 1]), (1, [2, 3])] {
            let v1 = t.path().join(format!("local/node{n}/halves/v1"));
            for r in 0..4 {
                let part = v1.join(format!("rank{r}.ckpt"));
                assert_eq!(part.exists(), mine.contains(&r), "{}", part.display());
            }
        }
        match engines.restore(7, &staging, &[0, 0, 1, 1], true) {
            Err(RestoreError::NotFound(_)) => {}
            Err(RestoreError::Other(e)) => panic!("{e}"),
            Ok((v, _)) => panic!("restored v{v} for v7"),
        }
        let (v, restored) = engines.restore(1, &staging, &[0, 0, 1, 1], false).unwrap();
        assert_eq!(v, 1);
        for (r, tree) in restored.iter().enumerate() {
            assert_eq!(std::fs::read(&tree[0].path).unwrap(), image(r), "rank {r}");
            // Each node copied its own ranks' images into its own restart directory.
            assert!(
                tree[0].path.starts_with(staging.restart_dir(r / 2)),
                "{}",
                tree[0].path.display()
            );
        }
        // Each node fits its processes' images to the manifest on its host: a copy is cut
        // to the image's length, and an image the manifest names that the engine does not
        // hold is named.
        let entry = |proc: usize, bytes: u64| ProcImage {
            proc,
            node: proc / 2,
            host: "h".into(),
            pid: 100,
            bytes,
            region: 0,
            stored: 0,
            members: Vec::new(),
            slot: None,
        };
        let mut procs: Vec<ProcImage> = (0..4).map(|r| entry(r, 20_000)).collect();
        procs[3].bytes = 19_000;
        let fitted = engines.fit(1, &procs, restored.clone()).unwrap();
        assert_eq!(fitted.len(), 4);
        assert!(fitted.iter().all(|(tree, ns)| tree.len() == 1 && !ns));
        let cut = std::fs::read(&fitted[3].0[0].path).unwrap();
        assert_eq!(cut, image(3)[..19_000]);
        procs[2].members.push(crate::manifest::MemberImage {
            pid: 7,
            bytes: 10,
            region: 0,
        });
        let e = engines.fit(1, &procs, restored).unwrap_err();
        assert!(
            e.message()
                .contains("the engine holds no image of proc 2's process 7"),
            "{e}"
        );
        engines.finalize(false).unwrap();
        let e = engines.newest().unwrap_err();
        assert!(e.message().contains("ended"), "{e}");
    }

    #[test]
    fn links_refuse_a_wrong_token_a_second_engine_and_links_out_of_order() {
        let token = Token::random().unwrap();
        let addr = node(&token, 1);
        let good = token.hex();
        let wrong = "0".repeat(32);
        let denied = |line: String, why: &str| {
            let a = answer(&addr, &line);
            let m = Msg::parse(&a).unwrap_or_else(|e| panic!("{line}: {a:?}: {e}"));
            assert_eq!(m.verb, Verb::Denied, "{line}: {a}");
            assert!(m.get("why").unwrap().contains(why), "{line}: {a}");
        };
        denied(format!("LINK token={wrong} node=2\n"), "wrong token");
        denied(format!("ENGINE token={wrong}\n"), "wrong token");
        denied(format!("LINK token={good} node=0\n"), "after this one");
        denied(format!("LINK token={good} node=1\n"), "after this one");
        denied(format!("HELLO token={good}\n"), "unexpected");
        // Two ENGINE connections at once: whichever the node takes first drives it (and waits
        // for its brief, answering nothing); the other is refused at once. Which one wins is
        // up to the node's threads, so the test asks only that exactly one is refused.
        let engine = || {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(format!("ENGINE token={good}\n").as_bytes())
                .unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s
        };
        let (mut a, mut b) = (engine(), engine());
        let read = |s: &mut TcpStream| {
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            out
        };
        let (ra, rb) = std::thread::scope(|sc| {
            let h = sc.spawn(|| read(&mut a));
            let rb = read(&mut b);
            (h.join().unwrap(), rb)
        });
        // The answer's text is percent-encoded on the wire.
        let refused = [&ra, &rb]
            .iter()
            .filter(|r| r.contains("already%20driven"))
            .count();
        assert_eq!(refused, 1, "{ra:?} / {rb:?}");
        // Once one drives the node, every later ENGINE is refused.
        assert!(answer(&addr, &format!("ENGINE token={good}\n")).contains("already%20driven"));
    }
}
