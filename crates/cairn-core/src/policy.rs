//! When to checkpoint, when to flush, and when to stop: the inputs of `need_checkpoint`,
//! the flush schedule and `should_exit` that are not the engine's own measurements.
//!
//! - The job's MTBF, from `[failure] mtbf` or `node_mtbf` divided by the node count, and the
//!   optimal intervals the failure model ([`crate::model`]) gives for a measured cost.
//! - The job's end: `[exit] time_limit` counted from initialisation, else Slurm's
//!   `SLURM_JOB_END_TIME` (a Unix time the batch system sets for the job).
//! - The halt file, and SIGTERM / SIGUSR1 when `[exit] signals` is on. The handlers only
//!   set a flag; the application sees it at its next `should_exit`.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::{self, Formula};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Set by the SIGTERM / SIGUSR1 handlers once installed.
fn signal_flag() -> &'static Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Install the SIGTERM and SIGUSR1 handlers (once per process).
fn install_signal_handlers() -> Result<()> {
    static INSTALLED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGUSR1] {
                signal_hook::flag::register(sig, signal_flag().clone())
                    .map_err(|e| format!("cannot install a handler for signal {sig}: {e}"))?;
            }
            Ok(())
        })
        .clone()
        .map_err(Error::config)
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
    pub margin: f64,
    pub halt_file: Option<PathBuf>,
    pub signals: bool,
}

impl Policy {
    /// Resolve the policy for a job of `nodes` nodes. Fails when an `auto` interval has no
    /// MTBF to work from, or a signal handler cannot be installed.
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
        let now = Instant::now();
        let deadline = if cfg.time_limit > 0.0 {
            Some(now + Duration::from_secs_f64(cfg.time_limit))
        } else {
            slurm_end(std::env::var("SLURM_JOB_END_TIME").ok().as_deref(), now)
        };
        let halt_file = match &cfg.halt_file {
            None => None,
            Some(p) if p.as_os_str().is_empty() => Some(cfg.global.join("cairn.halt")),
            Some(p) => Some(p.clone()),
        };
        if cfg.exit_signals {
            install_signal_handlers()?;
        }
        Ok(Policy {
            mtbf,
            formula,
            global_share: cfg.global_share,
            deadline,
            margin: cfg.exit_margin,
            halt_file,
            signals: cfg.exit_signals,
        })
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
    /// flush) plus the margin before the deadline, a halt file exists, or a signal came.
    /// `check_halt` is false on ranks that leave the halt-file check to others.
    pub fn exit_reason(&self, needed: f64, check_halt: bool) -> Option<String> {
        if self.signals && signal_flag().load(Ordering::Relaxed) {
            return Some("a SIGTERM or SIGUSR1 arrived".into());
        }
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now()).as_secs_f64();
            if left < self.margin + needed {
                return Some(format!(
                    "{left:.0} s remain before the time limit, less than the {:.0} s margin plus {needed:.1} s for a last checkpoint and flush",
                    self.margin
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

/// The deadline from `SLURM_JOB_END_TIME` (Unix seconds), if set and sensible.
fn slurm_end(value: Option<&str>, now: Instant) -> Option<Instant> {
    let end: u64 = value?.trim().parse().ok()?;
    let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(now + Duration::from_secs(end.saturating_sub(unix_now)))
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
        let now = Instant::now();
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let d = slurm_end(Some(&(unix + 3600).to_string()), now).unwrap();
        let secs = d.duration_since(now).as_secs();
        assert!((3590..=3600).contains(&secs), "{secs}");
        assert_eq!(slurm_end(Some("soon"), now), None);
        assert_eq!(slurm_end(None, now), None);
    }
}
