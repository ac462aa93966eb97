//! The two system calls the launcher needs that the standard library does not offer: sending
//! a signal to a process, and confining a child to a CPU set between fork and exec.
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
