//! The system calls the launcher needs that the standard library does not offer: sending
//! a signal to a process, confining a child to a CPU set between fork and exec, mapping
//! image files for the engine, and finding a tree's process on this host by its pid in its
//! namespace.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Sends `sig` to process `pid`.
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let r = unsafe { libc::kill(pid, sig) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// This process's process group.
pub fn process_group() -> i32 {
    // SAFETY: getpgrp(2) takes nothing and cannot fail.
    unsafe { libc::getpgrp() }
}

/// Makes `cmd`'s child run on `cpus` only: `sched_setaffinity` after fork, before exec, so
/// the program and every thread it creates start inside the set.
pub fn confine_on_exec(cmd: &mut Command, cpus: &[usize]) {
    // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &c in cpus.iter().filter(|&&c| c < bits) {
        // SAFETY: CPU_SET does not check its index; the filter keeps it inside the set.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe functions may be called: it makes one system call on a set prepared
    // before the fork (copied into the closure) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
}

/// Makes the process `cmd` starts end (SIGKILL) when the thread that starts it does: a job
/// process ends with the sub-coordinator that runs it, and a sub-coordinator on the
/// launcher's host with the launcher, as an MPI rank ends with its mpirun, rather than run
/// on as an orphan that a restart would then duplicate. Both start their children from
/// their main thread, which lives until the job ends.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe system calls (prctl, getppid), allocating nothing.
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            // The launcher may have died before the prctl: then no signal would come.
            if libc::getppid() != parent {
                return Err(io::Error::other("the launcher ended"));
            }
            Ok(())
        });
    }
}

/// `file` set to `len` bytes (new bytes read as zeros) and mapped shared for reading and
/// writing: what a restore writes an image into, so it reaches the file (and the restorer)
/// without a copy in the root's memory. The file must be one this process created privately
/// and nothing else writes.
pub fn map_file_mut(file: &std::fs::File, len: u64) -> io::Result<memmap2::MmapMut> {
    file.set_len(len)?;
    let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a shared mapping of a private file this process just sized; nothing else
    // truncates it while the mapping lives.
    unsafe { memmap2::MmapOptions::new().len(len).map_mut(file) }
}

/// The pid, as this host's `/proc` shows it, of the process that is `nspid` in the pid
/// namespace whose inode is `ns`. A process of a launched tree sees a `/proc` of its tree's
/// own and knows only its pid in the namespace; its sub-coordinator finds the rest here.
pub fn host_pid(ns: u64, nspid: u32) -> Option<u32> {
    let want = std::path::PathBuf::from(format!("pid:[{ns}]"));
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok() != Some(want.clone()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let innermost = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|ids| ids.split_whitespace().last())
            .and_then(|id| id.parse::<u32>().ok());
        if innermost == Some(nspid) {
            return Some(pid);
        }
    }
    None
}
