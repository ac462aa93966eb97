//! When to checkpoint, when to flush, and when to stop: the inputs of `need_checkpoint`,
//! the flush schedule and `should_exit` that are not the engine's own measurements.
//!
//! - The job's MTBF, from `[failure] mtbf` or `node_mtbf` divided by the node count, and the
//!   optimal intervals the failure model ([`crate::model`]) gives for a measured cost.
//! - The job's end: `[exit] time_limit` counted from initialisation, else Slurm's. That is
//!   `SLURM_JOB_END_TIME` when the batch system exports it, else the time left that one
//!   `squeue -h -j $SLURM_JOB_ID -o %L` reports. Rank 0 alone learns it, once per process and
//!   with a bounded wait ([`Policy::job_end_share`]); the engine shares it with the other
//!   ranks ([`Policy::set_job_end`]).
//! - The margin kept before that end: `[exit] margin`, but at most a tenth of the job's time
//!   ([`effective_margin`]), so that a short job is not stopped at its first step.
//! - The halt file, and SIGTERM / SIGUSR1 / SIGUSR2 with `[exit] signals` (the default). The
//!   handlers only count arrivals; the application sees them at its next `should_exit` or
//!   `need_checkpoint`. SIGUSR1 and SIGUSR2 are taken at initialisation, SIGTERM only once the
//!   application first asks `should_exit` or `need_checkpoint` ([`Policy::watch`]): a program
//!   that never asks keeps SIGTERM's default action. A signal the application already handles
//!   or ignores is left to it.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::{self, Formula};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{info, warn};

/// The signals `[exit] signals` turns into a request to stop. SIGTERM comes first: it is the
/// one taken late (see [`Policy::watch`]).
const STOP_SIGNALS: [(libc::c_int, &str); 3] = [
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
];

/// How many times each of [`STOP_SIGNALS`] arrived since Cairn took it.
static ARRIVED: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

/// How long rank 0 waits for Slurm to say how much time the job has left.
pub const SLURM_QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether signal `i` of [`STOP_SIGNALS`] still has its default action (so no one else
/// handles or ignores it).
fn has_default_action(sig: libc::c_int) -> bool {
    // SAFETY: an all-zero sigaction is a valid value for sigaction(2) to overwrite.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action makes sigaction(2) only read the current one into `old`.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
    rc == 0 && old.sa_sigaction == libc::SIG_DFL
}

/// Take signal `i` of [`STOP_SIGNALS`] (once per process): afterwards its arrivals are
/// counted instead of killing the process. A signal the application already handles or
/// ignores is left alone. Returns whether Cairn counts the signal.
fn take_signal(i: usize) -> bool {
    static TAKEN: [OnceLock<bool>; 3] = [const { OnceLock::new() }; 3];
    *TAKEN[i].get_or_init(|| {
        let (sig, name) = STOP_SIGNALS[i];
        if !has_default_action(sig) {
            info!("cairn: {name} already has a handler or is ignored: Cairn leaves it to the application");
            return false;
        }
        // SAFETY: the action only increments a static atomic counter, which is
        // async-signal-safe; it allocates nothing and takes no lock.
        let id = unsafe {
            signal_hook::low_level::register(sig, move || {
                ARRIVED[i].fetch_add(1, Ordering::Relaxed);
            })
        };
        match id {
            Ok(_) => true,
            Err(e) => {
                warn!("cairn: cannot install a handler for {name} ({e}): it keeps its default action, and cairn_should_exit does not see it");
                false
            }
        }
    })
}

/// The arrival counts of [`STOP_SIGNALS`] now.
fn arrivals() -> [usize; 3] {
    [0, 1, 2].map(|i| ARRIVED[i].load(Ordering::Relaxed))
}

/// Which failures a schedule must cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Covers {
    /// Every failure of the job (checkpoints).
    All,
    /// The failures only the global tier recovers (flushes).
    GlobalOnly,
}

/// What the engine needs to decide intervals and the end of the run.
#[derive(Debug)]
pub struct Policy {
    /// The job's MTBF in seconds, when one is configured.
    pub mtbf: Option<f64>,
    pub formula: Formula,
    pub global_share: f64,
    /// When the job must be gone, if known.
    pub deadline: Option<Instant>,
    /// The job's time: `[exit] time_limit`, or the time it had left when its end was learnt.
    pub span: f64,
    /// `[exit] margin` as configured.
    pub margin: f64,
    pub halt_file: Option<PathBuf>,
    /// `[exit] signals`: SIGTERM, SIGUSR1 and SIGUSR2 request a stop.
    pub signals: bool,
    /// The arrival counts of the stop signals when this policy began: only later ones count.
    seen: [usize; 3],
    /// Whether this policy has asked for SIGTERM yet (see [`Policy::watch`]).
    watching: bool,
    /// The engine's checkpoint count when it first agreed that the run must stop: the last
    /// checkpoint is due until a checkpoint follows.
    stop_at: Option<u64>,
}

/// The margin kept before the job's end: `[exit] margin`, but at most a tenth of the job's
/// time `span` (the configured time limit, or the time left when the end was learnt), so
/// that a job of a few minutes is not told to stop at its first step.
pub fn effective_margin(margin: f64, span: f64) -> f64 {
    margin.min(span / 10.0).max(0.0)
}

impl Policy {
    /// Resolve the policy for a job of `nodes` nodes. Fails when an `auto` interval has no
    /// MTBF to work from. With `[exit] signals`, takes SIGUSR1 and SIGUSR2 (SIGTERM waits for
    /// [`Policy::watch`]). A Slurm end time is not looked up here: see
    /// [`Policy::job_end_share`].
    pub fn new(cfg: &Config, nodes: usize) -> Result<Policy> {
        let mtbf = if cfg.mtbf > 0.0 {
            Some(cfg.mtbf)
        } else if cfg.node_mtbf > 0.0 {
            Some(cfg.node_mtbf / nodes.max(1) as f64)
        } else {
            None
        };
        if mtbf.is_none() && (cfg.seconds_auto || cfg.flush_auto) {
            let key = if cfg.seconds_auto {
                "[checkpoint] seconds"
            } else {
                "[flush] seconds"
            };
            return Err(Error::config(format!(
                "{key} = \"auto\" needs the failure rate: set [failure] mtbf (the job's MTBF) or [failure] node_mtbf (one node's MTBF)"
            )));
        }
        let formula = Formula::parse(&cfg.formula).map_err(Error::config)?;
        let deadline = (cfg.time_limit > 0.0)
            .then(|| Instant::now() + Duration::from_secs_f64(cfg.time_limit));
        let halt_file = match &cfg.halt_file {
            None => None,
            Some(p) if p.as_os_str().is_empty() => Some(cfg.global.join("cairn.halt")),
            Some(p) => Some(p.clone()),
        };
        if cfg.exit_signals {
            take_signal(1);
            take_signal(2);
        }
        Ok(Policy {
            mtbf,
            formula,
            global_share: cfg.global_share,
            deadline,
            span: cfg.time_limit,
            margin: cfg.exit_margin,
            halt_file,
            signals: cfg.exit_signals,
            seen: arrivals(),
            watching: false,
            stop_at: None,
        })
    }

    /// Rank `rank`'s part of the agreement on the job's end, which the engine reduces with
    /// `Op::Max` over every rank and hands to [`Policy::set_job_end`]: with `[exit]
    /// time_limit` 0, rank 0 contributes Slurm's end (milliseconds left now, and the job's
    /// time in milliseconds), learnt once per process; every other rank, and rank 0 when
    /// there is no end to learn, contributes `i64::MIN`. So thousands of ranks never all ask
    /// slurmctld, and all of them get the same end.
    pub fn job_end_share(&self, rank: usize) -> [i64; 2] {
        if rank != 0 || self.deadline.is_some() {
            return [i64::MIN; 2];
        }
        match slurm_end() {
            Some((end, span)) => {
                let left = end.saturating_duration_since(Instant::now());
                [left.as_millis() as i64, (span * 1000.0) as i64]
            }
            None => [i64::MIN; 2],
        }
    }

    /// Take the agreed result of [`Policy::job_end_share`] (unchanged when no rank knew an
    /// end).
    pub fn set_job_end(&mut self, shared: [i64; 2]) {
        if self.deadline.is_some() || shared[0] < 0 {
            return;
        }
        self.deadline = Some(Instant::now() + Duration::from_millis(shared[0] as u64));
        self.span = shared[1].max(0) as f64 / 1000.0;
    }

    /// The margin in force before the deadline (see [`effective_margin`]).
    pub fn margin_now(&self) -> f64 {
        effective_margin(self.margin, self.span)
    }

    /// Called at each `should_exit` and `need_checkpoint`: the application asks whether to
    /// stop, so it will see a SIGTERM too. The first call takes SIGTERM (with `[exit]
    /// signals`); until then SIGTERM keeps its default action, and a program that never
    /// asks ends on it as it would without Cairn.
    pub fn watch(&mut self) {
        if self.signals && !self.watching {
            self.watching = true;
            take_signal(0);
        }
    }

    /// Whether `need_checkpoint` must agree with the other ranks on a stop: a signal or the
    /// deadline can request one.
    pub fn watches_stop(&self) -> bool {
        self.signals || self.deadline.is_some()
    }

    /// Record that the engine agreed the run must stop, having taken `checkpoints`
    /// checkpoints so far (only the first call counts).
    pub fn note_stop(&mut self, checkpoints: u64) {
        self.stop_at.get_or_insert(checkpoints);
    }

    /// Whether the last checkpoint is due: a stop was agreed and no checkpoint followed it.
    pub fn last_checkpoint_due(&self, checkpoints: u64) -> bool {
        self.stop_at == Some(checkpoints)
    }

    /// The stop signals that arrived since this policy began, by name.
    fn signals_arrived(&self) -> Vec<&'static str> {
        let now = arrivals();
        (0..3)
            .filter(|&i| self.signals && now[i] > self.seen[i])
            .map(|i| STOP_SIGNALS[i].1)
            .collect()
    }

    /// The interval of a time schedule: `fixed` seconds, or with `auto` the optimum for the
    /// mean cost of `count` operations that took `total` seconds (0 before the first one, so
    /// that it is measured), or `None` when neither is set.
    pub fn schedule(
        &self,
        auto: bool,
        fixed: f64,
        count: u64,
        total: f64,
        covers: Covers,
    ) -> Option<f64> {
        if !auto {
            return (fixed > 0.0).then_some(fixed);
        }
        if count == 0 {
            return Some(0.0);
        }
        let cost = total / count as f64;
        match covers {
            Covers::All => self.checkpoint_interval(cost),
            Covers::GlobalOnly => self.flush_interval(cost),
        }
    }

    /// The optimal compute time between checkpoints that cost `cost` seconds, covering every
    /// failure of the job.
    pub fn checkpoint_interval(&self, cost: f64) -> Option<f64> {
        let m = self.mtbf?;
        Some(model::interval(self.formula, cost.max(1e-6), m))
    }

    /// The optimal time between flushes that cost `cost` seconds, covering the failures only
    /// the global tier recovers.
    pub fn flush_interval(&self, cost: f64) -> Option<f64> {
        let m = self.mtbf? / self.global_share.max(1e-9);
        Some(model::interval(self.formula, cost.max(1e-6), m))
    }

    /// Whether the run should stop now to leave `needed` seconds (a last checkpoint and its
    /// flush) plus the margin before the deadline, a halt file exists, or a stop signal came.
    /// `check_halt` is false on ranks that leave the halt-file check to others.
    pub fn exit_reason(&self, needed: f64, check_halt: bool) -> Option<String> {
        let arrived = self.signals_arrived();
        if !arrived.is_empty() {
            return Some(format!("{} arrived", arrived.join(" and ")));
        }
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now()).as_secs_f64();
            let margin = self.margin_now();
            if left < margin + needed {
                let rule = if margin < self.margin {
                    format!(" (a tenth of the job's {:.0} s)", self.span)
                } else {
                    String::new()
                };
                return Some(format!(
                    "{left:.1} s remain before the time limit, less than the {margin:.1} s margin{rule} plus {needed:.1} s for a last checkpoint and flush"
                ));
            }
        }
        if check_halt {
            if let Some(h) = self.halt_file.as_ref().filter(|h| h.exists()) {
                return Some(format!("the halt file {} exists", h.display()));
            }
        }
        None
    }
}

/// The job's end as Slurm knows it, learnt once per process: the deadline and the time the
/// job had left then, in seconds. `SLURM_JOB_END_TIME` when it is set (Slurm 23.02 and
/// later export it), else, inside a Slurm job (`SLURM_JOB_ID`), one `squeue` query. A query
/// that fails is reported once, and the job runs without a time limit.
fn slurm_end() -> Option<(Instant, f64)> {
    static END: OnceLock<Option<(Instant, f64)>> = OnceLock::new();
    *END.get_or_init(|| {
        let now = Instant::now();
        if let Ok(v) = std::env::var("SLURM_JOB_END_TIME") {
            match end_time_left(&v) {
                Some(left) => return Some((now + Duration::from_secs_f64(left), left)),
                None => warn!(
                    "cairn: ignoring SLURM_JOB_END_TIME={v:?}: not a Unix time in seconds"
                ),
            }
        }
        let job = std::env::var("SLURM_JOB_ID").ok()?;
        let job = job.trim();
        if job.is_empty() {
            return None;
        }
        // `now` was taken before the query: the deadline errs on the early side.
        match squeue_time_left(job, SLURM_QUERY_TIMEOUT) {
            Ok(Some(left)) => {
                info!("cairn: Slurm job {job} has {left:.0} s left");
                Some((now + Duration::from_secs_f64(left), left))
            }
            Ok(None) => None,
            Err(e) => {
                warn!("cairn: cannot learn the time limit of Slurm job {job}: {e}; running without a time limit (set [exit] time_limit to give one)");
                None
            }
        }
    })
}

/// Ask Slurm how long job `job` has left: `squeue -h -j <job> -o %L`, given at most
/// `timeout` (a hung slurmctld must not hang initialisation). `Ok(None)`: no time limit.
fn squeue_time_left(job: &str, timeout: Duration) -> std::result::Result<Option<f64>, String> {
    let what = format!("`squeue -h -j {job} -o %L`");
    let mut child = Command::new("squeue")
        .args(["-h", "-j", job, "-o", "%L"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what} could not be started: {e}"))?;
    let give_up = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < give_up => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{what} did not answer within {} s",
                    timeout.as_secs_f64()
                ));
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("cannot wait for {what}: {e}"));
            }
        }
    };
    // The output is one short line, well within a pipe's buffer, so it is all there.
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    if !status.success() {
        let err = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!("{what} failed ({status}): {}", err.trim()));
    }
    if out.trim().is_empty() {
        return Err(format!(
            "{what} printed nothing: the job is not in Slurm's queue"
        ));
    }
    parse_time_left(&out).map_err(|e| format!("{what} printed {:?}: {e}", out.trim()))
}

/// The time left that squeue's `%L` prints, in seconds: `[days-]hours:minutes:seconds` or
/// `minutes:seconds` (the first non-empty line counts). `UNLIMITED` and `NOT_SET` mean no
/// time limit (`Ok(None)`); `INVALID` (what squeue prints past the limit) and anything else
/// are errors.
pub fn parse_time_left(text: &str) -> std::result::Result<Option<f64>, String> {
    let s = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or("no time left in the output")?;
    match s {
        "UNLIMITED" | "NOT_SET" => return Ok(None),
        "INVALID" => return Err("Slurm gives no valid time left".into()),
        _ => {}
    }
    let bad = || format!("{s:?} is not [days-]hours:minutes:seconds or minutes:seconds");
    let num = |f: &str| -> std::result::Result<u64, String> {
        if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        f.parse().map_err(|_| bad())
    };
    let (days, clock) = match s.split_once('-') {
        Some((d, rest)) => (Some(num(d)?), rest),
        None => (None, s),
    };
    let fields = clock
        .split(':')
        .map(num)
        .collect::<std::result::Result<Vec<u64>, _>>()?;
    let (h, m, sec) = match (days, fields.as_slice()) {
        (_, &[h, m, sec]) => (h, m, sec),
        (None, &[m, sec]) => (0, m, sec),
        _ => return Err(bad()),
    };
    if m >= 60 || sec >= 60 || (days.is_some() && h >= 24) {
        return Err(bad());
    }
    Ok(Some(
        (((days.unwrap_or(0) * 24 + h) * 60 + m) * 60 + sec) as f64,
    ))
}

/// The seconds left until `SLURM_JOB_END_TIME` (Unix seconds), if it is one.
fn end_time_left(value: &str) -> Option<f64> {
    let end: u64 = value.trim().parse().ok()?;
    let unix_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some((end as f64 - unix_now).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_needs_an_mtbf() {
        let mut cfg = Config {
            seconds_auto: true,
            ..Config::default()
        };
        let e = Policy::new(&cfg, 4).unwrap_err().msg;
        assert!(e.contains("[failure] mtbf"), "{e}");
        cfg.node_mtbf = 4000.0;
        let p = Policy::new(&cfg, 4).unwrap();
        assert_eq!(p.mtbf, Some(1000.0), "node MTBF divided by the node count");
        let short = p.checkpoint_interval(1.0).unwrap();
        let long = p.checkpoint_interval(10.0).unwrap();
        assert!(short < long && long < 1000.0, "{short} {long}");
        assert!(
            p.flush_interval(10.0).unwrap() > long,
            "flushes cover rarer failures"
        );
    }

    #[test]
    fn time_limit_and_halt_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            global: dir.path().to_path_buf(),
            time_limit: 100.0,
            exit_margin: 10.0,
            ..Config::default()
        };
        let p = Policy::new(&cfg, 1).unwrap();
        assert_eq!(p.exit_reason(5.0, true), None);
        assert!(p.exit_reason(95.0, true).unwrap().contains("time limit"));
        std::fs::write(dir.path().join("cairn.halt"), b"").unwrap();
        assert!(p.exit_reason(0.0, true).unwrap().contains("cairn.halt"));
        assert_eq!(p.exit_reason(0.0, false), None);
    }

    #[test]
    fn slurm_end_time() {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let left = end_time_left(&(unix + 3600).to_string()).unwrap();
        assert!((3590.0..=3600.0).contains(&left), "{left}");
        assert_eq!(end_time_left(&(unix - 10).to_string()), Some(0.0), "past");
        assert_eq!(end_time_left("soon"), None);
        assert_eq!(end_time_left(""), None);
    }

    #[test]
    fn squeue_time_left_formats() {
        let ok = |s: &str| parse_time_left(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        assert_eq!(ok("0:00"), Some(0.0));
        assert_eq!(ok("1:59\n"), Some(119.0), "minutes:seconds");
        assert_eq!(ok("59:07"), Some(3547.0));
        assert_eq!(ok("1:00:00"), Some(3600.0), "hours:minutes:seconds");
        assert_eq!(ok("23:59:59"), Some(86399.0));
        assert_eq!(ok("2-03:04:05"), Some(2.0 * 86400.0 + 3.0 * 3600.0 + 245.0));
        assert_eq!(ok("1-00:00:00"), Some(86400.0));
        assert_eq!(ok("  \n 12:34 \n"), Some(754.0), "the first non-empty line");
        assert_eq!(ok("UNLIMITED"), None, "no time limit");
        assert_eq!(ok("NOT_SET"), None);
        for bad in [
            "",
            "\n \n",
            "INVALID",
            "12",
            "1:2:3:4",
            "1:60",
            "1:00:60",
            "1-5:00",
            "1-24:00:00",
            "-1:00",
            "1:-5",
            "+1:00",
            "a:bc",
            "1:00 extra",
            "2026-11-24T16:29:21",
            "99999999999:00",
        ] {
            let e = parse_time_left(bad).expect_err(bad);
            assert!(!e.is_empty(), "{bad:?}");
        }
        let e = parse_time_left("1:60").unwrap_err();
        assert!(
            e.contains("\"1:60\"") && e.contains("minutes:seconds"),
            "{e}"
        );
        assert!(parse_time_left("INVALID")
            .unwrap_err()
            .contains("no valid time left"));
    }

    #[test]
    fn the_margin_shrinks_for_short_jobs() {
        assert_eq!(
            effective_margin(60.0, 86400.0),
            60.0,
            "a day: the configured margin"
        );
        assert_eq!(
            effective_margin(60.0, 600.0),
            60.0,
            "ten minutes: still all of it"
        );
        assert_eq!(effective_margin(60.0, 300.0), 30.0, "five minutes: a tenth");
        assert_eq!(effective_margin(60.0, 120.0), 12.0, "sbatch --time=2");
        assert_eq!(effective_margin(60.0, 30.0), 3.0);
        assert_eq!(effective_margin(5.0, 120.0), 5.0, "a smaller margin stays");
        assert_eq!(effective_margin(60.0, 0.0), 0.0);

        // A 20 s time limit with the default 60 s margin: a step 1 s in does not stop, one
        // 18.5 s in (less than 2 s, a tenth, left) does.
        let cfg = Config {
            time_limit: 20.0,
            exit_margin: 60.0,
            halt_file: None,
            ..Config::default()
        };
        let mut p = Policy::new(&cfg, 1).unwrap();
        assert_eq!(p.margin_now(), 2.0);
        assert_eq!(
            p.exit_reason(0.5, true),
            None,
            "{:?}",
            p.exit_reason(0.5, true)
        );
        p.deadline = Some(Instant::now() + Duration::from_millis(1500));
        let r = p.exit_reason(0.0, true).expect("within the margin");
        assert!(
            r.contains("2.0 s margin (a tenth of the job's 20 s)"),
            "{r}"
        );
    }

    #[test]
    fn slurm_end_is_shared_by_rank_0() {
        // A configured time limit is every rank's own: nothing to share.
        let cfg = Config {
            time_limit: 100.0,
            ..Config::default()
        };
        let p = Policy::new(&cfg, 1).unwrap();
        assert_eq!(p.job_end_share(0), [i64::MIN; 2]);
        // Other ranks never look Slurm up; what rank 0 found (here: 2 minutes of a 2-minute
        // job) is taken as it comes out of the Max reduction.
        let mut p = Policy::new(&Config::default(), 1).unwrap();
        assert_eq!(p.job_end_share(3), [i64::MIN; 2]);
        p.set_job_end([i64::MIN; 2]);
        assert_eq!(p.deadline, None, "no end known: no limit");
        p.set_job_end([120_000, 120_000]);
        let left = p
            .deadline
            .unwrap()
            .duration_since(Instant::now())
            .as_secs_f64();
        assert!((119.0..=120.0).contains(&left), "{left}");
        assert_eq!(p.span, 120.0);
        assert_eq!(p.margin_now(), 12.0, "a tenth of 2 minutes, not 60 s");
    }

    #[test]
    fn the_last_checkpoint_is_due_until_one_follows_the_stop() {
        let mut p = Policy::new(&Config::default(), 1).unwrap();
        assert!(!p.last_checkpoint_due(4), "no stop yet");
        p.note_stop(4);
        p.note_stop(5);
        assert!(p.last_checkpoint_due(4), "due until a checkpoint follows");
        assert!(!p.last_checkpoint_due(5), "one followed");
        assert!(p.watches_stop(), "signals are on by default");
        let quiet = Policy::new(
            &Config {
                exit_signals: false,
                ..Config::default()
            },
            1,
        )
        .unwrap();
        assert!(!quiet.watches_stop(), "no signals, no time limit");
    }

    /// Run `test` (this module's test of that name) alone in a fresh copy of the test
    /// binary, with `CAIRN_POLICY_CHILD` set: real signals then reach a process of its own,
    /// not the other tests of this binary.
    fn in_child(test: &str) -> bool {
        if std::env::var_os("CAIRN_POLICY_CHILD").is_some() {
            return true;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([&format!("policy::tests::{test}"), "--exact", "--nocapture"])
            .args(["--test-threads", "1"])
            .env("CAIRN_POLICY_CHILD", "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{test} in a child process: {:?}\n{text}",
            out.status
        );
        false
    }

    fn default_action(sig: libc::c_int) -> bool {
        has_default_action(sig)
    }

    #[test]
    fn sigterm_is_taken_once_the_application_asks() {
        if !in_child("sigterm_is_taken_once_the_application_asks") {
            return;
        }
        let mut p = Policy::new(&Config::default(), 1).unwrap();
        assert!(!default_action(libc::SIGUSR1) && !default_action(libc::SIGUSR2));
        assert!(
            default_action(libc::SIGTERM),
            "SIGTERM keeps its default action until the application asks"
        );
        p.watch();
        assert!(!default_action(libc::SIGTERM));
        assert_eq!(p.exit_reason(0.0, false), None);
        // SAFETY: raise(3) with a signal this process now handles.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        assert_eq!(
            p.exit_reason(0.0, false).as_deref(),
            Some("SIGTERM arrived"),
            "the process lives on and is told to stop"
        );
        // SAFETY: as above.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
        assert_eq!(
            p.exit_reason(0.0, false).as_deref(),
            Some("SIGTERM and SIGUSR2 arrived")
        );
        // A policy begun afterwards counts only what arrives later.
        let later = Policy::new(&Config::default(), 1).unwrap();
        assert_eq!(later.exit_reason(0.0, false), None);
        // With [exit] signals off, arrivals are not a reason to stop.
        let off = Policy::new(
            &Config {
                exit_signals: false,
                ..Config::default()
            },
            1,
        )
        .unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
        assert_eq!(off.exit_reason(0.0, false), None);
        assert_eq!(
            later.exit_reason(0.0, false).as_deref(),
            Some("SIGUSR1 arrived")
        );
    }

    static APP_SAW: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn app_handler(_: libc::c_int) {
        APP_SAW.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn a_signal_the_application_handles_is_left_to_it() {
        if !in_child("a_signal_the_application_handles_is_left_to_it") {
            return;
        }
        let handler: extern "C" fn(libc::c_int) = app_handler;
        // SAFETY: the handler only increments an atomic counter.
        let prev = unsafe { libc::signal(libc::SIGUSR1, handler as libc::sighandler_t) };
        assert_ne!(prev, libc::SIG_ERR);
        let p = Policy::new(&Config::default(), 1).unwrap();
        // SAFETY: raise(3) with a signal that has a handler.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
        assert_eq!(
            APP_SAW.load(Ordering::Relaxed),
            1,
            "the application's handler ran"
        );
        assert_eq!(
            p.exit_reason(0.0, false),
            None,
            "and Cairn did not take SIGUSR1"
        );
    }
}
