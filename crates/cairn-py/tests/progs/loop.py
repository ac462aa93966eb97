"""loop.py: a restartable loop over arrays of every dtype and Python values, for the tests.

usage: loop.py OUT --steps S --every K [--mpi] [--sleep-ms M] [--name NAME] [--dtype-of-1 T]

Each rank protects one array of each Cairn dtype (region ids 1..9, sizes that differ by
rank), a bytearray (id 10) and an array.array (id 11), keeps a numpy Generator's state and
Python's `random` state in ck.state, and runs ``ck.steps(range(S), every=K)``: every step
changes every array from both generators. A run killed anywhere and started again must end
bit for bit like an uninterrupted one. At the end each rank writes its arrays and values
to OUT.rank<r>.npz.

Output: "loop: rank <r> restored v<V>" after a restart, "loop: checkpoint v<V>" (rank 0)
after each checkpoint, "loop: rank <r> done".
"""

import argparse
import array
import random
import sys
import time

import numpy as np

import cairn


def say(line: str) -> None:
    """One write per line: with unbuffered output under mpirun, print()'s separate write of
    the newline lets other ranks' lines in between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float32", "float64"]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--mpi", action="store_true")
    p.add_argument("--sleep-ms", type=int, default=0)
    p.add_argument("--name", default="loop")
    args = p.parse_args()

    comm = None
    if args.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    with cairn.Checkpointer(args.name, comm) as ck:
        r = ck.rank
        arrays = {}
        for i, dt in enumerate(DTYPES):
            arrays[dt] = ck.protect(i + 1, np.zeros(1000 + 37 * i + r, dtype=dt))
        raw = ck.protect(10, bytearray(4099 + r))
        doubles = ck.protect(11, array.array("d", [0.0] * (77 + r)))
        rng = np.random.default_rng(1234 + r)
        random.seed(99 + r)
        ck.state["rng"] = rng.bit_generator.state
        ck.state["random"] = random.getstate()
        ck.state["history"] = []

        steps = ck.steps(range(args.steps), every=args.every)
        if ck.restored_version is not None:
            say(f"loop: rank {r} restored v{ck.restored_version}")
            rng.bit_generator.state = ck.state["rng"]
            random.setstate(ck.state["random"])
        seen = ck.stats()["checkpoints"]
        for step in steps:
            n = ck.stats()["checkpoints"]
            if n > seen and r == 0:
                say(f"loop: checkpoint v{step}")
            seen = n
            for dt, a in arrays.items():
                if a.dtype.kind == "f":
                    a += rng.standard_normal(a.size).astype(dt)
                else:
                    info = np.iinfo(a.dtype)
                    a += rng.integers(info.min, info.max, size=a.size, dtype=dt, endpoint=True)
            raw[:] = rng.bytes(len(raw))
            for k in range(len(doubles)):
                doubles[k] += random.random()
            ck.state["history"] = (ck.state["history"] + [step, random.randrange(1 << 30)])[-6:]
            ck.state["rng"] = rng.bit_generator.state
            ck.state["random"] = random.getstate()
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1000)
        out = {dt: a for dt, a in arrays.items()}
        out["raw"] = np.frombuffer(raw, dtype=np.uint8)
        out["doubles"] = np.frombuffer(doubles, dtype=np.float64)
        out["history"] = np.array(ck.state["history"], dtype=np.int64)
        out["random"] = np.array(random.getstate()[1], dtype=np.int64)
        np.savez(f"{args.out}.rank{r}.npz", **out)
        say(f"loop: rank {r} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
