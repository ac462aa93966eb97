//! Connecting with staggered exponential back-off, and binding listeners.
//!
//! Thousands of processes started together would otherwise all connect in the same
//! millisecond: DMTCP saw processes killed at 16K clients until it staggered them (seeds/003,
//! section 3.3). Every connection to a coordinator (from a process, a sub-coordinator or a
//! client) follows [`Backoff`]; the checkpoint library in `native/ckpt` does the same.

use crate::error::{Error, ErrorKind, Result};
use crate::proto;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long a connection is retried before giving up.
pub const CONNECT_LIMIT: Duration = Duration::from_secs(30);
/// The longest wait between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(1);
/// How many different initial delays there are (index modulo this, in milliseconds).
pub const STAGGER: u64 = 64;

/// The waits of one connection's attempts: before the first attempt `(index mod 64)` ms (so
/// starts are spread over 64 ms); before attempt k ≥ 1, `(index mod 64 + 1) ms × 2^k`, capped at
/// [`MAX_DELAY`]. The iterator ends when the next wait would take the total past the limit
/// ([`CONNECT_LIMIT`] by default).
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    attempt: u32,
    total: Duration,
    limit: Duration,
}

impl Backoff {
    pub fn new(index: u64) -> Backoff {
        Backoff::with_limit(index, CONNECT_LIMIT)
    }

    pub fn with_limit(index: u64, limit: Duration) -> Backoff {
        Backoff {
            base: Duration::from_millis(index % STAGGER + 1),
            attempt: 0,
            total: Duration::ZERO,
            limit,
        }
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = if self.attempt == 0 {
            self.base - Duration::from_millis(1)
        } else {
            self.base
                .checked_mul(1u32 << self.attempt.min(20))
                .unwrap_or(MAX_DELAY)
                .min(MAX_DELAY)
        };
        if self.total + d > self.limit {
            return None;
        }
        self.attempt += 1;
        self.total += d;
        Some(d)
    }
}

/// Connects to `addr` (`host:port`), waiting as [`Backoff`] says between attempts, and sets
/// up the stream ([`proto::setup`]). `index` is the process or node index that staggers the
/// attempts.
pub fn connect(addr: &str, index: u64) -> Result<TcpStream> {
    connect_within(addr, index, CONNECT_LIMIT)
}

/// [`connect`] with another total limit.
pub fn connect_within(addr: &str, index: u64, limit: Duration) -> Result<TcpStream> {
    let start = Instant::now();
    let mut attempts = 0;
    let mut last: Option<std::io::Error> = None;
    for delay in Backoff::with_limit(index, limit) {
        std::thread::sleep(delay);
        attempts += 1;
        let target = match addr.to_socket_addrs() {
            Ok(mut it) => it.next(),
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        let Some(target) = target else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{addr} names no address"),
            ));
        };
        match TcpStream::connect_timeout(&target, MAX_DELAY * 5) {
            Ok(s) => {
                proto::setup(&s)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(Error::new(
        ErrorKind::Timeout,
        format!(
            "cannot connect to {addr}: {attempts} attempts in {:.1} s, the last: {}",
            start.elapsed().as_secs_f64(),
            last.map(|e| e.to_string())
                .unwrap_or_else(|| "none made".into())
        ),
    ))
}

/// Binds a listener on `ip` at any free port.
pub fn listen(ip: IpAddr) -> Result<TcpListener> {
    listen_at(SocketAddr::new(ip, 0))
}

pub fn listen_at(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| Error::io(format_args!("listen on {addr}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_staggers_doubles_caps_and_stops() {
        let d: Vec<_> = Backoff::new(5).take(6).collect();
        let ms = |x: u64| Duration::from_millis(x);
        assert_eq!(d, [ms(5), ms(12), ms(24), ms(48), ms(96), ms(192)]);
        // Index 0 tries at once; indices are taken modulo 64.
        assert_eq!(Backoff::new(0).next(), Some(ms(0)));
        assert_eq!(Backoff::new(64 + 3).next(), Some(ms(3)));
        let all: Vec<_> = Backoff::new(63).collect();
        assert!(all.iter().all(|&x| x <= MAX_DELAY));
        assert_eq!(*all.last().unwrap(), MAX_DELAY);
        let total: Duration = all.iter().sum();
        assert!(
            total <= CONNECT_LIMIT && total > CONNECT_LIMIT - MAX_DELAY,
            "{total:?}"
        );
        // About 30 attempts in 30 s, not thousands.
        assert!(all.len() < 40, "{}", all.len());
    }

    #[test]
    fn connect_gives_up_with_the_last_error() {
        // A port nobody listens on: bind, note it, close.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t = Instant::now();
        let e = connect_within(&format!("127.0.0.1:{port}"), 0, ms(200)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.message().contains("refused"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }
}
