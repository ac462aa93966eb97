//! Authenticated checkpoints (`[security] authenticate`): the user's key, and whether this
//! process writes and demands authenticated checkpoints.
//!
//! The key is 32 random bytes in a file only its owner may read (`[security] key_file`,
//! `~/.config/cairn/key` by default), written as 64 hex digits on first use. Rank 0 of a job
//! reads it (or creates it) and hands it to the other ranks, so nodes without the home
//! directory still agree. Once a process turns authentication on, every rank file and
//! manifest it writes carries the key's MACs and keyed block hashes
//! (`cairn_format::auth`), and every one it reads must carry them: one written without the
//! key (forged, another user's, or from before authentication was turned on) is refused
//! with an error naming it.
//!
//! It is a process-wide state because a process belongs to one user: every engine in it
//! uses the same key, and a second key is an error.

use crate::error::{Error, ErrorKind, Result};
use cairn_format::{AuthKey, Manifest};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

struct State {
    key: AuthKey,
    raw: [u8; 32],
    path: PathBuf,
}

static STATE: RwLock<Option<State>> = RwLock::new(None);

/// The key this process authenticates checkpoints with, if it does.
pub fn key() -> Option<AuthKey> {
    let s = STATE.read().unwrap_or_else(|p| p.into_inner());
    s.as_ref().map(|s| s.key.clone())
}

/// Authenticate every checkpoint this process writes and reads from now on, with `raw`
/// (read from `path`). Enabling it again with the same key is a no-op; another key is an
/// error.
pub fn enable(path: &Path, raw: [u8; 32]) -> Result<()> {
    let mut s = STATE.write().unwrap_or_else(|p| p.into_inner());
    match &*s {
        Some(st) if st.raw == raw => Ok(()),
        Some(st) => Err(Error::config(format!(
            "[security] key_file {} holds another key than {}, which this process already \
             authenticates with: one key per process",
            path.display(),
            st.path.display()
        ))),
        None => {
            *s = Some(State {
                key: AuthKey::new(&raw),
                raw,
                path: path.to_path_buf(),
            });
            Ok(())
        }
    }
}

/// Turn authentication on as `cfg` says, for a process that reads and repairs checkpoints
/// but does not run a job (the `cairn` command): the key must exist already.
pub fn enable_for_tools(cfg: &crate::Config) -> Result<()> {
    if !cfg.authenticate {
        return Ok(());
    }
    let path = key_path(cfg)?;
    let raw = read_key(&path).map_err(|e| match e.kind {
        ErrorKind::NotFound => key_error(
            &path,
            "does not exist (the first job that writes authenticated checkpoints creates it)",
        ),
        _ => e,
    })?;
    enable(&path, raw)
}

/// Turn authentication on as `cfg` says, for a process that writes checkpoints' records
/// outside an engine (`cairn launch`, `cairn restart`): the key is created when missing, as
/// a job's first rank does.
pub fn enable_creating(cfg: &crate::Config) -> Result<()> {
    if !cfg.authenticate {
        return Ok(());
    }
    let path = key_path(cfg)?;
    let raw = load_or_create(&path)?;
    enable(&path, raw)
}

fn key_path(cfg: &crate::Config) -> Result<PathBuf> {
    match &cfg.key_file {
        Some(p) => Ok(p.clone()),
        None => default_key_file(),
    }
}

/// What a launch manifest's MAC covers: its exact bytes, after a tag of its own, so it can
/// never pass for an engine manifest's.
pub fn launch_manifest_mac_input(text: &[u8]) -> Vec<u8> {
    let mut v = b"cairn launch manifest\n".to_vec();
    v.extend_from_slice(text);
    v
}

/// Where the key lives by default: `$XDG_CONFIG_HOME/cairn/key`, else
/// `$HOME/.config/cairn/key`.
pub fn default_key_file() -> Result<PathBuf> {
    let abs = |v: &str| {
        std::env::var_os(v)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(x) = abs("XDG_CONFIG_HOME") {
        return Ok(x.join("cairn/key"));
    }
    match abs("HOME") {
        Some(h) => Ok(h.join(".config/cairn/key")),
        None => Err(Error::config(
            "[security] authenticate is on, but neither XDG_CONFIG_HOME nor HOME names a \
             directory for the key: set [security] key_file",
        )),
    }
}

fn key_error(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("[security] key_file {}: {why}", path.display()),
    )
}

/// Read the key at `path`, creating it first (32 random bytes from the kernel, mode 0600,
/// its directory 0700) when there is none. A key file must be a regular file (not a
/// symlink) owned by this user that nobody else may read or write.
pub fn load_or_create(path: &Path) -> Result<[u8; 32]> {
    match read_key(path) {
        Err(e) if e.kind == ErrorKind::NotFound => {}
        other => return other,
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| key_error(path, format!("cannot create its directory: {e}")))?;
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw)
        .map_err(|e| key_error(path, format!("no random bytes for a new key: {e}")))?;
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    // Written whole under a private name, then linked into place: link never replaces, so
    // of two processes creating it at once one wins and both read its key.
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let written = (|| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(format!("{hex}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    match written {
        Ok(()) => {
            tracing::warn!(
                "cairn: created the key authenticated checkpoints are written with: {} (keep \
                 it; without it they cannot be restored)",
                path.display()
            );
            Ok(raw)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(path),
        Err(e) => Err(key_error(path, format!("cannot create it: {e}"))),
    }
}

/// Read and check an existing key file: `NotFound` when there is none.
fn read_key(path: &Path) -> Result<[u8; 32]> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::new(ErrorKind::NotFound, "no key file"))
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(key_error(path, "is a symbolic link; refused"))
        }
        Err(e) => return Err(key_error(path, format!("cannot open it: {e}"))),
    };
    let md = f
        .metadata()
        .map_err(|e| key_error(path, format!("cannot stat it: {e}")))?;
    let me = rustix::process::geteuid().as_raw();
    if !md.is_file() {
        return Err(key_error(path, "is not a regular file"));
    }
    if md.uid() != me {
        return Err(key_error(
            path,
            format!("belongs to uid {}, not to this user ({me})", md.uid()),
        ));
    }
    if md.mode() & 0o077 != 0 {
        return Err(key_error(
            path,
            format!(
                "others may read or change it (mode {:o}); make it private: chmod 600 {}",
                md.mode() & 0o777,
                path.display()
            ),
        ));
    }
    let mut text = String::new();
    f.take(256)
        .read_to_string(&mut text)
        .map_err(|e| key_error(path, format!("cannot read it: {e}")))?;
    let hex = text.trim();
    let bytes: Option<Vec<u8>> = (hex.len() == 64)
        .then(|| {
            (0..32)
                .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
                .collect()
        })
        .flatten();
    match bytes {
        Some(b) => Ok(b.try_into().expect("32 bytes")),
        None => Err(key_error(
            path,
            "does not hold a key (64 hex digits, as Cairn writes it)",
        )),
    }
}

/// A manifest as stored, with this process's MAC when it authenticates.
pub fn encode_manifest(m: &Manifest) -> Vec<u8> {
    m.encode_with(key().as_ref())
}

/// Whether a manifest read from `at()` (which carried `mac`) may be believed: always when
/// this process does not authenticate (its rank files still need the key if they were
/// written with one), else only with this key's MAC.
pub fn check_manifest(m: &Manifest, mac: Option<&str>, at: impl Fn() -> String) -> Result<()> {
    let Some(k) = key() else {
        return Ok(());
    };
    match mac {
        Some(mac) if m.mac_ok(&k, mac) => Ok(()),
        Some(_) => Err(refused(
            format!("manifest {}", at()),
            "its MAC does not match",
        )),
        None => Err(refused(format!("manifest {}", at()), "it carries no MAC")),
    }
}

/// The error for a stored object that is not authenticated by this process's key.
pub fn refused(what: impl std::fmt::Display, why: &str) -> Error {
    Error::new(
        ErrorKind::Corrupt,
        format!(
            "{what} fails authentication: {why}; it was not written with this user's key \
             ([security] key_file), so it may be forged and is refused"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_is_created_private_then_read_back_and_loose_ones_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("conf/cairn/key");
        let k = load_or_create(&path).unwrap();
        assert_eq!(load_or_create(&path).unwrap(), k);
        let md = std::fs::metadata(&path).unwrap();
        assert_eq!(md.mode() & 0o777, 0o600);
        let dir = std::fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!(dir.mode() & 0o777, 0o700);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create(&path).unwrap_err();
        assert!(e.msg.contains("chmod 600") && e.msg.contains("644"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "not a key\n").unwrap();
        let e = load_or_create(&path).unwrap_err();
        assert!(e.msg.contains("64 hex digits"), "{e}");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = load_or_create(&link).unwrap_err();
        assert!(e.msg.contains("symbolic link"), "{e}");
    }
}
