"""files.py: a program that writes its own checkpoint files through Cairn's file API.

usage: files.py OUT --steps S --every K [--mpi] [--sleep-ms M] [--reject-rank R]

Each rank evolves a float64 field (a pure function of rank and step is *not* assumed: the
field is updated from its previous value, so a restart must restore it exactly) and every K
steps saves it with numpy into a routed file, plus a small JSON file with the step, inside
``ck.output(step)``. On start it restarts with ``ck.restart_files``: each rank loads its files
and accepts them if the step in the JSON file is the version offered; ``--reject-rank R``
makes rank R reject the first checkpoint it is offered, so every rank falls back together.
At the end each rank saves its field to OUT.rank<r>.npy.

Output: "files: rank <r> restored v<V>", "files: rank <r> rejected v<V>",
"files: checkpoint v<V>" (rank 0), "files: rank <r> done".
"""

import argparse
import json
import sys
import time

import numpy as np

import cairn


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--mpi", action="store_true")
    p.add_argument("--sleep-ms", type=int, default=0)
    p.add_argument("--reject-rank", type=int, default=-1)
    args = p.parse_args()

    comm = None
    if args.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    with cairn.Checkpointer("files", comm) as ck:
        r = ck.rank
        field = np.linspace(0.0, 1.0, 5000 + 17 * r)
        rejected = False

        def read(got: cairn.RestoredFiles) -> bool:
            nonlocal field, rejected
            with open(got.route("meta.json")) as f:
                meta = json.load(f)
            loaded = np.load(got.route(f"field.{r}.npy"))
            if r == args.reject_rank and not rejected:
                rejected = True
                say(f"files: rank {r} rejected v{got.version}")
                return False
            field = loaded
            return meta["step"] == got.version and got.label == f"step {got.version}"

        got = ck.restart_files(read)
        start = 0
        if got is not None:
            start = got.version
            say(f"files: rank {r} restored v{got.version}")
        for step in range(start + 1, args.steps + 1):
            field = np.sin(field * 1.7 + step * 0.01) + field * 0.5
            time.sleep(args.sleep_ms / 1000)
            if step % args.every == 0:
                with ck.output(step, label=f"step {step}") as out:
                    np.save(out.route(f"field.{r}.npy"), field)
                    with open(out.route("meta.json"), "w") as f:
                        json.dump({"step": step}, f)
                if r == 0 and out.kept:
                    say(f"files: checkpoint v{step}")
        np.save(f"{args.out}.rank{r}.npy", field)
        say(f"files: rank {r} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
