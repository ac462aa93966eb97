//! The job directory `<dir>/<job>/`: job ids, the per-job token, and the coordinator file
//! `coord` through which clients find the running root (`docs/coordinator.md`).

use crate::error::{bail, Error, ErrorKind, Result};
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

/// The coordinator file's name inside a job directory.
pub const COORD_FILE: &str = "coord";

/// A job's secret: 128 random bits. Every HELLO, SUBCOORD and CLIENT line carries it in hex.
/// There is deliberately no `PartialEq`: presented tokens are checked with
/// [`Token::matches`], which takes the same time whatever the mismatch.
#[derive(Clone)]
pub struct Token([u8; 16]);

impl Token {
    /// A fresh token from the kernel's random source (getrandom(2)).
    pub fn random() -> Result<Token> {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b)
            .map_err(|e| Error::new(ErrorKind::Io, format!("no random bytes for a token: {e}")))?;
        Ok(Token(b))
    }

    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(s: &str) -> Result<Token> {
        let s = s.trim();
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(Protocol, "a token is 32 hexadecimal digits");
        }
        let mut b = [0u8; 16];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("checked hex");
        }
        Ok(Token(b))
    }

    /// Whether `presented` is this token in hex (either case). The comparison (`subtle`'s
    /// constant-time equality) looks at every byte whatever differs, so its time says nothing
    /// about how much of a guess was right; only the length (public: always 32) ends it early.
    pub fn matches(&self, presented: &str) -> bool {
        let want = self.hex();
        let got: Vec<u8> = presented.bytes().map(|b| b.to_ascii_lowercase()).collect();
        want.as_bytes().ct_eq(&got).into()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Job ids become directory names: 1 to 64 characters of `[A-Za-z0-9._-]`, not starting
/// with `.` or `-`.
pub fn check_job_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with(['.', '-'])
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        bail!(
            Usage,
            "bad job id {id:?}: use 1 to 64 letters, digits, '.', '_' or '-', not starting \
             with '.' or '-'"
        );
    }
    Ok(())
}

/// A new job id: the UTC time and 16 random bits, e.g. `20250314-093012-8f3a`.
pub fn new_job_id() -> Result<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (y, m, d, h, mi, s) = cairn_core::clock::utc_parts(now as i64);
    let rnd = &Token::random()?.hex()[..4];
    Ok(format!("{y:04}{m:02}{d:02}-{h:02}{mi:02}{s:02}-{rnd}"))
}

/// Creates `path` (and missing parents) as a private directory (0700). An existing one must
/// be a directory, not a symbolic link, and is made private.
pub fn create_private_dir(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            bail!(
                Usage,
                "{} is a symbolic link; refusing to use it",
                path.display()
            )
        }
        Ok(m) if !m.is_dir() => bail!(Usage, "{} is not a directory", path.display()),
        Ok(m) => {
            if m.permissions().mode() & 0o777 != 0o700 {
                fs::set_permissions(path, fs::Permissions::from_mode(0o700))
                    .map_err(|e| Error::io(format_args!("make {} private", path.display()), e))?;
            }
            Ok(())
        }
        Err(_) => DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|e| Error::io(format_args!("create {}", path.display()), e)),
    }
}

/// Writes `dir/name` (mode 0600) atomically: `dir/.name.tmp`, fsync, rename. The caller
/// fsyncs `dir` when the rename itself must survive a crash.
pub fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let ctx = |e| Error::io(format_args!("write {}", tmp.display()), e);
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(ctx)?;
    f.write_all(bytes).map_err(ctx)?;
    f.sync_all().map_err(ctx)?;
    drop(f);
    fs::rename(&tmp, dir.join(name)).map_err(ctx)
}

/// The error for "no job under `dir` that `is`" (e.g. `is running`), naming the jobs there.
pub fn no_such_job(dir: &Path, jobs: &[(String, PathBuf)], is: &str) -> Error {
    if jobs.is_empty() {
        return Error::new(ErrorKind::NotFound, format!("no job in {}", dir.display()));
    }
    let names: Vec<&str> = jobs.iter().map(|(n, _)| n.as_str()).collect();
    Error::new(
        ErrorKind::NotFound,
        format!(
            "no job in {} {is} (jobs there: {})",
            dir.display(),
            names.join(", ")
        ),
    )
}

/// Where the running root of a job listens, with its token and pid.
#[derive(Debug, Clone)]
pub struct CoordInfo {
    pub job: String,
    pub addr: SocketAddr,
    pub token: Token,
    pub pid: u32,
}

impl CoordInfo {
    /// Writes `<job_dir>/coord` (mode 0600) atomically: a temporary file, fsync, rename.
    pub fn write(&self, job_dir: &Path) -> Result<()> {
        let text = format!(
            "# the root coordinator of a running Cairn job (docs/coordinator.md)\n\
             job={}\naddr={}\ntoken={}\npid={}\n",
            self.job,
            self.addr,
            self.token.hex(),
            self.pid
        );
        write_private(job_dir, COORD_FILE, text.as_bytes())
    }

    pub fn read(job_dir: &Path) -> Result<CoordInfo> {
        let path = job_dir.join(COORD_FILE);
        let text = fs::read_to_string(&path).map_err(|e| {
            let kind = if e.kind() == std::io::ErrorKind::NotFound {
                ErrorKind::NotFound
            } else {
                ErrorKind::Io
            };
            Error::new(
                kind,
                format!(
                    "no running coordinator: cannot read {}: {e}",
                    path.display()
                ),
            )
        })?;
        let bad = |what: &str| {
            Error::new(
                ErrorKind::Protocol,
                format!("{}: bad or missing {what}", path.display()),
            )
        };
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .map(str::trim)
        };
        Ok(CoordInfo {
            job: get("job").ok_or_else(|| bad("job"))?.to_string(),
            addr: get("addr")
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| bad("addr"))?,
            token: get("token")
                .and_then(|t| Token::from_hex(t).ok())
                .ok_or_else(|| bad("token"))?,
            pid: get("pid")
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| bad("pid"))?,
        })
    }

    /// Whether the root this file names still runs: its pid exists and its address accepts
    /// a connection. A file left by a root that was killed is stale.
    pub fn is_live(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists()
            && TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).is_ok()
    }
}

/// The job directories under `dir`, by name.
pub fn job_dirs(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let rd = fs::read_dir(dir).map_err(|e| Error::io(format_args!("read {}", dir.display()), e))?;
    let mut out: Vec<_> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            check_job_id(&name).ok()?;
            Some((name, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The running job a client talks to: `job` if given, else the one job under `dir` with a
/// coordinator file (the newest such file if there are several).
pub fn find_running_job(dir: &Path, job: Option<&str>) -> Result<(String, PathBuf)> {
    if let Some(j) = job {
        check_job_id(j)?;
        let p = dir.join(j);
        if !p.is_dir() {
            bail!(NotFound, "no job {j} in {}", dir.display());
        }
        return Ok((j.to_string(), p));
    }
    let jobs = job_dirs(dir)?;
    let newest = jobs
        .iter()
        .filter_map(|(n, p)| {
            let m = fs::metadata(p.join(COORD_FILE)).ok()?.modified().ok()?;
            Some((m, n, p))
        })
        .max();
    match newest {
        Some((_, n, p)) => Ok((n.clone(), p.clone())),
        None => Err(no_such_job(dir, &jobs, "is running")),
    }
}

/// The host name (as the kernel has it).
pub fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn tokens_are_random_hex_and_compare_exactly() {
        let a = Token::random().unwrap();
        let b = Token::random().unwrap();
        assert_eq!(a.hex().len(), 32);
        assert_ne!(a.hex(), b.hex());
        assert!(a.matches(&a.hex()));
        assert!(a.matches(&a.hex().to_uppercase()));
        assert!(!a.matches(&b.hex()));
        assert!(!a.matches(&a.hex()[..31]));
        assert!(!a.matches(""));
        let mut one_off = a.hex().into_bytes();
        one_off[31] = if one_off[31] == b'0' { b'1' } else { b'0' };
        assert!(!a.matches(std::str::from_utf8(&one_off).unwrap()));
        assert!(Token::from_hex(&a.hex()).unwrap().matches(&a.hex()));
        assert!(Token::from_hex("xyz").is_err());
    }

    #[test]
    fn job_ids() {
        let id = new_job_id().unwrap();
        check_job_id(&id).unwrap();
        assert_eq!(id.len(), "20250314-093012-8f3a".len(), "{id}");
        for bad in ["", ".x", "-x", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_job_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn coord_file_is_private_and_round_trips() {
        let t = tempfile::tempdir().unwrap();
        let job = t.path().join("imgs/j1");
        create_private_dir(&job).unwrap();
        assert_eq!(fs::metadata(&job).unwrap().mode() & 0o777, 0o700);
        let info = CoordInfo {
            job: "j1".into(),
            addr: "127.0.0.1:4242".parse().unwrap(),
            token: Token::random().unwrap(),
            pid: 77,
        };
        info.write(&job).unwrap();
        info.write(&job).unwrap(); // replaces
        let m = fs::metadata(job.join(COORD_FILE)).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        let back = CoordInfo::read(&job).unwrap();
        assert_eq!(back.addr, info.addr);
        assert_eq!(back.pid, 77);
        assert!(back.token.matches(&info.token.hex()));
        let (name, _) = find_running_job(&t.path().join("imgs"), None).unwrap();
        assert_eq!(name, "j1");
        // A file of a root that is gone is stale.
        assert!(!back.is_live());
        // A symbolic link is refused.
        std::os::unix::fs::symlink(&job, t.path().join("link")).unwrap();
        assert!(create_private_dir(&t.path().join("link")).is_err());
        let e = find_running_job(t.path(), None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}
