//! The Fortran module (`native/fortran/cairn.f90`, `use cairn`) with real MPI and real
//! processes. `native/fortran/build.sh` installs the module into a prefix holding a copy of the
//! freshly built libcairn and builds `examples/heat2d.f90` there, as a user would; the example
//! is killed with SIGKILL under mpirun (4 ranks, 2 simulated nodes) and relaunched, and must
//! end bit-exactly as an uninterrupted run, and as the C example does. The programs in
//! `tests/fortran/` restore every element type bit for bit and report errors without stopping.
//!
//! Needs Open MPI's Fortran wrapper (mpif90, with gfortran) besides mpicc and mpirun, and
//! `cargo build --release -p cairn-capi` (or the libcairn.so that `cargo test` builds).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use support::*;

/// Flags for everything Fortran built here: the module and the programs must be standard
/// Fortran 2018 and compile without a warning.
const FFLAGS: &str = "-O2 -std=f2018 -Wall -Wextra -Werror";

/// The programs built against the installed module.
struct Programs {
    heat: PathBuf,
    kinds: PathBuf,
    errors: PathBuf,
}

fn run_tool(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn build() -> Result<Programs, String> {
    check_mpi_tools()?;
    if !Command::new("mpif90")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Err(
            "`mpif90` is not available: the Fortran tests need Open MPI's Fortran compiler \
             wrapper and gfortran (on Debian/Ubuntu: apt-get install libopenmpi-dev gfortran; \
             `./run test` installs them)"
                .into(),
        );
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A fixed directory under target/, as for the C programs (support::bins).
    let prefix = profile_dir().join("fortran-tests");
    copy_libcairn(&prefix.join("lib"))?;
    run_tool(
        Command::new("sh")
            .arg(manifest.join("../../native/fortran/build.sh"))
            .arg(&prefix)
            .env("FC", "mpif90")
            .env("FFLAGS", FFLAGS),
        "native/fortran/build.sh",
    )?;
    let lib = prefix.join("lib");
    for name in ["kinds", "errors"] {
        let out = prefix.join("bin").join(name);
        run_tool(
            Command::new("mpif90")
                .args(FFLAGS.split(' '))
                .arg("-I")
                .arg(prefix.join("include"))
                .arg("-o")
                .arg(&out)
                .arg(manifest.join(format!("tests/fortran/{name}.f90")))
                .arg("-L")
                .arg(&lib)
                .args(["-lcairnf", "-lcairn"])
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .current_dir(&prefix),
            &format!("mpif90 of tests/fortran/{name}.f90"),
        )?;
    }
    let bin = prefix.join("bin");
    Ok(Programs {
        heat: bin.join("heat2d_f"),
        kinds: bin.join("kinds"),
        errors: bin.join("errors"),
    })
}

/// The Fortran programs, built once per test binary.
fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Result<Programs, String>> = OnceLock::new();
    match PROGRAMS.get_or_init(build) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

// ---- heat2d.f90 -------------------------------------------------------------------------------

const HEAT: [&str; 6] = ["--n", "128", "--steps", "400", "--every", "50"];
const RANKS: usize = 4;
const NODES: usize = 2;

/// `heat2d: final checksum <hex>`.
fn checksum(o: &Outcome) -> String {
    o.lines()
        .find_map(|l| l.strip_prefix("heat2d: final checksum "))
        .unwrap_or_else(|| panic!("no final checksum\n{}", o.show()))
        .to_string()
}

/// The version of `heat2d: step <s> checkpoint v<v> <t> ms`.
fn checkpoint_line(l: &str) -> Option<i64> {
    let (_, v) = l
        .strip_prefix("heat2d: step ")?
        .split_once(" checkpoint v")?;
    v.split_whitespace().next()?.parse().ok()
}

/// The version of `heat2d: restarted from checkpoint v<v> (step <s>)`, checking that the step
/// restored is the version.
fn restarted_from(o: &Outcome) -> Option<i64> {
    let rest = o
        .lines()
        .find_map(|l| l.strip_prefix("heat2d: restarted from checkpoint v"))?;
    let v: i64 = rest.split_whitespace().next()?.parse().ok()?;
    assert!(
        rest.ends_with(&format!("(step {v})")) && !o.stderr.contains("heat2d: warning"),
        "the restored step must be the version\n{}",
        o.show()
    );
    Some(v)
}

fn heat(args: &[&str], tiers: &Tiers) -> Command {
    command(&programs().heat, Some(RANKS), args, tiers)
}

#[test]
fn heat2d_f_restarts_bit_exactly_after_kill9() {
    let _mpi = mpi_lock();
    let reference = run(heat(&HEAT, &Tiers::new(NODES)), "heat2d_f, uninterrupted");
    reference.assert_ok();
    assert!(
        reference.stdout.contains("no checkpoint, starting fresh"),
        "{}",
        reference.show()
    );
    let expected = checksum(&reference);

    let tiers = Tiers::new(NODES);
    let mut slow = HEAT.to_vec();
    slow.extend(["--sleep-ms", "3"]);
    let mut job = spawn(heat(&slow, &tiers), "heat2d_f, to be killed");
    // Rank 2 lives on the second simulated node. Found first, so that the kill follows the
    // checkpoint line as closely as possible.
    let victim = rank_pid(job.pid(), "heat2d_f", 2, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no process for rank 2 under mpirun {}", job.pid()));
    let second = job.wait_line(Duration::from_secs(60), |l| {
        checkpoint_line(l).is_some_and(|v| v >= 100)
    });
    assert!(second.is_some(), "no checkpoint v100; saw {:?}", job.seen);
    kill9(victim);
    let killed = job.finish(Duration::from_secs(60));
    assert!(
        !killed.status.success() && !killed.stdout.contains("final checksum"),
        "the killed run should not have finished\n{}",
        killed.show()
    );
    // Rank 0 prints a checkpoint line only once the checkpoint is complete on every rank.
    let newest = killed.lines().filter_map(checkpoint_line).max().unwrap();

    let again = run(heat(&HEAT, &tiers), "heat2d_f, relaunched");
    again.assert_ok();
    let from = restarted_from(&again)
        .unwrap_or_else(|| panic!("the relaunch did not restart\n{}", again.show()));
    assert_eq!(
        from,
        newest,
        "restarted from v{from}, but v{newest} was the newest reported complete\n{}\n{}",
        killed.show(),
        again.show()
    );
    assert_eq!(
        checksum(&again),
        expected,
        "the relaunched run ends differently from the uninterrupted one\n{}",
        again.show()
    );
}

#[test]
fn heat2d_f_and_heat2d_c_compute_the_same_and_resume_each_other() {
    let c_heat = &bins().heat2d;
    let _mpi = mpi_lock();
    let fortran = run(heat(&HEAT, &Tiers::new(NODES)), "heat2d_f");
    fortran.assert_ok();
    let c = run(
        command(c_heat, Some(RANKS), &HEAT, &Tiers::new(NODES)),
        "heat2d (C)",
    );
    c.assert_ok();
    assert_eq!(
        checksum(&fortran),
        checksum(&c),
        "the Fortran and C examples compute differently\n{}\n{}",
        fortran.show(),
        c.show()
    );

    // The same data model: the C program's checkpoint v200 resumes the Fortran one.
    let tiers = Tiers::new(NODES);
    let mut half = HEAT.to_vec();
    half[3] = "200";
    run(
        command(c_heat, Some(RANKS), &half, &tiers),
        "heat2d (C), first half",
    )
    .assert_ok();
    let rest = run(heat(&HEAT, &tiers), "heat2d_f, second half");
    rest.assert_ok();
    assert_eq!(restarted_from(&rest), Some(200), "{}", rest.show());
    assert_eq!(checksum(&rest), checksum(&c), "{}", rest.show());
}

// ---- Every element type, and errors ------------------------------------------------------------

#[test]
fn every_kind_and_rank_is_restored_bit_for_bit() {
    let tiers = Tiers::new(0);
    for (args, first) in [
        (&[][..], "kinds: restarted v1"),
        (&["--again"][..], "kinds: resumed v1"),
    ] {
        let o = run(command(&programs().kinds, None, args, &tiers), "kinds");
        o.assert_ok();
        assert!(
            o.stdout.starts_with(first)
                && o.stdout.ends_with("kinds: done\n")
                && o.lines().filter(|l| l.ends_with(" ok")).count() == 12
                && !o.stdout.contains("MISMATCH"),
            "{}",
            o.show()
        );
    }
}

#[test]
fn errors_come_through_with_their_messages_and_never_stop_the_program() {
    let tiers = Tiers::new(0);
    let bad = tiers.write("bad.toml", "[cache]\nkepp = 3\n");
    let _mpi = mpi_lock();
    let o = run(
        command(
            &programs().errors,
            Some(2),
            &[bad.to_str().unwrap()],
            &tiers,
        ),
        "errors",
    );
    o.assert_ok();
    // (case, code, words of its message)
    let expected: [(&str, i32, &[&str]); 13] = [
        ("init before MPI_Init", -8, &["MPI is not running"]),
        ("protect before init", -3, &["not initialised"]),
        (
            "config_set of an unknown key",
            -1,
            &["kepp", "cairn_config_set"],
        ),
        (
            "init with an unknown handle",
            -2,
            &["123456", "not a communicator"],
        ),
        ("init with MPI_COMM_NULL", -2, &["not a communicator"]),
        (
            "init with a bad configuration file",
            -1,
            &["kepp", "bad.toml"],
        ),
        ("init", 0, &[]),
        (
            "protect of a non-contiguous section",
            -2,
            &["id 1", "not contiguous"],
        ),
        // After a failure of libcairn the message is libcairn's again, not the module's.
        (
            "unprotect of an unknown id",
            -2,
            &["region 99 is not protected"],
        ),
        ("restart of a missing version", -7, &["errors v7"]),
        ("finalize", 0, &[]),
        ("finalize again", -3, &["not initialised"]),
        ("init after MPI_Finalize", -8, &["MPI is not running"]),
    ];
    for (case, code, words) in expected {
        let line = o
            .lines()
            .find_map(|l| l.strip_prefix(&format!("errors: {case}: ")))
            .unwrap_or_else(|| panic!("no line for {case:?}\n{}", o.show()));
        let ok = if code == 0 {
            line == "ok"
        } else {
            line.starts_with(&format!("{code} ")) && words.iter().all(|w| line.contains(w))
        };
        assert!(
            ok,
            "{case}: expected code {code} and {words:?}, got {line:?}\n{}",
            o.show()
        );
    }
    // Without ierr: one line on standard error per rank, and the program goes on.
    assert!(
        o.stderr
            .matches("cairn: cairn_checkpoint failed: call not valid in the current state: ")
            .count()
            == 2
            && o.stdout.contains("errors: still running\n")
            && o.stdout.ends_with("errors: done\n"),
        "{}",
        o.show()
    );
}
