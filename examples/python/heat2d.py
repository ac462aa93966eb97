#!/usr/bin/env python3
"""heat2d.py -- examples/heat2d.c in Python: 2D heat diffusion that checkpoints and restarts.

The program solves the heat equation on an N x N grid with a Jacobi 5-point stencil. The grid
is split into contiguous blocks of rows, one per rank (the rank count must divide N); each
rank keeps one halo row above and below its block and exchanges them with its neighbours at
the start of every step. The top edge is held at 1.0 and the other three at 0.0.

Cairn usage: the local field with its halo rows is protected as region 1 (float64), and
``ck.steps(..., id=0)`` keeps the number of steps done as region 0 (int64) and checkpoints
every K steps with version = step. That is exactly what heat2d.c protects, so a checkpoint
written by either program restores into the other, and every run, interrupted or not, in C
or in Python, on any rank count, ends with the same checksum: the arithmetic per cell is the
C program's, in the same order.

Run (after `pip install ./crates/cairn-py` and mpi4py built against the system MPI):
    mpirun -n 4 python examples/python/heat2d.py --n 512 --steps 1000 --every 100
Output lines start with "heat2d:", as the C program's; the last one is a 64-bit FNV-1a
checksum of the whole field. Exit codes: 0 success, 2 bad arguments, 3 a Cairn call failed.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

import cairn
from common import Parser, checksum, count


def main() -> int:
    p = Parser(prog="heat2d.py")
    p.add_argument("--n", type=count(3), default=512)
    p.add_argument("--steps", type=count(0), default=1000)
    p.add_argument("--every", type=count(0), default=100)
    p.add_argument("--name", default="heat2d")
    p.add_argument("--config", default=None)
    p.add_argument("--sleep-ms", type=count(0), default=0)
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    if args.n % nranks:
        p.error(f"the rank count ({nranks}) must divide N ({args.n})")
    rows, cols = args.n // nranks, args.n

    # Local block: `rows` owned rows plus a halo row above (index 0) and below (rows + 1).
    u = np.zeros((rows + 2, cols))
    if rank == 0:
        u[1, :] = 1.0  # global row 0: the hot top edge

    up = rank - 1 if rank > 0 else MPI.PROC_NULL
    down = rank + 1 if rank < nranks - 1 else MPI.PROC_NULL
    # Rows the stencil updates: all owned rows except the global top and bottom edges.
    lo, hi = (2 if rank == 0 else 1), (rows - 1 if rank == nranks - 1 else rows)

    with cairn.Checkpointer(args.name, comm, args.config) as ck:
        ck.protect(1, u)
        steps = ck.steps(range(args.steps), every=args.every, id=0)  # restores, if it can
        restored = ck.restored_version
        if rank == 0:
            if restored is not None:
                print(f"heat2d: restarted from checkpoint v{restored} (step {restored})", flush=True)
            else:
                print("heat2d: no checkpoint, starting fresh", flush=True)
        progress = Progress(ck)
        # The stencil never writes the fixed edges of `nxt`, so they come from the (possibly
        # restored) field once; each step then copies `nxt` back into `u`.
        nxt = u.copy()
        for step in steps:
            progress.report(step)
            comm.Sendrecv(u[1], up, 0, u[rows + 1], down, 0)
            comm.Sendrecv(u[rows], down, 1, u[0], up, 1)
            nxt[lo:hi + 1, 1:-1] = 0.25 * (
                u[lo - 1:hi, 1:-1] + u[lo + 1:hi + 2, 1:-1] + u[lo:hi + 1, :-2] + u[lo:hi + 1, 2:]
            )
            # Copy back rather than rebind, so the protected array stays the live field.
            u[1:rows + 1] = nxt[1:rows + 1]
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1000)
        progress.report(args.steps)

        # One FNV-1a pass over the owned rows of the whole grid in row order.
        h = checksum(comm, u[1:rows + 1].tobytes())
        slowest = comm.reduce(ck.stats()["checkpoint_seconds"], op=MPI.MAX, root=0)
        if rank == 0:
            print(f"heat2d: steps {args.steps} checkpoints {progress.count} checkpoint-time {slowest * 1e3:.3f} ms")
            print(f"heat2d: final checksum {h:016x}", flush=True)
    return 0


class Progress:
    """Prints a line for each checkpoint ck.steps() took since the last report (rank 0)."""

    def __init__(self, ck: cairn.Checkpointer) -> None:
        self.ck = ck
        self.count = 0
        self.seconds = 0.0

    def report(self, step: int) -> None:
        stats = self.ck.stats()
        if stats["checkpoints"] > self.count:
            ms = (stats["checkpoint_seconds"] - self.seconds) * 1e3
            self.count, self.seconds = stats["checkpoints"], stats["checkpoint_seconds"]
            if self.ck.rank == 0:
                # ck.steps() checkpoints after the step, with version = steps done = `step`.
                print(f"heat2d: step {step} checkpoint v{step} {ms:.3f} ms", flush=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except cairn.CairnError as e:
        print(f"heat2d: rank {MPI.COMM_WORLD.Get_rank()}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        MPI.COMM_WORLD.Abort(3)
