//! Runs `examples/comm_check.rs` under mpirun with 1, 2 and 4 ranks, on the world
//! communicator and on split ones.

use std::path::PathBuf;
use std::process::Command;

fn example() -> PathBuf {
    // target/<profile>/deps/mpi-<hash> -> target/<profile>/examples/comm_check
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("comm_check")
}

fn run(ranks: usize, args: &[&str]) {
    let out = Command::new("mpirun")
        .args(["--oversubscribe", "-n", &ranks.to_string()])
        .arg(example())
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("mpirun runs (install openmpi-bin: ./run test does)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{ranks} ranks {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches(" ok").count(), ranks, "{stdout}");
}

#[test]
fn collectives_work_on_world_and_split_communicators() {
    for n in [1, 2, 4] {
        run(n, &[]);
    }
    run(4, &["--split"]);
}
