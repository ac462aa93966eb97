//! Exercises every `Comm` operation of `MpiComm` under mpirun and checks the results on
//! every rank; run by `tests/mpi.rs`. Prints `comm_check: rank <r> ok` or exits 1.

use cairn_comm::{Comm, Op, Topology};
use cairn_mpi::mpi::traits::*;
use cairn_mpi::MpiComm;

fn check(cond: bool, what: &str, rank: usize) {
    if !cond {
        eprintln!("comm_check: rank {rank}: {what} failed");
        std::process::exit(1);
    }
}

fn main() {
    let universe = cairn_mpi::mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    // Run on a sub-communicator (odd/even split) when asked, to show any communicator works.
    let split = std::env::args().any(|a| a == "--split");
    let base = if split {
        world
            .split_by_color(cairn_mpi::mpi::topology::Color::with_value(
                world.rank() % 2,
            ))
            .expect("split")
    } else {
        world.duplicate()
    };
    let comm = MpiComm::new(&base);
    let (r, n) = (comm.rank(), comm.size());
    check(
        n == base.size() as usize && r == base.rank() as usize,
        "rank/size",
        r,
    );

    let mut v = [r as i64, -(r as i64), 1];
    comm.allreduce_i64(&mut v, Op::Min).unwrap();
    check(v == [0, -(n as i64 - 1), 1], "allreduce min", r);
    let mut s = [r as i64 + 1];
    comm.allreduce_i64(&mut s, Op::Sum).unwrap();
    check(s[0] == (n * (n + 1) / 2) as i64, "allreduce sum", r);
    let mut m = [r as i64];
    comm.allreduce_i64(&mut m, Op::Max).unwrap();
    check(m[0] == n as i64 - 1, "allreduce max", r);

    let mine = vec![r as u8; r + 1];
    let all = comm.allgather(&mine).unwrap();
    check(
        all.len() == n
            && all
                .iter()
                .enumerate()
                .all(|(i, b)| *b == vec![i as u8; i + 1]),
        "allgather",
        r,
    );

    let empty = comm.allgather(&[]).unwrap();
    check(
        empty.len() == n && empty.iter().all(Vec::is_empty),
        "allgather of nothing",
        r,
    );
    let some = comm
        .allgather(if r == 0 { &[7u8][..] } else { &[] })
        .unwrap();
    check(
        some[0] == [7] && some[1..].iter().all(Vec::is_empty),
        "allgather with empty parts",
        r,
    );

    let right = (r + 1) % n;
    let left = (r + n - 1) % n;
    let got = comm
        .sendrecv(&vec![r as u8; 1000 + r], right, left)
        .unwrap();
    check(got == vec![left as u8; 1000 + left], "sendrecv ring", r);

    // Point to point: everyone sends to rank 0, which receives in rank order.
    if r == 0 {
        for src in 1..n {
            let got = comm.recv(src).unwrap();
            check(got == vec![src as u8; 3 * src], "recv from every rank", r);
        }
    } else {
        comm.send(&vec![r as u8; 3 * r], 0).unwrap();
    }

    check(comm.all_agree(true).unwrap(), "all_agree(true)", r);
    check(
        !comm.all_agree(r != n - 1).unwrap(),
        "all_agree with one dissenter",
        r,
    );
    comm.barrier().unwrap();

    let topo = Topology::discover(&comm, 2.min(n), None).unwrap();
    check(
        topo.nodes == 2.min(n) && topo.node == r * topo.nodes / n,
        "simulated topology",
        r,
    );
    println!("comm_check: rank {r} ok");
}
