//! The client side of `CLIENT token=.. cmd=checkpoint|status|kill`: what `cairn checkpoint`,
//! `cairn status` and the tests use to talk to a running job's root.

use crate::error::{bail, Error, ErrorKind, Result};
use crate::jobdir::CoordInfo;
use crate::net;
use crate::proto::{Conn, Msg, Verb};
use std::path::Path;
use std::time::Duration;

/// A connection to a job's root coordinator, found through `<job_dir>/coord`.
pub struct Client {
    info: CoordInfo,
}

/// A completed checkpoint.
#[derive(Debug, Clone)]
pub struct Done {
    pub version: u64,
    /// The version's directory.
    pub dir: String,
    /// The images' bytes.
    pub bytes: u64,
    /// What the engine stored for them (after zero blocks, unchanged blocks and
    /// compression).
    pub stored: u64,
    pub secs: f64,
}

/// A job as `cairn status` shows it.
#[derive(Debug, Clone)]
pub struct Status {
    /// The `JOB` line: job, procs, nodes, state, ckpt.
    pub job: Msg,
    /// One `PROC` line per process: proc, pid, node, host, state (missing, running, exited
    /// with status=, lost), restarted.
    pub procs: Vec<Msg>,
    /// One `NODE` line per node: node, procs, running, subcoord, pid, state.
    pub nodes: Vec<Msg>,
    /// The `LAST` line: ckpt (or `none`), when, dir.
    pub last: Msg,
}

impl Client {
    /// Reads the coordinator file of `job_dir`. A file whose root process no longer exists is
    /// stale: that is an error here rather than 30 s of connection attempts.
    pub fn new(job_dir: &Path) -> Result<Client> {
        let info = CoordInfo::read(job_dir)?;
        if !Path::new(&format!("/proc/{}", info.pid)).exists() {
            bail!(
                NotFound,
                "job {} is not running: its root coordinator (pid {}) is gone ({} is stale)",
                info.job,
                info.pid,
                job_dir.join(crate::jobdir::COORD_FILE).display()
            );
        }
        Ok(Client { info })
    }

    pub fn job(&self) -> &str {
        &self.info.job
    }

    fn open(&self, cmd: &str, extra: &[(&str, String)]) -> Result<Conn> {
        let stream = net::connect(&self.info.addr.to_string(), 0)?;
        let mut conn = Conn::new(stream)?;
        let mut m = Msg::new(Verb::Client)
            .arg("token", self.info.token.hex())
            .arg("cmd", cmd);
        for (k, v) in extra {
            m = m.arg(k, v);
        }
        conn.send(&m)?;
        Ok(conn)
    }

    /// Asks for a checkpoint of the whole job and waits for it; `progress` sees each
    /// `PROGRESS` line. A failed checkpoint is an error of kind
    /// [`ErrorKind::CheckpointFailed`] whose message is the root's report.
    pub fn checkpoint(&self, mut progress: impl FnMut(&Msg)) -> Result<Done> {
        let mut conn = self.open("checkpoint", &[])?;
        loop {
            let m = conn.expect("the checkpoint's outcome")?;
            match m.verb {
                Verb::Progress => progress(&m),
                Verb::Done if m.get("ok") == Some("1") => {
                    return Ok(Done {
                        version: m.num("ckpt")?,
                        dir: m.req("dir")?.to_string(),
                        bytes: m.num("bytes").unwrap_or(0),
                        stored: m.num("stored").unwrap_or(0),
                        secs: m.num("secs").unwrap_or(0.0),
                    })
                }
                Verb::Done => {
                    let v = m.get("ckpt").map(|v| format!(" {v}")).unwrap_or_default();
                    bail!(
                        CheckpointFailed,
                        "checkpoint{v} of job {} failed: {}",
                        self.info.job,
                        m.get("why").unwrap_or("no reason given")
                    )
                }
                Verb::Denied => return Err(denied(&m)),
                v => bail!(Protocol, "the root answered {v} to a checkpoint request"),
            }
        }
    }

    /// The job's processes, nodes and last checkpoint.
    pub fn status(&self) -> Result<Status> {
        let mut conn = self.open("status", &[])?;
        let mut job = None;
        let mut procs = Vec::new();
        let mut nodes = Vec::new();
        let mut last = None;
        loop {
            let m = conn.expect("the status")?;
            match m.verb {
                Verb::Job => job = Some(m),
                Verb::Proc => procs.push(m),
                Verb::Node => nodes.push(m),
                Verb::Last => last = Some(m),
                Verb::End => break,
                Verb::Denied => return Err(denied(&m)),
                v => bail!(Protocol, "the root answered {v} to a status request"),
            }
        }
        match (job, last) {
            (Some(job), Some(last)) => Ok(Status {
                job,
                procs,
                nodes,
                last,
            }),
            _ => bail!(Protocol, "the root's status lacks its JOB or LAST line"),
        }
    }

    /// Sends `signal` to every process of the job; returns how many were signalled.
    pub fn kill(&self, signal: i32) -> Result<usize> {
        let mut conn = self.open("kill", &[("signal", signal.to_string())])?;
        let m = conn.expect("the kill's outcome")?;
        match m.verb {
            Verb::Done => m.num("killed"),
            Verb::Denied => Err(denied(&m)),
            v => bail!(Protocol, "the root answered {v} to a kill request"),
        }
    }
}

/// How long `cairn rsh` waits for its command to reach a slot: the slot may still be
/// starting, or held by a checkpoint (one phase timeout each, 60 s by default).
const RSH_LIMIT: Duration = Duration::from_secs(300);

/// Where `cairn rsh`'s command went: the slot's process index and node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RshDone {
    pub proc: usize,
    pub node: usize,
}

/// Asks the sub-coordinator at `addr` (the caller's own node's: `cairn rsh` runs inside the
/// job) to run `cmd` on `host`, in a free slot of job `job` there (`--rsh`); returns once the
/// slot has the command. A host that is not the job's, one without a free slot, or a
/// command whose line would pass [`crate::proto::MAX_LINE`] is refused (kind
/// [`ErrorKind::Denied`], or [`ErrorKind::Protocol`] for the length), naming what is wrong.
pub fn rsh(addr: &str, token: &str, job: &str, host: &str, cmd: &str) -> Result<RshDone> {
    let ask = Msg::new(Verb::Rsh)
        .arg("token", token)
        .arg("job", job)
        .arg("host", host)
        .arg("cmd", cmd);
    // Checked before connecting, so the refusal names the command.
    ask.encode_whole().map_err(|e| {
        Error::new(
            ErrorKind::Protocol,
            format!(
                "the command ({} bytes) is too long for the coordinator's protocol: {}",
                cmd.len(),
                e.message()
            ),
        )
    })?;
    let stream = net::connect(addr, 0)?;
    let mut conn = Conn::new(stream)?;
    conn.send_whole(&ask)?;
    conn.set_read_timeout(Some(RSH_LIMIT))?;
    let m = conn.expect("the answer to RSH")?;
    match (m.verb, m.get("ok")) {
        (Verb::Done, Some("1")) => Ok(RshDone {
            proc: m.num("proc")?,
            node: m.num("node")?,
        }),
        (Verb::Done | Verb::Denied, _) => bail!(
            Denied,
            "job {job} cannot run the command on {host}: {}",
            m.get("why").unwrap_or("no reason given")
        ),
        (v, _) => bail!(Protocol, "the sub-coordinator answered {v} to RSH"),
    }
}

fn denied(m: &Msg) -> Error {
    Error::new(
        ErrorKind::Denied,
        format!(
            "the root coordinator refused: {}",
            m.get("why").unwrap_or("no reason given")
        ),
    )
}
