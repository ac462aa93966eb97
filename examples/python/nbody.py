#!/usr/bin/env python3
"""nbody.py -- examples/nbody.c in Python: the DEEP-ER N-body mock-up with checkpoint/restart.

N bodies attract each other by softened gravity; each step computes the acceleration of every
body from all bodies, then updates velocities and positions (semi-implicit Euler). Each rank
owns a contiguous block of N / P bodies (P must divide N) and the blocks travel around a ring
of ranks (P - 1 Sendrecv shifts per step). Forces are summed in global body order, one body
after the other (a running sum, ``numpy.add.accumulate``, as the C loop does), so the results
are bit for bit those of nbody.c for every rank count.

Cairn usage, with the explicit calls (heat2d.py shows the ``ck.steps`` loop instead): the step
counter (id 0, int64), positions (id 1), velocities (id 2) and masses (id 3, float64) are
protected, ``ck.resume()`` restores the newest checkpoint before the loop and
``ck.checkpoint(step)`` runs every K steps: the layout of nbody.c, whose checkpoints restore
here and the reverse.

Run:
    mpirun -n 4 python examples/python/nbody.py --bodies 1024 --steps 100 --every 10
Output lines start with "nbody:", as the C program's. Exit codes: 0 success, 2 bad arguments,
3 a Cairn call failed.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

import cairn
from common import MASK, Parser, checksum, count

SEED = 20170504  # initial conditions; the same for every run and rank count
DT = 1e-3  # time step
SOFT2 = 1e-3  # softening length squared
GAMMA = 0x9E3779B97F4A7C15
BLOCK = 64  # owned bodies whose forces are computed at once (bounds the temporaries)


def uniform(state: int) -> "tuple[int, float]":
    """splitmix64: the next state and a uniform double in [0, 1)."""
    state = (state + GAMMA) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return state, (z >> 11) * 2.0**-53


def main() -> int:
    p = Parser(prog="nbody.py")
    p.add_argument("--bodies", type=count(1), default=4096)
    p.add_argument("--steps", type=count(0), default=100)
    p.add_argument("--every", type=count(0), default=10)
    p.add_argument("--name", default="nbody")
    p.add_argument("--config", default=None)
    p.add_argument("--sleep-ms", type=count(0), default=0)
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    n = args.bodies
    if n % nranks:
        p.error(f"the rank count ({nranks}) must divide the body count ({n})")
    nloc = n // nranks
    first = rank * nloc

    # Owned bodies: x,y,z per body in pos and vel; `bodies` holds x,y,z,m of all bodies in
    # global order, rebuilt from the ring every step (scratch, not protected).
    pos, vel, mass = np.empty((nloc, 3)), np.empty((nloc, 3)), np.empty(nloc)
    state = (SEED + first * 7 * GAMMA) & MASK  # 7 draws per body
    for i in range(nloc):
        for k in range(3):
            state, r = uniform(state)
            pos[i, k] = 2.0 * r - 1.0
        for k in range(3):
            state, r = uniform(state)
            vel[i, k] = 0.2 * r - 0.1
        state, r = uniform(state)
        mass[i] = (0.5 + r) / n

    with cairn.Checkpointer(args.name, comm, args.config) as ck:
        step = ck.protect(0, np.zeros(1, dtype=np.int64))
        ck.protect(1, pos)
        ck.protect(2, vel)
        ck.protect(3, mass)
        restored = ck.resume()
        if rank == 0:
            if restored is not None:
                print(f"nbody: restarted from checkpoint v{restored} (step {step[0]})", flush=True)
            else:
                print("nbody: no checkpoint, starting fresh", flush=True)

        left, right = (rank - 1) % nranks, (rank + 1) % nranks
        bodies = np.empty((n, 4))
        first_step = int(step[0])
        checkpoints, ckpt_seconds, step_seconds = 0, 0.0, 0.0
        while step[0] < args.steps:
            t0 = MPI.Wtime()
            bodies[first:first + nloc, :3] = pos
            bodies[first:first + nloc, 3] = mass
            for s in range(1, nranks):
                out, into = (rank + s - 1) % nranks, (rank + s) % nranks
                comm.Sendrecv(bodies[out * nloc:(out + 1) * nloc], left, s,
                              bodies[into * nloc:(into + 1) * nloc], right, s)
            for b in range(0, nloc, BLOCK):
                me = bodies[first + b:first + min(b + BLOCK, nloc), None, :]
                dx = bodies[None, :, 0] - me[:, :, 0]
                dy = bodies[None, :, 1] - me[:, :, 1]
                dz = bodies[None, :, 2] - me[:, :, 2]
                r2 = dx * dx + dy * dy + dz * dz + SOFT2
                f = bodies[None, :, 3] / (r2 * np.sqrt(r2))
                acc = np.stack([np.add.accumulate(f * d, axis=1)[:, -1] for d in (dx, dy, dz)], axis=1)
                vel[b:b + len(acc)] += DT * acc
            pos += DT * vel
            step[0] += 1
            step_seconds += MPI.Wtime() - t0

            # As in nbody.c, the checkpoint follows the increment: (step, pos, vel, mass) means
            # "step steps completed", and a resumed run never rewrites its restored version.
            v = int(step[0])
            if args.every and v % args.every == 0 and v != restored:
                c0 = MPI.Wtime()
                ck.checkpoint(v)
                dt = MPI.Wtime() - c0
                ckpt_seconds += dt
                checkpoints += 1
                if rank == 0:
                    print(f"nbody: step {v} checkpoint v{v} {dt * 1e3:.3f} ms", flush=True)
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1000)

        # FNV-1a over x,y,z,vx,vy,vz of each body in global order.
        h = checksum(comm, np.concatenate([pos, vel], axis=1).tobytes())
        slowest = np.zeros(2)
        comm.Reduce(np.array([ckpt_seconds, step_seconds]), slowest, op=MPI.MAX, root=0)
        ran = int(step[0]) - first_step
        if rank == 0:
            print(f"nbody: steps {args.steps} checkpoints {checkpoints} checkpoint-time {slowest[0] * 1e3:.3f} ms")
            print(f"nbody: step-time {slowest[1] * 1e3 / ran if ran else 0.0:.3f} ms")
            print(f"nbody: final checksum {h:016x}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except cairn.CairnError as e:
        print(f"nbody: rank {MPI.COMM_WORLD.Get_rank()}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        MPI.COMM_WORLD.Abort(3)
