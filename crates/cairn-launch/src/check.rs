//! What a sub-coordinator checks of its own node's images, on its own host, before it
//! answers for them: the images its processes reported written (each a regular file of the
//! length its process reported; every descriptor a tree shares held at both ends within the
//! tree), and the images a restart restored (put in their manifest's order, copies cut to
//! their length, and taken on a machine this one can run). The root sees none of these
//! files: on a cluster it could not.

use crate::error::{bail, Error, ErrorKind, Result};
use crate::images::RestoredImage;
use crate::manifest::ProcImage;
use std::path::Path;

/// A connection of a tree's process to another host ([`cairn_ckpt::XFD_REMOTE`]): the root
/// looks for its other end among every node's.
#[derive(Debug, Clone, PartialEq)]
pub struct Remote {
    /// Who holds it ("proc 3 (pid 812)"), and at which descriptor.
    pub who: String,
    pub end: cairn_ckpt::RemoteEnd,
}

/// Checks the images of one tree (`p`: the sizes its processes reported) in `dir`, the
/// node's staging directory of the checkpoint, and returns its connections to other hosts.
pub fn written(dir: &Path, p: &ProcImage) -> Result<Vec<Remote>, String> {
    for f in p.files() {
        let path = dir.join(&f.name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() && m.len() == f.bytes => {}
            Ok(m) if m.is_file() => {
                return Err(format!(
                    "{} reported its image written ({} bytes), but {} holds {}",
                    f.who,
                    f.bytes,
                    path.display(),
                    m.len()
                ))
            }
            _ => {
                return Err(format!(
                    "{} reported its image written, but {} is not there",
                    f.who,
                    path.display()
                ))
            }
        }
    }
    let mut all: Vec<(String, cairn_ckpt::Xfd)> = Vec::new();
    let mut remote: Vec<Remote> = Vec::new();
    for f in p.files() {
        // Only images of the checkpoint library record them (another preload library's
        // images, e.g. the coordinators' tests', are its own business).
        let path = dir.join(&f.name);
        if !cairn_ckpt::is_image(&path) {
            continue;
        }
        let (xfds, ends) =
            cairn_ckpt::read_descriptors(&path).map_err(|e| format!("{}: {e}", f.who))?;
        all.extend(xfds.into_iter().map(|x| (f.who.clone(), x)));
        remote.extend(ends.into_iter().map(|end| Remote {
            who: f.who.clone(),
            end,
        }));
    }
    shared_descriptors(&all, p.proc)?;
    one_holder(&remote)?;
    Ok(remote)
}

/// A connection to another host held by two processes of the tree cannot come back (each
/// would connect again on its own): the checkpoint fails naming it.
fn one_holder(remote: &[Remote]) -> Result<(), String> {
    for (k, r) in remote.iter().enumerate() {
        if let Some(other) = remote[..k]
            .iter()
            .find(|o| o.end.ino == r.end.ino && o.who != r.who)
        {
            return Err(format!(
                "{} (fd {}) and {} (fd {}) share a TCP connection to another host ({} to {}); a \
                 connection to another host comes back only when one process holds it",
                other.who, other.end.fd, r.who, r.end.fd, r.end.local, r.end.peer
            ));
        }
    }
    Ok(())
}

/// Every pipe and Unix stream socket a process of tree `proc` recorded (`all`, with who holds
/// it) must have its other end in the same tree, where the restart makes it again;
/// otherwise the checkpoint fails naming it, unless the process chose
/// `CAIRN_CKPT_EXTERNAL=close` or it is a standard stream (the restart gives its own).
fn shared_descriptors(all: &[(String, cairn_ckpt::Xfd)], proc: usize) -> Result<(), String> {
    use cairn_ckpt::{
        Xfd, XFD_CLOSE_UNMATCHED, XFD_ENDED, XFD_EVENT, XFD_FILE, XFD_LISTEN, XFD_PIPE_READ,
        XFD_PIPE_WRITE, XFD_PTM, XFD_PTS, XFD_REMOTE, XFD_SHM, XFD_STDIO, XFD_STREAM, XFD_TCP,
        XFD_UDP,
    };
    let has = |kind_of: &dyn Fn(&Xfd) -> bool| all.iter().any(|(_, x)| kind_of(x));
    let mut outside = Vec::new();
    for (who, x) in all {
        // Files are reopened by path, eventfds made with their count, listeners bound again
        // and terminal masters made with a new slave, and a pipe end whose other end nobody
        // held comes back with it closed; the ends of pipes and connections, and terminal
        // slaves, need their other end.
        // Connections to other hosts are matched by the root, across the job. A descriptor of
        // shared memory comes back with the mappings the process itself saved.
        if matches!(
            x.kind,
            XFD_FILE | XFD_EVENT | XFD_LISTEN | XFD_PTM | XFD_REMOTE | XFD_SHM
        ) || x.how & (XFD_CLOSE_UNMATCHED | XFD_STDIO | XFD_ENDED) != 0
        {
            continue;
        }
        // An unconnected UDP socket is bound again, as a listener is.
        if x.kind == XFD_UDP && x.size == 0 {
            continue;
        }
        let (what, matched) = if x.kind == XFD_UDP {
            (
                format!(
                    "a UDP socket (socket:[{}]) connected to socket:[{}]",
                    x.ino, x.peer
                ),
                has(&|y: &Xfd| y.kind == XFD_UDP && y.ino == x.peer),
            )
        } else if x.kind == XFD_PTS {
            (
                format!("a pseudo-terminal (/dev/pts/{})", x.ino.saturating_sub(1)),
                has(&|y: &Xfd| y.kind == XFD_PTM && y.ino == x.ino),
            )
        } else if x.kind == XFD_STREAM || x.kind == XFD_TCP {
            let kind = x.kind;
            (
                format!(
                    "{} (socket:[{}])",
                    if kind == XFD_TCP {
                        "a TCP connection"
                    } else {
                        "a connected Unix socket"
                    },
                    x.ino
                ),
                has(&|y: &Xfd| y.kind == kind && y.ino == x.peer),
            )
        } else {
            let write = x.kind == XFD_PIPE_WRITE;
            (
                format!(
                    "the {} end of a pipe (pipe:[{}])",
                    if write { "write" } else { "read" },
                    x.ino
                ),
                has(&|y: &Xfd| {
                    matches!(y.kind, XFD_PIPE_READ | XFD_PIPE_WRITE)
                        && y.ino == x.ino
                        && (y.kind == XFD_PIPE_WRITE) != write
                }),
            )
        };
        if !matched {
            outside.push(format!(
                "{who}: fd {} is {what} whose other end is not held by a process of its tree",
                x.fd
            ));
        }
    }
    if outside.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} (no process of proc {}'s tree holds the other end; with CAIRN_CKPT_EXTERNAL=close \
         in the job's environment it comes back closed instead)",
        outside.join("; "),
        proc
    ))
}

/// Puts the restored images of one process's tree (`tree`) in the order of its manifest
/// entry `p` (its own first) and cuts each copied one to its image's length (checkpoints of
/// earlier releases padded their regions with zeros). An image the manifest names that the
/// engine did not restore, or the other way round, is an error naming it. Returns the tree
/// and whether its process ran in a pid namespace of Cairn's (restarted in a new one).
pub fn restored(
    version: u64,
    p: &ProcImage,
    mut tree: Vec<RestoredImage>,
    here: &cairn_ckpt::Machine,
) -> Result<(Vec<RestoredImage>, bool)> {
    let mut ordered = Vec::with_capacity(tree.len());
    for f in p.files() {
        let Some(at) = tree.iter().position(|r| r.id == f.id) else {
            bail!(
                Engine,
                "version {version}: the engine holds no image of {}",
                f.who
            );
        };
        let img = tree.swap_remove(at);
        if !img.in_place {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&img.path)
                .and_then(|file| file.set_len(f.bytes))
                .map_err(|e| Error::io(format_args!("cut {}", img.path.display()), e))?;
        }
        ordered.push(img);
    }
    if let Some(extra) = tree.first() {
        bail!(
            Engine,
            "version {version}: the engine holds an image (region {}) of proc {} that its \
             manifest does not name",
            extra.id,
            p.proc
        );
    }
    let namespaced = fits(&ordered[0].path, version, p.proc, here)?;
    Ok((ordered, namespaced))
}

/// Refuses, before any process starts, an image that cannot run here: taken on another
/// kernel build or on a CPU with a feature this one lacks (the restorer would refuse it
/// alone). Only images of `libcairn-ckpt.so` are checked (by their magic): another preload
/// library's images are for its own restorer to judge. Returns whether the process ran in a
/// pid namespace of Cairn's.
fn fits(path: &Path, version: u64, proc: usize, here: &cairn_ckpt::Machine) -> Result<bool> {
    if !cairn_ckpt::is_image(path) {
        return Ok(false);
    }
    let h = cairn_ckpt::read_header(path).map_err(|e| {
        Error::new(
            ErrorKind::Engine,
            format!("version {version}, process {proc}: {e}"),
        )
    })?;
    if let Err(why) = h.fits(here) {
        bail!(
            Machine,
            "cannot restart version {version} here: process {proc}: {why}"
        );
    }
    Ok(h.ids & cairn_ckpt::IDS_NAMESPACE != 0)
}
