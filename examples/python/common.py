"""What heat2d.py and nbody.py share and is not about Cairn: the FNV-1a checksum of the C
examples over all ranks, and command-line parsing that reports errors once for all ranks."""

import argparse
import sys

from mpi4py import MPI

FNV_OFFSET = 0xCBF29CE484222325
MASK = (1 << 64) - 1


def fnv1a(h: int, data: bytes) -> int:
    """64-bit FNV-1a, continued from a previous hash value ``h``."""
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def checksum(comm: MPI.Comm, data: bytes) -> int:
    """FNV-1a over every rank's ``data`` in rank order, on every rank: the running hash
    travels down the ranks, so the result is the same for any rank count."""
    rank, nranks = comm.Get_rank(), comm.Get_size()
    h = FNV_OFFSET if rank == 0 else comm.recv(source=rank - 1, tag=77)
    h = fnv1a(h, data)
    if rank < nranks - 1:
        comm.send(h, dest=rank + 1, tag=77)
    return comm.bcast(h, root=nranks - 1)


class Parser(argparse.ArgumentParser):
    """Reports argument errors once (rank 0) and leaves with code 2 on every rank."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if MPI.COMM_WORLD.Get_rank() == 0:
            self.print_usage(sys.stderr)
            print(f"{self.prog.removesuffix('.py')}: {message}", file=sys.stderr)
        sys.exit(2)


def count(minimum: int):
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        v = int(text)
        if v < minimum:
            raise ValueError
        return v

    parse.__name__ = f"integer >= {minimum}"
    return parse
