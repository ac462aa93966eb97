//! The sub-coordinator of one (simulated) node: a separate process (`cairn coord-node`) that
//! the node's processes connect to. It relays SUSPEND, WRITE and RESUME to them and sends the
//! root one answer per phase for the whole node (seeds/003, section 3.3: a two-level tree, so
//! the root holds one connection per node rather than one per process).
//!
//! Per checkpoint it goes through the same phases as the root (`docs/coordinator.md`); its
//! own timeout per phase lets it name the processes that did not answer. One thread
//! (`NodeLoop::run`) owns all state; reader threads hand lines over as `hub::Event`s.

use crate::error::{bail, Error, ErrorKind, Result};
use crate::hub::{self, deny, ranges, send_or_log, Acceptor, Event};
use crate::jobdir::{check_job_id, Token};
use crate::manifest::ProcImage;
use crate::proto::{self, Conn, Msg, Verb};
use crate::spawn::Procs;
use crate::stage::Staging;
use crate::{manifest, net, procs_of_node, TOKEN_ENV};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The connection id of the link to the root (accepted connections count from 1).
const ROOT: u64 = 0;

/// How long a checkpoint waits for children of the job's processes that have not joined
/// the job yet (they are starting) before it fails naming them.
const JOIN_GRACE: Duration = Duration::from_secs(2);
/// The same for children that already map the checkpoint library: they are under
/// checkpoint control and connecting (on a busy machine an MPI launcher's ranks take seconds
/// from exec to their library's first message).
const LOADED_GRACE: Duration = Duration::from_secs(15);

/// Whether process `pid` maps the checkpoint library (its file name, `libcairn-ckpt.so`
/// or the one `CAIRN_CKPT_PRELOAD` names).
fn maps_library(pid: u32) -> bool {
    let name = std::env::var_os(crate::spawn::PRELOAD_ENV)
        .and_then(|p| {
            std::path::Path::new(&p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| crate::spawn::PRELOAD_NAME.to_string());
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.lines().any(|l| l.rsplit('/').next() == Some(&name)))
}

/// What `/proc/<pid>/stat` says of a process.
struct ProcStat {
    comm: String,
    state: char,
    ppid: u32,
    /// Its start time (clock ticks after boot): a pid used again is another process.
    start: u64,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (open, close) = (text.find('(')?, text.rfind(')')?);
    let comm = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 2..)?.split(' ');
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    // Fields 5 to 21, then the start time (field 22).
    let start = rest.nth(17)?.parse().ok()?;
    Some(ProcStat {
        comm,
        state,
        ppid,
        start,
    })
}

/// The children of process `pid` (of all its threads), as this node sees their pids.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// A sub-coordinator's command line (after `cairn coord-node`). The token is not on it (any
/// user can read command lines): it comes in the environment variable [`TOKEN_ENV`].
#[derive(Debug, Clone, PartialEq)]
pub struct NodeArgs {
    /// The root's address.
    pub root: String,
    pub node: usize,
    pub nodes: usize,
    /// The job's process count.
    pub procs: usize,
    pub job: String,
    pub timeout: Duration,
    /// The address to listen on (any port).
    pub bind: IpAddr,
    /// The process group the node's processes join: the launcher's, when the node runs on
    /// its host (so that a Ctrl-C at the terminal reaches them as it reaches the launcher's
    /// own children); otherwise they stay in the sub-coordinator's.
    pub group: Option<i32>,
    /// The host the node runs on, for a job across hosts: its listeners bind to the
    /// address this name has there (rather than `bind`, the root's).
    pub host: Option<String>,
    /// The job's directory: where the token is read from (the coordinator file) when the
    /// environment does not carry it (an agent like `ssh` passes none).
    pub job_dir: Option<PathBuf>,
}

impl NodeArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--root".into(),
            self.root.clone(),
            "--node".into(),
            self.node.to_string(),
            "--nodes".into(),
            self.nodes.to_string(),
            "--procs".into(),
            self.procs.to_string(),
            "--job".into(),
            self.job.clone(),
            "--timeout".into(),
            format!("{:.3}", self.timeout.as_secs_f64()),
            "--bind".into(),
            self.bind.to_string(),
        ];
        if let Some(g) = self.group {
            args.extend(["--group".into(), g.to_string()]);
        }
        if let Some(h) = &self.host {
            args.extend(["--host".into(), h.clone()]);
        }
        if let Some(d) = &self.job_dir {
            args.extend(["--job-dir".into(), d.display().to_string()]);
        }
        args
    }

    pub fn parse(args: &[String]) -> Result<NodeArgs> {
        let mut map = BTreeMap::new();
        let mut it = args.iter();
        while let Some(k) = it.next() {
            let Some(name) = k.strip_prefix("--") else {
                bail!(Usage, "coord-node: unexpected argument {k:?}");
            };
            let Some(v) = it.next() else {
                bail!(Usage, "coord-node: {k} needs a value");
            };
            map.insert(name.to_string(), v.clone());
        }
        let get = |k: &str| {
            map.get(k)
                .cloned()
                .ok_or_else(|| Error::new(ErrorKind::Usage, format!("coord-node: --{k} missing")))
        };
        let num = |k: &str| -> Result<usize> {
            get(k)?
                .parse()
                .map_err(|_| Error::new(ErrorKind::Usage, format!("coord-node: bad --{k}")))
        };
        let secs: f64 = get("timeout")?
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s > 0.0)
            .ok_or_else(|| Error::new(ErrorKind::Usage, "coord-node: bad --timeout"))?;
        let a = NodeArgs {
            root: get("root")?,
            node: num("node")?,
            nodes: num("nodes")?,
            procs: num("procs")?,
            job: get("job")?,
            timeout: Duration::from_secs_f64(secs),
            bind: get("bind")?
                .parse()
                .map_err(|_| Error::new(ErrorKind::Usage, "coord-node: bad --bind"))?,
            group: match map.get("group") {
                None => None,
                Some(g) => Some(
                    g.parse()
                        .ok()
                        .filter(|g: &i32| *g > 0)
                        .ok_or_else(|| Error::new(ErrorKind::Usage, "coord-node: bad --group"))?,
                ),
            },
            host: map.get("host").cloned(),
            job_dir: map.get("job-dir").map(PathBuf::from),
        };
        check_job_id(&a.job)?;
        if a.nodes == 0 || a.node >= a.nodes || a.nodes > a.procs {
            bail!(
                Usage,
                "coord-node: node {} of {} with {} processes",
                a.node,
                a.nodes,
                a.procs
            );
        }
        Ok(a)
    }
}

/// The entry point of `cairn coord-node ARGS`: returns the exit code (0 when the root closed
/// the link, 2 on errors, which are printed).
pub fn main(args: &[String]) -> i32 {
    crate::init_logging();
    let run = || -> Result<()> {
        let a = NodeArgs::parse(args)?;
        // The engine's shared-memory tier names its stores after these (still one thread).
        crate::images::prepare_env(&a.job);
        let token = match (std::env::var(TOKEN_ENV), &a.job_dir) {
            (Ok(t), _) => Token::from_hex(&t)?,
            (Err(_), Some(dir)) => crate::jobdir::CoordInfo::read(dir)?.token,
            (Err(_), None) => bail!(
                Usage,
                "coord-node: {TOKEN_ENV} not set, and no --job-dir to read the token from"
            ),
        };
        run(a, token)
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cairn coord-node: error: {e}");
            2
        }
    }
}

/// Runs a sub-coordinator until the root closes its link; its processes end with it.
pub fn run(a: NodeArgs, token: Token) -> Result<()> {
    let bind = match &a.host {
        Some(h) => host_address(h)?,
        None => a.bind,
    };
    let listener = net::listen(bind)?;
    let my_addr = listener
        .local_addr()
        .map_err(|e| Error::io("listener address", e))?;
    // The address the root's engine connection and the other nodes' links come to.
    let links = net::listen(bind)?;
    let links_addr = links
        .local_addr()
        .map_err(|e| Error::io("listener address", e))?;
    let (tx, rx) = channel();
    // The root's engine connection asks this thread (the main one, which lives as long as
    // the node) to start the node's processes: they die with the thread that starts them.
    crate::engines::serve(links, token.clone(), a.node, Some(tx.clone()))?;
    reap_on_sigchld(tx.clone())?;
    let expected: Vec<usize> = procs_of_node(a.node, a.procs, a.nodes).collect();
    // The link to the root, staggered by node index like processes are by theirs.
    let stream = net::connect(&a.root, a.node as u64)?;
    let mut conn = Conn::new(stream)?;
    conn.send(
        &Msg::new(Verb::Subcoord)
            .arg("token", token.hex())
            .arg("job", &a.job)
            .arg("node", a.node)
            .arg("procs", expected.len())
            .arg("addr", my_addr)
            .arg("links", links_addr)
            .arg("pid", std::process::id()),
    )?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let answer = conn.expect("the root's WELCOME")?;
    match answer.verb {
        Verb::Welcome => {}
        Verb::Denied => bail!(
            Denied,
            "node {}: the root refused: {}",
            a.node,
            answer.get("why").unwrap_or("no reason given")
        ),
        v => bail!(Protocol, "node {}: the root answered {v}", a.node),
    }
    conn.set_read_timeout(None)?;
    let (reader, root_w) = conn.split();
    hub::spawn_reader(
        ROOT,
        reader,
        format!("node {}: the root", a.node),
        false,
        tx.clone(),
    )
    .map_err(|e| Error::io("start a reader thread", e))?;
    let ids = Arc::new(AtomicU64::new(ROOT + 1));
    let mut acceptor = Acceptor::start(listener, "sub-coordinator", ids, tx)
        .map_err(|e| Error::io("start accepting", e))?;
    let mut lp = NodeLoop {
        procs: expected
            .iter()
            .map(|&i| {
                (
                    i,
                    Local {
                        conn: None,
                        pid: 0,
                        host: String::new(),
                        state: LState::Missing,
                        suspended_for: None,
                        members: BTreeMap::new(),
                        namespaced: false,
                        run: None,
                    },
                )
            })
            .collect(),
        a,
        token,
        root_w,
        rx,
        peers: HashMap::new(),
        phase: None,
        failed: BTreeSet::new(),
        writing: BTreeSet::new(),
        writing_for: 0,
        wrote: Vec::new(),
        children: Procs::default(),
        staging: None,
        restart_dropped: false,
        addr: my_addr,
        meets: HashMap::new(),
        meet_keys: HashMap::new(),
        rsh: HashMap::new(),
        left: HashMap::new(),
    };
    lp.run();
    acceptor.stop();
    // Dropping the loop kills the processes still running: the job is over (the root
    // closed the link) or lost (the root is gone).
    drop(lp);
    Ok(())
}

/// The address `host` has on this host (its hosts file or DNS), IPv4 first.
fn host_address(host: &str) -> Result<IpAddr> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<IpAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| Error::io(format_args!("resolve host {host}"), e))?
        .map(|a| a.ip())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| Error::new(ErrorKind::Usage, format!("host {host} has no address")))
}

/// Turns each SIGCHLD into [`Event::Reap`] (signals coalesce: each reap looks at every
/// child).
fn reap_on_sigchld(tx: std::sync::mpsc::Sender<Event>) -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGCHLD])
        .map_err(|e| Error::io("install the SIGCHLD handler", e))?;
    std::thread::Builder::new()
        .name("cairn-sigchld".into())
        .spawn(move || {
            for _ in signals.forever() {
                if tx.send(Event::Reap).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| Error::io("start the SIGCHLD thread", e))?;
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum LState {
    Missing,
    Running,
    Exited(i32),
    Lost,
}

struct Local {
    conn: Option<u64>,
    pid: u32,
    host: String,
    state: LState,
    /// The checkpoint this process was sent SUSPEND for and not yet RESUME.
    suspended_for: Option<u64>,
    /// The processes the launched one started (children, and theirs), by their pid in the
    /// tree's namespace: each connects on its own and is checkpointed with the others.
    members: BTreeMap<u32, Member>,
    /// The process runs in a pid namespace of its own (`ids=1` in its HELLO): its children
    /// are processes of the job, and its namespace's init adopts their orphans.
    namespaced: bool,
    /// A command the root sent for this process, a slot, not handed to it yet: it has not
    /// joined, or a checkpoint holds it (the library reads only the checkpoint's lines
    /// then).
    run: Option<PendingRun>,
}

/// A command for a slot (`RUN` from the root), and the `cairn rsh` that asked for it: its
/// connection's id on node `from`.
struct PendingRun {
    rsh: u64,
    from: usize,
    cmd: String,
}

/// A process of a tree other than the launched one.
struct Member {
    conn: u64,
    /// Its pid as this node sees it (outside the tree's namespace).
    pid: u32,
    suspended_for: Option<u64>,
}

/// One process of the job on this node: the launched process of tree `.0` (`.1` = 0) or
/// the process of that tree with pid `.1` in the tree's namespace.
type Slot = (usize, u32);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Suspend,
    Write,
    Resume,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Suspend => "SUSPEND",
            Kind::Write => "WRITE",
            Kind::Resume => "RESUME",
        }
    }
}

/// `proc 3 (pid 1234 on host), proc 5 (pid 1236 on host)`, for reports.
/// Why a process's connection closes without BYE.
const LOST: &str = "lost its connection (the process died, or replaced itself by exec with a \
                    program that does not load the checkpoint library: statically linked, or \
                    started with LD_PRELOAD or the environment cleared)";

fn describe_all(procs: &BTreeMap<usize, Local>, which: &BTreeSet<Slot>) -> String {
    let names: Vec<String> = which.iter().map(|&s| describe_slot(procs, s)).collect();
    names.join(", ")
}

/// `proc 3 (pid 1234 on host)`, or for a process it started `proc 3's process 1002 (pid
/// 1240 on host)`.
fn describe_slot(procs: &BTreeMap<usize, Local>, (i, nspid): Slot) -> String {
    if nspid == 0 {
        return describe(procs, i);
    }
    let p = &procs[&i];
    match p.members.get(&nspid) {
        Some(m) => format!("proc {i}'s process {nspid} (pid {} on {})", m.pid, p.host),
        None => format!("proc {i}'s process {nspid}"),
    }
}

/// `proc 3 (pid 1234 on host)`, for reports.
fn describe(procs: &BTreeMap<usize, Local>, i: usize) -> String {
    let p = &procs[&i];
    if p.pid == 0 {
        format!("proc {i}")
    } else {
        format!("proc {i} (pid {} on {})", p.pid, p.host)
    }
}

struct NodePhase {
    ckpt: u64,
    kind: Kind,
    pending: BTreeSet<Slot>,
    deadline: Instant,
    bytes: u64,
    /// In WRITE: the length each process reported for its image.
    sizes: BTreeMap<Slot, u64>,
    /// The node's answer went up (a failure is reported once per phase).
    reported: bool,
    /// In RESUME: the processes that were still writing their images when it came.
    writing: Vec<Slot>,
    /// In SUSPEND, once every process answered: until when children of the tree that have
    /// not joined the job yet (just started) are waited for.
    grace: Option<Instant>,
    /// In WRITE, once the images are checked: each tree's connections to other hosts, for
    /// the root to match (CONN).
    remotes: Vec<(usize, crate::check::Remote)>,
}

struct NodeLoop {
    a: NodeArgs,
    token: Token,
    root_w: TcpStream,
    rx: Receiver<Event>,
    /// Accepted connections: the process once it said HELLO.
    peers: HashMap<u64, (Slot, TcpStream)>,
    procs: BTreeMap<usize, Local>,
    phase: Option<NodePhase>,
    /// Processes that failed in the current checkpoint: not waited for when resuming.
    failed: BTreeSet<Slot>,
    /// Processes sent WRITE that have not answered it (and are still connected): they may
    /// still create files in the version directory.
    writing: BTreeSet<Slot>,
    writing_for: u64,
    /// The processes sent WRITE in the current checkpoint.
    wrote: Vec<Slot>,
    /// The node's processes as its children (started on the launcher's request).
    children: Procs,
    /// This node's part of the staging directories (from the launcher's brief).
    staging: Option<Staging>,
    /// The restart directory was removed once every process had registered.
    restart_dropped: bool,
    /// The address the processes connect to: a listener a restored process opens for a
    /// connection to another host is on this host's address.
    addr: SocketAddr,
    /// Restored processes connecting their connections to other hosts again (MEET), and
    /// which of them wait on each connection's answer from the root.
    meets: HashMap<u64, TcpStream>,
    meet_keys: HashMap<String, Vec<u64>>,
    /// Connections of `cairn rsh` waiting for the root's answer, by connection id.
    rsh: HashMap<u64, TcpStream>,
    /// Processes of the trees whose connection closed while they still ran (the program
    /// closed the descriptor, as a launcher does between fork and exec), by pid: their start
    /// time and when. A checkpoint that finds one outside the job says so.
    left: HashMap<u32, (u64, Instant)>,
}

impl NodeLoop {
    fn run(&mut self) {
        loop {
            let deadline = self
                .phase
                .as_ref()
                .filter(|p| !p.reported || p.kind == Kind::Resume)
                .map(|p| p.grace.map_or(p.deadline, |g| g.min(p.deadline)));
            let ev = hub::next_event(&self.rx, deadline);
            match ev {
                Some(Event::Stop) => break,
                Some(Event::Opened {
                    id,
                    msg,
                    writer,
                    peer,
                }) => self.hello(id, msg, writer, peer),
                Some(Event::Line { id: ROOT, msg }) => self.on_root_line(msg),
                Some(Event::Line { id, msg }) => self.on_proc_line(id, msg),
                Some(Event::Closed { id: ROOT, why }) => {
                    if let Some(w) = why {
                        tracing::warn!("node {}: the link to the root ended: {w}", self.a.node);
                    }
                    break;
                }
                Some(Event::Closed { id, .. }) => self.proc_closed(id),
                Some(Event::Spawn { starts, reply }) => {
                    let r = self.children.spawn(&starts, self.a.group);
                    let _ = reply.send(r);
                }
                Some(Event::Reap) => self.reap(),
                Some(Event::Staging(s)) => self.staging = Some(s),
                Some(Event::Stored { .. } | Event::Begin | Event::Signal(_)) | None => {}
            }
            if self.phase.as_ref().is_some_and(|p| {
                Instant::now() >= p.deadline && (!p.reported || p.kind == Kind::Resume)
            }) {
                self.deadline_passed();
            }
            if self
                .phase
                .as_ref()
                .is_some_and(|p| !p.reported && p.grace.is_some_and(|g| Instant::now() >= g))
            {
                self.suspend_done();
            }
        }
        for (_, (_, w)) in self.peers.drain() {
            let _ = w.shutdown(Shutdown::Both);
        }
    }

    fn up(&mut self, msg: Msg) {
        send_or_log(&mut self.root_w, &msg, "the root");
    }

    /// Reports each process that ended to the root, with its wait status.
    fn reap(&mut self) {
        for (i, st) in self.children.reap() {
            if !st.success() {
                tracing::warn!("node {}: proc {i} ended: {st}", self.a.node);
            }
            self.up(Msg::new(Verb::Ended)
                .arg("proc", i)
                .arg("status", st.into_raw()));
            if let Some(run) = self.procs.get_mut(&i).and_then(|p| p.run.take()) {
                let why = format!("proc {i}, the slot, ended ({st}) before it got the command");
                self.ran(run, i, Err(why));
            }
        }
    }

    // ---- commands run in slots (`--rsh`) ----------------------------------------------------

    /// `cairn rsh` asks to run a command on a host of the job: the root picks a free slot
    /// there and answers with DONE, which goes back on this connection.
    fn rsh_request(&mut self, id: u64, msg: Msg, writer: TcpStream, who: String) {
        if let Err(why) = self.check_token_and_job(&msg) {
            return deny(writer, &why, who);
        }
        let (Some(host), Some(cmd)) = (msg.get("host"), msg.get("cmd")) else {
            return deny(writer, "RSH without host= or cmd=", who);
        };
        let ask = Msg::new(Verb::Rsh)
            .arg("rsh", id)
            .arg("host", host)
            .arg("cmd", cmd);
        if let Err(e) = proto::send_whole(&mut self.root_w, &ask) {
            return deny(
                writer,
                &format!("cannot ask the root coordinator: {e}"),
                who,
            );
        }
        self.rsh.insert(id, writer);
    }

    /// The root's answer to an RSH of this node: to the `cairn rsh` that asked, if it still
    /// waits.
    fn rsh_answer(&mut self, mut msg: Msg) {
        let Ok(id) = msg.num::<u64>("rsh") else {
            return tracing::warn!("node {}: from the root: {msg}: no rsh=", self.a.node);
        };
        let Some(mut w) = self.rsh.remove(&id) else {
            return tracing::debug!("node {}: {msg}: its cairn rsh has gone", self.a.node);
        };
        msg.fields.retain(|(k, _)| k != "rsh");
        send_or_log(&mut w, &msg, "cairn rsh");
        let _ = w.shutdown(Shutdown::Both);
    }

    /// The root's `RUN`: the command for a slot of this node.
    fn run_request(&mut self, msg: &Msg) {
        let (Ok(rsh), Ok(from), Ok(i), Ok(cmd)) = (
            msg.num::<u64>("rsh"),
            msg.num::<usize>("from"),
            msg.num::<usize>("proc"),
            msg.req("cmd"),
        ) else {
            return tracing::warn!("node {}: from the root: malformed {msg}", self.a.node);
        };
        let run = PendingRun {
            rsh,
            from,
            cmd: cmd.to_string(),
        };
        match self.procs.get_mut(&i) {
            Some(p) => p.run = Some(run),
            None => {
                let why = format!("proc {i} is not a process of node {}", self.a.node);
                return self.ran(run, i, Err(why));
            }
        }
        self.try_run(i);
    }

    /// Hands slot `i` its command once it can take it: it has joined, and no checkpoint holds
    /// it (its HELLO and its RESUME call this again). A slot that has ended fails the request.
    fn try_run(&mut self, i: usize) {
        let Some(p) = self.procs.get(&i).filter(|p| p.run.is_some()) else {
            return;
        };
        let outcome = match p.state {
            LState::Missing => return,
            LState::Running if p.suspended_for.is_some() => return,
            LState::Running => {
                let cmd = p.run.as_ref().map(|r| r.cmd.as_str()).unwrap_or_default();
                let msg = Msg::new(Verb::Run).arg("cmd", cmd);
                match p.conn.and_then(|c| self.peers.get_mut(&c)) {
                    Some((_, w)) => proto::send_whole(w, &msg)
                        .map_err(|e| format!("{}: {e}", describe(&self.procs, i))),
                    None => Err(format!("{} is not connected", describe(&self.procs, i))),
                }
            }
            LState::Exited(st) => Err(format!(
                "{}, the slot, has exited with status {st}",
                describe(&self.procs, i)
            )),
            LState::Lost => Err(format!("{}, the slot, {LOST}", describe(&self.procs, i))),
        };
        if let Some(run) = self.procs.get_mut(&i).and_then(|p| p.run.take()) {
            self.ran(run, i, outcome);
        }
    }

    /// Tells the root whether slot `i` got the command `run` (`DONE`).
    fn ran(&mut self, run: PendingRun, i: usize, outcome: std::result::Result<(), String>) {
        let m = Msg::new(Verb::Done)
            .arg("rsh", run.rsh)
            .arg("to", run.from)
            .arg("proc", i);
        self.up(match outcome {
            Ok(()) => m.arg("ok", 1),
            Err(why) => m.arg("ok", 0).arg("why", why),
        });
    }

    // ---- processes -----------------------------------------------------------------------

    fn hello(&mut self, id: u64, mut msg: Msg, writer: TcpStream, peer: SocketAddr) {
        let who = format!("node {}: {} from {peer}", self.a.node, msg.verb);
        if msg.verb == Verb::Meet {
            return match self.check_identity(&msg) {
                Ok(_) => {
                    self.meets.insert(id, writer);
                }
                Err(why) => deny(writer, &why, who),
            };
        }
        if msg.verb == Verb::Rsh {
            return self.rsh_request(id, msg, writer, who);
        }
        if msg.verb != Verb::Hello {
            return deny(writer, &format!("expected HELLO, got {}", msg.verb), who);
        }
        // A process of a tree with a /proc of its own knows its pid only in its namespace
        // (pid=0, nspid=, pidns=): this host's /proc tells the rest, and WELCOME says it.
        if msg.get("pid") == Some("0") {
            let found = match (msg.num::<u64>("pidns"), msg.num::<u32>("nspid")) {
                (Ok(ns), Ok(nspid)) => crate::sys::host_pid(ns, nspid),
                _ => None,
            };
            let Some(pid) = found else {
                return deny(
                    writer,
                    "HELLO with pid=0 of a process this host's /proc does not show",
                    who,
                );
            };
            for (k, v) in msg.fields.iter_mut() {
                if k == "pid" {
                    *v = pid.to_string();
                }
            }
        }
        if msg.get("member") == Some("1") {
            return self.member_hello(id, msg, writer, who);
        }
        let i = match self.check_hello(&msg) {
            Ok(i) => i,
            Err(why) => return deny(writer, &why, who),
        };
        if let Some(old) = self.procs[&i].conn {
            // The process replaced itself by exec: the connection of its former program is
            // dead (close-on-exec), and a phase waiting on that program cannot complete.
            if let Some((_, w)) = self.peers.remove(&old) {
                let _ = w.shutdown(Shutdown::Both);
            }
            self.writing.remove(&(i, 0));
            self.proc_gone((i, 0), "replaced itself by exec");
        }
        let p = self.procs.get_mut(&i).expect("checked");
        p.conn = Some(id);
        p.pid = msg.num("pid").unwrap_or(0);
        p.host = msg.get("host").unwrap_or("").to_string();
        p.state = LState::Running;
        p.suspended_for = None;
        p.namespaced = msg.get("ids") == Some("1");
        let mut w = writer;
        let welcome = Msg::new(Verb::Welcome).arg("proc", i).arg("pid", p.pid);
        send_or_log(&mut w, &welcome, &who);
        self.peers.insert(id, ((i, 0), w));
        if !self.restart_dropped && self.procs.values().all(|p| p.state == LState::Running) {
            // A restart's copies of the images: every restorer has read its own by now.
            if let Some(s) = &self.staging {
                s.remove_restart();
                self.restart_dropped = true;
            }
        }
        let joined = Msg::new(Verb::Joined)
            .arg("proc", i)
            .arg("pid", self.procs[&i].pid)
            .arg("host", &self.procs[&i].host)
            .arg("node", self.a.node)
            .arg("restarted", msg.get("restarted").unwrap_or("0"));
        self.up(joined);
        self.try_run(i);
    }

    /// A process the launched process of tree `proc` started joins the job. During a
    /// checkpoint's SUSPEND it is suspended with the others (a checkpoint waits for children
    /// that are starting); later in a checkpoint it makes the checkpoint fail, since it was
    /// not stopped with the others.
    fn member_hello(&mut self, id: u64, msg: Msg, writer: TcpStream, who: String) {
        let i = match self.check_identity(&msg) {
            Ok(i) => i,
            Err(why) => return deny(writer, &why, who),
        };
        let (Ok(nspid), Ok(pid)) = (msg.num::<u32>("nspid"), msg.num::<u32>("pid")) else {
            return deny(writer, "HELLO of a member without nspid= or pid=", who);
        };
        // After a restart the processes of a tree may connect before its first one; and
        // while its first one replaces itself by exec (its old connection closed, its new
        // program not connected yet) a child it started just before may connect first (a
        // shell running `orted` for a slot): the tree's process still runs.
        let p = &self.procs[&i];
        let execing = p.state == LState::Lost && proc_stat(p.pid).is_some_and(|s| s.state != 'Z');
        if nspid == 0 || !(matches!(p.state, LState::Running | LState::Missing) || execing) {
            return deny(writer, &format!("proc {i} has ended"), who);
        }
        if let Some(old) = self.procs[&i].members.get(&nspid) {
            if !(msg.get("exec") == Some("1") && old.pid == pid) {
                return deny(
                    writer,
                    &format!("proc {i}'s process {nspid} is already connected"),
                    who,
                );
            }
            // It replaced itself by exec: its former program's connection is dead.
            let old = old.conn;
            if let Some((_, w)) = self.peers.remove(&old) {
                let _ = w.shutdown(Shutdown::Both);
            }
            self.writing.remove(&(i, nspid));
            self.proc_gone((i, nspid), "replaced itself by exec");
        }
        let mut w = writer;
        let welcome = Msg::new(Verb::Welcome).arg("proc", i).arg("pid", pid);
        send_or_log(&mut w, &welcome, &who);
        self.peers.insert(id, ((i, nspid), w));
        self.left.remove(&pid);
        let p = self.procs.get_mut(&i).expect("checked");
        p.members.insert(
            nspid,
            Member {
                conn: id,
                pid,
                suspended_for: None,
            },
        );
        tracing::debug!(
            "node {}: proc {i}'s process {nspid} (pid {pid}) joined",
            self.a.node
        );
        let Some(ph) = self.phase.as_mut().filter(|p| !p.reported) else {
            return;
        };
        match ph.kind {
            Kind::Suspend => {
                let v = ph.ckpt;
                ph.pending.insert((i, nspid));
                self.procs
                    .get_mut(&i)
                    .and_then(|p| p.members.get_mut(&nspid))
                    .expect("just added")
                    .suspended_for = Some(v);
                self.send_slot((i, nspid), &Msg::new(Verb::Suspend).arg("ckpt", v));
            }
            Kind::Write => {
                let why = format!(
                    "{} started while the others were being written; take the checkpoint again",
                    describe_slot(&self.procs, (i, nspid))
                );
                self.report_failure(&[(i, nspid)], why);
            }
            Kind::Resume => {}
        }
    }

    /// The token and job of a first line.
    fn check_token_and_job(&self, msg: &Msg) -> Result<(), String> {
        if !msg.get("token").is_some_and(|t| self.token.matches(t)) {
            return Err("wrong token".into());
        }
        match msg.get("job") {
            Some(j) if j == self.a.job => Ok(()),
            j => Err(format!(
                "job mismatch: this is job {}, not {}",
                self.a.job,
                j.unwrap_or("(none)")
            )),
        }
    }

    /// The token, job, process index and node of a HELLO: the process index.
    fn check_identity(&self, msg: &Msg) -> Result<usize, String> {
        self.check_token_and_job(msg)?;
        let i: usize = msg.num("proc").map_err(|e| e.to_string())?;
        if i >= self.a.procs {
            return Err(format!(
                "no proc {i}: the job has {} processes",
                self.a.procs
            ));
        }
        if !self.procs.contains_key(&i) {
            return Err(format!(
                "proc {i} belongs to node {}, not node {}",
                crate::node_of(i, self.a.procs, self.a.nodes),
                self.a.node
            ));
        }
        if let Some(n) = msg.get("node").and_then(|n| n.parse::<usize>().ok()) {
            if n != self.a.node {
                return Err(format!("this is node {}, not node {n}", self.a.node));
            }
        }
        Ok(i)
    }

    fn check_hello(&self, msg: &Msg) -> Result<usize, String> {
        let i = self.check_identity(msg)?;
        let p = &self.procs[&i];
        // A program the process ran by exec in its place joins again, under the same pid.
        let exec_in_place =
            msg.get("exec") == Some("1") && msg.num::<u32>("pid").is_ok_and(|pid| pid == p.pid);
        match p.state {
            LState::Missing => Ok(i),
            // Its old connection closes at the exec; the new one may be read first.
            LState::Lost | LState::Running if exec_in_place => Ok(i),
            LState::Running => Err(format!("proc {i} is already connected")),
            LState::Exited(_) | LState::Lost => Err(format!("proc {i} has already ended")),
        }
    }

    fn on_proc_line(&mut self, id: u64, msg: Msg) {
        if self.meets.contains_key(&id) {
            return self.meet_line(id, msg);
        }
        let Some(&(slot, _)) = self.peers.get(&id) else {
            return;
        };
        let i = slot.0;
        match msg.verb {
            Verb::Suspended | Verb::Written | Verb::Failed | Verb::Resumed => {
                self.proc_answer(slot, &msg)
            }
            Verb::Bye if slot.1 == 0 => {
                let status = msg.num::<i32>("status").unwrap_or(-1);
                self.procs.get_mut(&i).expect("known").state = LState::Exited(status);
                self.up(Msg::new(Verb::Left).arg("proc", i).arg("status", status));
                self.proc_gone(slot, &format!("exited with status {status}"));
                self.try_run(i);
            }
            Verb::Checkpoint => self.up(Msg::new(Verb::Checkpoint).arg("proc", i)),
            v => {
                tracing::warn!(
                    "node {}: {} sent {v}, which a process never sends; closing its connection",
                    self.a.node,
                    describe_slot(&self.procs, slot)
                );
                if let Some((_, w)) = self.peers.get(&id) {
                    let _ = w.shutdown(Shutdown::Both);
                }
            }
        }
    }

    /// A restored process's request for one of its connections to another host: LISTEN
    /// (it listens at `port` on this host) or SEEK (where is the other end?), passed to the
    /// root with this host's address; the root's answer comes back to it (`meet_answer`).
    fn meet_line(&mut self, id: u64, msg: Msg) {
        let Some(key) = msg.get("key").map(str::to_string) else {
            tracing::warn!("node {}: {msg} without key=; ignored", self.a.node);
            return;
        };
        let up = match msg.verb {
            Verb::Listen => match msg.num::<u16>("port") {
                Ok(port) => Msg::new(Verb::Listen)
                    .arg("key", &key)
                    .arg("addr", SocketAddr::new(self.addr.ip(), port)),
                Err(e) => {
                    tracing::warn!("node {}: {msg}: {e}", self.a.node);
                    return;
                }
            },
            Verb::Seek => Msg::new(Verb::Seek).arg("key", &key),
            v => {
                tracing::warn!(
                    "node {}: {v} on a MEET connection, which only says LISTEN and SEEK",
                    self.a.node
                );
                return;
            }
        };
        let up = up.arg("close", msg.get("close").unwrap_or("0"));
        self.meet_keys.entry(key).or_default().push(id);
        self.up(up);
    }

    /// The root's answer for a connection to another host (PEER or NONE), to the restored
    /// processes waiting on it.
    fn meet_answer(&mut self, msg: &Msg) {
        let Some(ids) = msg.get("key").and_then(|k| self.meet_keys.get(k)) else {
            return;
        };
        for id in ids {
            if let Some(w) = self.meets.get_mut(id) {
                send_or_log(w, msg, "a restored process");
            }
        }
    }

    fn proc_closed(&mut self, id: u64) {
        if let Some(w) = self.meets.remove(&id) {
            let _ = w.shutdown(Shutdown::Both);
            self.meet_keys.retain(|_, ids| {
                ids.retain(|&i| i != id);
                !ids.is_empty()
            });
            return;
        }
        if self.rsh.remove(&id).is_some() {
            return; // a cairn rsh that left before its answer
        }
        let Some((slot, w)) = self.peers.remove(&id) else {
            return;
        };
        let _ = w.shutdown(Shutdown::Both);
        self.writing.remove(&slot);
        let (i, nspid) = slot;
        if nspid != 0 {
            // A process of the tree ended (or left checkpoint control by exec: if it still
            // runs, the next checkpoint finds it among the tree's processes and fails).
            let gone = self
                .procs
                .get_mut(&i)
                .and_then(|p| p.members.remove(&nspid));
            self.left
                .retain(|&pid, (start, _)| proc_stat(pid).is_some_and(|s| s.start == *start));
            if let Some(m) = gone {
                if let Some(st) = proc_stat(m.pid).filter(|s| s.state != 'Z') {
                    self.left.insert(m.pid, (st.start, Instant::now()));
                }
            }
            if self
                .phase
                .as_ref()
                .is_some_and(|ph| ph.kind == Kind::Suspend)
            {
                self.member_ended_in_suspend(slot);
            } else {
                let how = format!("ended ({LOST})");
                self.proc_gone(slot, &how);
            }
            return;
        }
        let p = self.procs.get_mut(&i).expect("known");
        p.conn = None;
        if p.state == LState::Running {
            p.state = LState::Lost;
            // Only a checkpoint in progress makes this news here (it fails, with a report);
            // otherwise the launcher, the processes' parent, reports how they ended.
            tracing::debug!(
                "node {}: {}: connection closed without BYE",
                self.a.node,
                describe(&self.procs, i)
            );
            self.up(Msg::new(Verb::Left).arg("proc", i).arg("lost", 1));
            self.proc_gone(slot, LOST);
            self.try_run(i);
        }
    }

    /// A process of a tree (not its first) ended before it stopped for a checkpoint: a
    /// short-lived command that finished, say. It is not part of the checkpoint (its parent's
    /// library records it as an ended child, if it was not collected yet), which goes on
    /// without it. One that replaced itself by a program outside checkpoint control still
    /// runs, and `suspend_done` names it among the tree's processes that are not the job's.
    fn member_ended_in_suspend(&mut self, slot: Slot) {
        let Some(ph) = self.phase.as_mut() else {
            return;
        };
        if ph.pending.remove(&slot) && ph.pending.is_empty() {
            self.suspend_done();
        }
    }

    /// A process ended: fails the phase it was expected to answer.
    fn proc_gone(&mut self, slot: Slot, how: &str) {
        let Some(ph) = self.phase.as_mut() else {
            return;
        };
        if !ph.pending.remove(&slot) {
            return;
        }
        self.failed.insert(slot);
        match ph.kind {
            Kind::Resume => {
                if ph.pending.is_empty() {
                    self.phase_complete();
                }
            }
            k => {
                let why = format!(
                    "{} {how} during {}",
                    describe_slot(&self.procs, slot),
                    k.name()
                );
                self.report_failure(&[slot], why);
            }
        }
    }

    fn proc_answer(&mut self, slot: Slot, msg: &Msg) {
        let v = msg.num::<u64>("ckpt").ok();
        if matches!(msg.verb, Verb::Written | Verb::Failed) && v == Some(self.writing_for) {
            self.writing.remove(&slot);
        }
        let who = describe_slot(&self.procs, slot);
        let Some(ph) = self.phase.as_mut().filter(|p| Some(p.ckpt) == v) else {
            tracing::debug!("node {}: {who}: {msg} for no current phase", self.a.node);
            return;
        };
        let fits = matches!(
            (msg.verb, ph.kind),
            (Verb::Suspended, Kind::Suspend)
                | (Verb::Written | Verb::Failed, Kind::Write)
                | (Verb::Failed, Kind::Suspend)
                | (Verb::Resumed, Kind::Resume)
        );
        if !fits || !ph.pending.contains(&slot) {
            tracing::debug!("node {}: {who}: {msg} out of turn; ignored", self.a.node);
            return;
        }
        if msg.verb == Verb::Failed {
            ph.pending.remove(&slot);
            self.failed.insert(slot);
            let why = format!(
                "{who} failed to {}: {}",
                if ph.kind == Kind::Write {
                    "write its image"
                } else {
                    "suspend"
                },
                msg.get("why").unwrap_or("no reason given")
            );
            return self.report_failure(&[slot], why);
        }
        if msg.verb == Verb::Written {
            match msg.num::<u64>("bytes") {
                Ok(b) => {
                    ph.bytes += b;
                    ph.sizes.insert(slot, b);
                }
                Err(e) => {
                    ph.pending.remove(&slot);
                    self.failed.insert(slot);
                    let why = format!("{who}: {e}");
                    return self.report_failure(&[slot], why);
                }
            }
        }
        ph.pending.remove(&slot);
        if ph.pending.is_empty() {
            match ph.kind {
                Kind::Suspend => self.suspend_done(),
                Kind::Write => self.write_done(),
                Kind::Resume => self.phase_complete(),
            }
        }
    }

    /// Every process answered WRITE: before the node says so, it checks each tree's images
    /// where they are ([`crate::check::written`]).
    fn write_done(&mut self) {
        let Some(ph) = self.phase.as_ref().filter(|p| p.kind == Kind::Write) else {
            return;
        };
        let v = ph.ckpt;
        let Some(dir) = self.staging.as_ref().map(|s| s.version_dir(self.a.node, v)) else {
            return;
        };
        let mut bad = None;
        let mut remotes = Vec::new();
        for (&i, p) in &self.procs {
            let size = |slot: Slot| ph.sizes.get(&slot).copied().unwrap_or(0);
            let tree = ProcImage {
                proc: i,
                node: self.a.node,
                host: p.host.clone(),
                pid: p.pid,
                bytes: size((i, 0)),
                region: 0,
                stored: 0,
                members: manifest::members_of(&ph.sizes, i),
                slot: None,
            };
            match crate::check::written(&dir, &tree) {
                Ok(r) => remotes.extend(r.into_iter().map(|r| (i, r))),
                Err(why) => {
                    let slots: Vec<Slot> = ph
                        .sizes
                        .range((i, 0)..(i + 1, 0))
                        .map(|(s, _)| *s)
                        .collect();
                    bad = Some((slots, why));
                    break;
                }
            }
        }
        match bad {
            Some((slots, why)) => self.report_failure(&slots, why),
            None => {
                if let Some(ph) = self.phase.as_mut() {
                    ph.remotes = remotes;
                }
                self.phase_complete()
            }
        }
    }

    /// Every process answered SUSPEND: before the node says so, every process of each tree
    /// must be a process of the job. A child that has not joined yet (just forked, or
    /// between vfork and exec) is waited for a moment; one that does not join runs a
    /// program without the checkpoint library, and the checkpoint fails naming it.
    fn suspend_done(&mut self) {
        let outside = self.outside_processes();
        let Some(ph) = self
            .phase
            .as_mut()
            .filter(|p| p.kind == Kind::Suspend && !p.reported)
        else {
            return;
        };
        if !ph.pending.is_empty() {
            return;
        }
        if outside.is_empty() {
            ph.grace = None;
            return self.phase_complete();
        }
        let loaded = outside.iter().any(|(_, _, loaded)| *loaded);
        match ph.grace {
            None => {
                ph.grace = Some(Instant::now() + if loaded { LOADED_GRACE } else { JOIN_GRACE })
            }
            Some(g) if Instant::now() < g => {}
            Some(_) => {
                ph.grace = None;
                let slots: Vec<Slot> = outside.iter().map(|(s, _, _)| *s).collect();
                let why = hub::first_findings(outside.iter().map(|(_, what, _)| what.as_str()));
                self.report_failure(&slots, why);
            }
        }
    }

    /// The processes in this node's trees that are not processes of the job: children of
    /// the job's processes (and of each tree's init, which adopts orphans) that never
    /// connected, each with whether it maps the checkpoint library (still connecting).
    /// Processes that ended and wait to be reaped are left to their parent's checkpoint
    /// library, which names them.
    fn outside_processes(&self) -> Vec<(Slot, String, bool)> {
        let mut out = Vec::new();
        for (&i, p) in &self.procs {
            if p.state != LState::Running || p.pid == 0 || !p.namespaced {
                continue;
            }
            let known: BTreeSet<u32> = std::iter::once(p.pid)
                .chain(p.members.values().map(|m| m.pid))
                .collect();
            let mut parents: Vec<(Slot, u32)> = vec![((i, 0), p.pid)];
            parents.extend(p.members.iter().map(|(&ns, m)| ((i, ns), m.pid)));
            // The tree's init (pid 1 of its namespace) adopts what other processes leave.
            if let Some(init) = proc_stat(p.pid).map(|s| s.ppid) {
                parents.push(((i, 0), init));
            }
            for (slot, parent) in parents {
                for child in children_of(parent) {
                    if known.contains(&child) {
                        continue;
                    }
                    let Some(st) = proc_stat(child) else { continue };
                    if st.state == 'Z' {
                        continue;
                    }
                    let loaded = maps_library(child);
                    let left = self
                        .left
                        .get(&child)
                        .filter(|(start, _)| *start == st.start);
                    let why = if let Some((_, when)) = left {
                        format!(
                            "loads the checkpoint library and joined the job, but its \
                             connection to the sub-coordinator closed {:.1} s ago while it ran \
                             on (the program closed the descriptor, or replaced itself by exec \
                             with one that stays out), and it did not join again within {} s",
                            when.elapsed().as_secs_f64(),
                            LOADED_GRACE.as_secs()
                        )
                    } else if loaded {
                        format!(
                            "loads the checkpoint library but did not join the job within {} s \
                             (still starting, or it could not reach its sub-coordinator)",
                            LOADED_GRACE.as_secs()
                        )
                    } else {
                        "is not under checkpoint control: it runs a program that does not \
                         load the checkpoint library (statically linked, or started with \
                         LD_PRELOAD removed or the environment cleared)"
                            .to_string()
                    };
                    out.push((
                        slot,
                        format!(
                            "{}: process {child} ({}), a child of pid {parent}, {why}",
                            describe(&self.procs, i),
                            st.comm
                        ),
                        loaded,
                    ));
                }
            }
        }
        out
    }

    // ---- the root ------------------------------------------------------------------------

    fn on_root_line(&mut self, msg: Msg) {
        if matches!(msg.verb, Verb::Peer | Verb::NoPeer) {
            return self.meet_answer(&msg);
        }
        match msg.verb {
            Verb::Kill => return self.kill(&msg),
            Verb::Run => return self.run_request(&msg),
            Verb::Done => return self.rsh_answer(msg),
            _ => {}
        }
        let v = match msg.num::<u64>("ckpt") {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("node {}: from the root: {msg}: {e}", self.a.node);
                return;
            }
        };
        match msg.verb {
            Verb::Suspend => self.suspend(v),
            Verb::Write => self.write(v),
            Verb::Resume => self.resume(v, msg.get("ok") == Some("1")),
            other => tracing::warn!(
                "node {}: the root sent {other}, which it never sends; ignored",
                self.a.node
            ),
        }
    }

    /// `KILL signal=<n>`: the signal to every process this node started that still runs, or
    /// with `proc=<i>` to that one only (the root ends unused slots so).
    fn kill(&mut self, msg: &Msg) {
        let only = match msg.get("proc").map(|_| msg.num::<usize>("proc")) {
            None => None,
            Some(Ok(i)) => Some(i),
            Some(Err(e)) => return tracing::warn!("node {}: from the root: {e}", self.a.node),
        };
        match msg.num::<i32>("signal") {
            Ok(sig) if sig > 0 && sig < 65 => {
                let n = self
                    .children
                    .signal_where(sig, |i| only.map_or(true, |o| o == i));
                tracing::info!("node {}: signal {sig} sent to {n} processes", self.a.node);
            }
            _ => tracing::warn!("node {}: from the root: {msg}: bad signal", self.a.node),
        }
    }

    fn new_phase(&mut self, ckpt: u64, kind: Kind, pending: BTreeSet<Slot>) {
        self.phase = Some(NodePhase {
            ckpt,
            kind,
            pending,
            deadline: Instant::now() + self.a.timeout,
            bytes: 0,
            sizes: BTreeMap::new(),
            reported: false,
            writing: Vec::new(),
            grace: None,
            remotes: Vec::new(),
        });
    }

    /// Every process of the job on this node: each tree's launched process and the
    /// processes it started.
    fn all_slots(&self) -> Vec<Slot> {
        let mut out = Vec::new();
        for (&i, p) in &self.procs {
            out.push((i, 0));
            out.extend(p.members.keys().map(|&ns| (i, ns)));
        }
        out
    }

    fn set_suspended_for(&mut self, (i, nspid): Slot, v: Option<u64>) {
        let Some(p) = self.procs.get_mut(&i) else {
            return;
        };
        if nspid == 0 {
            p.suspended_for = v;
        } else if let Some(m) = p.members.get_mut(&nspid) {
            m.suspended_for = v;
        }
    }

    fn suspended_for(&self, (i, nspid): Slot) -> Option<u64> {
        let p = self.procs.get(&i)?;
        if nspid == 0 {
            p.suspended_for
        } else {
            p.members.get(&nspid)?.suspended_for
        }
    }

    fn connected(&self, (i, nspid): Slot) -> bool {
        self.procs.get(&i).is_some_and(|p| {
            if nspid == 0 {
                p.conn.is_some()
            } else {
                p.members.contains_key(&nspid)
            }
        })
    }

    fn suspend(&mut self, v: u64) {
        self.failed.clear();
        let absent: Vec<usize> = self
            .procs
            .iter()
            .filter(|(_, p)| p.state != LState::Running)
            .map(|(&i, _)| i)
            .collect();
        self.new_phase(v, Kind::Suspend, BTreeSet::new());
        if !absent.is_empty() {
            // Nobody is suspended: the root will answer with RESUME ok=0, which then
            // concerns no process here.
            let why = absent
                .iter()
                .map(|&i| {
                    let how = match self.procs[&i].state {
                        LState::Missing => "has not registered".to_string(),
                        LState::Exited(s) => format!("has exited with status {s}"),
                        _ => "has lost its connection".to_string(),
                    };
                    format!("{} {how}", describe(&self.procs, i))
                })
                .collect::<Vec<_>>()
                .join("; ");
            let slots: Vec<Slot> = absent.iter().map(|&i| (i, 0)).collect();
            self.failed.extend(&slots);
            return self.report_failure(&slots, why);
        }
        let msg = Msg::new(Verb::Suspend).arg("ckpt", v);
        let all = self.all_slots();
        for &slot in &all {
            self.set_suspended_for(slot, Some(v));
            self.send_slot(slot, &msg);
        }
        self.new_phase(v, Kind::Suspend, all.into_iter().collect());
    }

    fn write(&mut self, v: u64) {
        let all: BTreeSet<Slot> = self.all_slots().into_iter().collect();
        self.wrote = all.iter().copied().collect();
        self.new_phase(v, Kind::Write, all.clone());
        // The node's own staging directory of the checkpoint, made here, on its host.
        let made = match &self.staging {
            Some(s) => s
                .create_version(v)
                .map(|()| s.version_dir(self.a.node, v))
                .map_err(|e| format!("node {}: {e}", self.a.node)),
            None => Err(format!(
                "node {}: no staging directory (the engine was not started)",
                self.a.node
            )),
        };
        let dir = match made {
            Ok(d) => d.display().to_string(),
            Err(why) => {
                let slots: Vec<Slot> = all.into_iter().collect();
                return self.report_failure(&slots, why);
            }
        };
        self.writing = all.clone();
        self.writing_for = v;
        let hash_block = self.staging.as_ref().map_or(0, Staging::hash_block);
        for (i, nspid) in all {
            let name = if nspid == 0 {
                manifest::image_name(i)
            } else {
                manifest::member_image_name(i, nspid)
            };
            let path = format!("{dir}/{name}");
            let msg = Msg::new(Verb::Write).arg("ckpt", v).arg("path", path);
            let msg = match hash_block {
                0 => msg,
                b => msg.arg("block", b),
            };
            self.send_slot((i, nspid), &msg);
        }
    }

    fn resume(&mut self, v: u64, ok: bool) {
        // A checkpoint aborted while processes here had not answered its phase yet: they are
        // hung or slow. They get RESUME too, but are not waited for.
        if let Some(ph) = self
            .phase
            .take()
            .filter(|p| p.ckpt == v && p.kind != Kind::Resume)
        {
            if !ph.pending.is_empty() {
                tracing::warn!(
                    "node {}: checkpoint {v} aborted before {} answered {}",
                    self.a.node,
                    describe_all(&self.procs, &ph.pending),
                    ph.kind.name()
                );
            }
            self.failed.extend(ph.pending);
        }
        let msg = Msg::new(Verb::Resume)
            .arg("ckpt", v)
            .arg("ok", u8::from(ok));
        let mut wait = BTreeSet::new();
        let targets: Vec<Slot> = self
            .all_slots()
            .into_iter()
            .filter(|&s| self.suspended_for(s) == Some(v) && self.connected(s))
            .collect();
        for slot in targets {
            self.set_suspended_for(slot, None);
            self.send_slot(slot, &msg);
            if !self.failed.contains(&slot) {
                wait.insert(slot);
            }
        }
        self.new_phase(v, Kind::Resume, wait);
        let writing = std::mem::take(&mut self.writing);
        let writing: Vec<Slot> = writing.into_iter().filter(|&s| self.connected(s)).collect();
        if let Some(s) = &self.staging {
            if ok {
                // The engine holds every older version: their staged images go.
                s.prune(v);
            } else if writing.is_empty() {
                s.remove_version(v);
            }
            // Else a process may still write into it: left for the next complete
            // checkpoint's pruning rather than deleted under it.
        }
        self.phase.as_mut().expect("just set").writing = writing;
        if self.phase.as_ref().is_some_and(|p| p.pending.is_empty()) {
            self.phase_complete();
        }
        // Commands for slots that came during the checkpoint.
        let waiting: Vec<usize> = (self.procs.iter())
            .filter(|(_, p)| p.run.is_some())
            .map(|(&i, _)| i)
            .collect();
        for i in waiting {
            self.try_run(i);
        }
    }

    fn send_slot(&mut self, (i, nspid): Slot, msg: &Msg) {
        let id = if nspid == 0 {
            self.procs[&i].conn
        } else {
            self.procs[&i].members.get(&nspid).map(|m| m.conn)
        };
        let Some(id) = id else {
            return;
        };
        if let Some((_, w)) = self.peers.get_mut(&id) {
            send_or_log(w, msg, format_args!("proc {i}"));
        }
    }

    /// Every process answered the phase.
    fn phase_complete(&mut self) {
        let Some(ph) = self.phase.as_mut() else {
            return;
        };
        if ph.reported {
            return;
        }
        ph.reported = true;
        let count = self.procs.len();
        let msg = match ph.kind {
            Kind::Suspend => Msg::new(Verb::Suspended)
                .arg("ckpt", ph.ckpt)
                .arg("count", count),
            Kind::Write => {
                // One line per image (a node may hold hundreds: no line could list them),
                // the other processes of a tree by their pid in its namespace.
                let (v, bytes, n) = (ph.ckpt, ph.bytes, ph.sizes.len());
                let lines: Vec<Msg> = ph
                    .sizes
                    .iter()
                    .map(|(&(i, ns), &len)| {
                        let m = Msg::new(Verb::Image).arg("ckpt", v).arg("proc", i);
                        let m = if ns == 0 { m } else { m.arg("member", ns) };
                        m.arg("bytes", len)
                    })
                    .collect();
                // Then each connection to another host, for the root to find its other end.
                let conns: Vec<Msg> = ph
                    .remotes
                    .iter()
                    .map(|(i, r)| {
                        Msg::new(Verb::Conn)
                            .arg("ckpt", v)
                            .arg("proc", i)
                            .arg("who", &r.who)
                            .arg("fd", r.end.fd)
                            .arg("local", r.end.local)
                            .arg("peer", r.end.peer)
                            .arg("close", u8::from(r.end.close))
                    })
                    .collect();
                for l in lines.into_iter().chain(conns) {
                    self.up(l);
                }
                Msg::new(Verb::Written)
                    .arg("ckpt", v)
                    .arg("bytes", bytes)
                    .arg("count", count)
                    .arg("images", n)
            }
            Kind::Resume => {
                let missing: BTreeSet<usize> = ph.pending.iter().map(|s| s.0).collect();
                let mut m = Msg::new(Verb::Resumed)
                    .arg("ckpt", ph.ckpt)
                    .arg("count", count - missing.len());
                if !missing.is_empty() {
                    m = m.arg("missing", ranges(missing));
                }
                if !ph.writing.is_empty() {
                    m = m.arg("writing", ranges(ph.writing.iter().map(|s| s.0)));
                }
                self.phase = None;
                m
            }
        };
        self.up(msg);
    }

    /// Sends the phase's FAILED up, once.
    fn report_failure(&mut self, procs: &[Slot], why: String) {
        let Some(ph) = self.phase.as_mut() else {
            return;
        };
        if ph.reported || ph.kind == Kind::Resume {
            return;
        }
        ph.reported = true;
        let msg = Msg::new(Verb::Failed)
            .arg("ckpt", ph.ckpt)
            .arg("procs", ranges(procs.iter().map(|s| s.0)))
            .arg("why", why);
        self.up(msg);
    }

    fn deadline_passed(&mut self) {
        let Some(ph) = self.phase.as_mut() else {
            return;
        };
        if ph.kind == Kind::Resume {
            // Those still pending are named in RESUMED's missing=.
            tracing::warn!(
                "node {}: {} did not confirm RESUME within {:.0} s",
                self.a.node,
                describe_all(&self.procs, &ph.pending),
                self.a.timeout.as_secs_f64()
            );
            return self.phase_complete();
        }
        let late: Vec<Slot> = ph.pending.iter().copied().collect();
        let kind = ph.kind;
        self.failed.extend(&late);
        let why = late
            .iter()
            .map(|&s| {
                format!(
                    "{} did not answer {} within {:.0} s",
                    describe_slot(&self.procs, s),
                    kind.name(),
                    self.a.timeout.as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        self.report_failure(&late, why);
    }
}
