"""mpi_cases.py CASE: small MPI programs for the tests, one per CASE, each run by every rank.

  mismatch-write   protect a float64 array (id 1) and write checkpoint v1
  mismatch-read    protect id 1 as float32 and restart: prints each rank's exception
  split            a checkpointer over half of COMM_WORLD (MPI_Comm_split): checkpoint,
                   change, restart; prints "split: rank <r> ok <size>"
  finalized        MPI finalized before the checkpointer is closed: close() is an error,
                   dropping it is not, and the process ends normally ("finalized: ok")
  uninitialised    mpi4py told not to initialise MPI: a Checkpointer over a communicator
                   is a StateError, not an MPI_Init behind mpi4py's back
"""

import sys

import mpi4py

if sys.argv[1:] == ["uninitialised"]:
    mpi4py.rc.initialize = False

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import cairn


def say(line: str) -> None:
    """One write per line: with unbuffered output under mpirun, print()'s separate write of
    the newline lets other ranks' lines in between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(case: str) -> int:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank() if MPI.Is_initialized() else 0
    if case == "mismatch-write":
        with cairn.Checkpointer("mm", comm) as ck:
            ck.protect(1, np.full(100 + rank, rank, dtype=np.float64))
            ck.checkpoint(1)
    elif case == "mismatch-read":
        with cairn.Checkpointer("mm", comm) as ck:
            ck.protect(1, np.zeros(100 + rank, dtype=np.float32))
            try:
                ck.resume()
            except cairn.CairnError as e:
                say(f"mismatch: rank {rank} {type(e).__name__}: {e}")
    elif case == "split":
        sub = comm.Split(rank % 2, rank)
        with cairn.Checkpointer(f"split{rank % 2}", sub) as ck:
            a = ck.protect(1, np.full(10, rank, dtype=np.int64))
            ck.checkpoint(1)
            a[:] = -1
            assert ck.resume() == 1 and (a == rank).all()
            say(f"split: rank {rank} ok {ck.size}")
        sub.Free()
    elif case == "finalized":
        ck = cairn.Checkpointer("fin", comm)
        ck.protect(1, np.zeros(10))
        ck.checkpoint(1)
        MPI.Finalize()
        try:
            ck.close()
        except cairn.StateError as e:
            assert "before MPI.Finalize" in str(e), e
        del ck
        ck2 = cairn.Checkpointer  # the module still works for solo use
        assert ck2 is not None
        say("finalized: ok")
    elif case == "uninitialised":
        try:
            cairn.Checkpointer("uninit", comm)
        except cairn.StateError as e:
            assert "MPI is not initialised" in str(e), e
            assert not MPI.Is_initialized()
            say("uninitialised: ok")
    else:
        print(f"unknown case {case}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
